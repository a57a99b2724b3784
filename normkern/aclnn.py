"""The aclnn layer: CANN's two-phase calls with CANN's names and argument order.

Tensors are NumPy arrays (None stands for a null pointer); outputs are allocated by the caller.
Every call returns a status code instead of raising, and ``aclGetRecentErrMsg()`` gives the
message of the last failure. The first phase checks in the order the CANN op_api code does and
returns ``(status, workspace_size, executor)``; ``executor.plan`` is the plan it will run. The
second phase runs it in the caller's ``workspace`` (a uint8 array of at least ``workspace_size``
bytes): the partial sums really go to its user region, after the system region.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from . import ops as _ops  # noqa: F401  (importing the slices registers them)
from .errors import (
    ACLNN_ERR_INNER,
    ACLNN_ERR_INNER_FIND_KERNEL_ERROR,
    ACLNN_ERR_INNER_NULLPTR,
    ACLNN_ERR_INNER_TILING_ERROR,
    ACLNN_ERR_PARAM_INVALID,
    ACLNN_ERR_PARAM_NULLPTR,
    ACLNN_ERR_RUNTIME_ERROR,
    ACLNN_SUCCESS,
    InternalNullError,
    InvalidParameterError,
    NormkernError,
)
from .registry import OpRecord, records
from .runtime import settings
from .runtime.executor import Executor, execute

__all__ = [
    "ACLNN_SUCCESS", "ACLNN_ERR_PARAM_NULLPTR", "ACLNN_ERR_PARAM_INVALID", "ACLNN_ERR_RUNTIME_ERROR",
    "ACLNN_ERR_INNER", "ACLNN_ERR_INNER_TILING_ERROR", "ACLNN_ERR_INNER_FIND_KERNEL_ERROR", "ACLNN_ERR_INNER_NULLPTR",
    "ACL_SUCCESS", "ACL_ERROR_INVALID_PARAM", "ACL_OPT_DETERMINISTIC", "ACL_OPT_ENABLE_DEBUG_KERNEL",
    "ACL_OPT_STRONG_CONSISTENCY", "ACL_OPT_ENABLE_KERNEL_EARLY_START",
    "aclrtCtxSetSysParamOpt", "aclrtCtxGetSysParamOpt", "aclGetRecentErrMsg", "Executor",
    "aclSetAclOpExecutorRepeatable", "aclDestroyAclOpExecutor", "aclSetInputTensorAddr", "aclSetOutputTensorAddr",
]

ACL_SUCCESS = 0
ACL_ERROR_INVALID_PARAM = 100000

ACL_OPT_DETERMINISTIC = 0
ACL_OPT_ENABLE_DEBUG_KERNEL = 1
ACL_OPT_STRONG_CONSISTENCY = 2
ACL_OPT_ENABLE_KERNEL_EARLY_START = 3

_other_options: dict[int, int] = {}
#: The message slot of aclGetRecentErrMsg, one per thread (as ACL keeps it per thread).
_recent = threading.local()


def _set_error(message: str) -> None:
    _recent.message = message


def aclGetRecentErrMsg() -> str | None:
    """The message of this thread's most recent failed call (None once read, as ACL does)."""
    message = getattr(_recent, "message", None)
    _recent.message = None
    return message


def aclrtCtxSetSysParamOpt(opt: int, value: int) -> int:
    """Set a context option; ``ACL_OPT_DETERMINISTIC`` drives :func:`normkern.set_deterministic`."""
    if opt == ACL_OPT_DETERMINISTIC:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 3:
            _set_error(f"aclrtCtxSetSysParamOpt: ACL_OPT_DETERMINISTIC value must be 0-3, got {value!r}")
            return ACL_ERROR_INVALID_PARAM
        settings.set_deterministic(value)
        return ACL_SUCCESS
    if opt in (ACL_OPT_ENABLE_DEBUG_KERNEL, ACL_OPT_STRONG_CONSISTENCY, ACL_OPT_ENABLE_KERNEL_EARLY_START):
        _other_options[opt] = int(value)
        return ACL_SUCCESS
    _set_error(f"aclrtCtxSetSysParamOpt: unknown option {opt!r}")
    return ACL_ERROR_INVALID_PARAM


def aclrtCtxGetSysParamOpt(opt: int) -> tuple[int, int]:
    """``(status, value)`` of a context option."""
    if opt == ACL_OPT_DETERMINISTIC:
        return ACL_SUCCESS, settings.get_deterministic()
    if opt in (ACL_OPT_ENABLE_DEBUG_KERNEL, ACL_OPT_STRONG_CONSISTENCY, ACL_OPT_ENABLE_KERNEL_EARLY_START):
        return ACL_SUCCESS, _other_options.get(opt, 0)
    _set_error(f"aclrtCtxGetSysParamOpt: unknown option {opt!r}")
    return ACL_ERROR_INVALID_PARAM, 0


def _status(action: Callable[[], None], unforeseen: int = ACLNN_ERR_INNER, what: str = "internal error") -> int:
    """``action``'s status: 0, the code of the NormkernError it raised, or ``unforeseen`` for any other
    exception (the C API returns a status, whatever went wrong); the message is kept for aclGetRecentErrMsg."""
    try:
        action()
    except NormkernError as exc:
        _set_error(str(exc))
        return exc.status
    except Exception as exc:
        _set_error(f"{what}: {type(exc).__name__}: {exc}")
        return unforeseen
    return ACLNN_SUCCESS


def _executor_of(name: str, executor) -> Executor:
    if executor is None:
        raise InternalNullError(name, "executor", "must not be None (null pointer)", None)
    if not isinstance(executor, Executor):
        raise InvalidParameterError(name, "executor", "must be an executor a first phase returned",
                                    type(executor).__name__)
    return executor


def aclSetAclOpExecutorRepeatable(executor) -> int:
    """Make ``executor`` repeatable: the second phase may then run it any number of times (a one-shot executor
    is spent by its run), and ``aclSetInputTensorAddr`` / ``aclSetOutputTensorAddr`` may point it at new arrays
    of the same shapes and dtypes. Call it after the first phase, before the first run."""
    name = "aclSetAclOpExecutorRepeatable"

    def make_repeatable():
        _executor_of(name, executor).repeatable = True

    return _status(make_repeatable, what=f"{name}: internal error")


def aclDestroyAclOpExecutor(executor) -> int:
    """Release a repeatable executor: it runs no more."""
    name = "aclDestroyAclOpExecutor"

    def destroy():
        _executor_of(name, executor).spent = True

    return _status(destroy, what=f"{name}: internal error")


def _tensor_addr(name: str, output: bool):
    def set_addr(executor, index, tensor, addr) -> int:
        return _status(lambda: _executor_of(name, executor).replace(index, tensor, addr, output, name),
                       what=f"{name}: internal error")

    set_addr.__name__ = set_addr.__qualname__ = name
    kind = "output" if output else "input"
    set_addr.__doc__ = (f"Point {kind} ``index`` of a repeatable executor (the array ``tensor`` its first phase "
                        f"bound there) at the array ``addr`` of the same shape and dtype, as CANN refreshes a "
                        f"tensor's device address. 161002 for an index out of range, a tensor that was None in "
                        f"the first phase, another shape or dtype, or an {kind} that would overlap what the op "
                        f"forbids; 561103 for a null executor or tensor.")
    return set_addr


aclSetInputTensorAddr = _tensor_addr("aclSetInputTensorAddr", output=False)
aclSetOutputTensorAddr = _tensor_addr("aclSetOutputTensorAddr", output=True)


def _first_phase(prepare: Callable[[], Executor]) -> tuple[int, int, Executor | None]:
    try:
        executor = prepare()
    except NormkernError as exc:
        _set_error(str(exc))
        return exc.status, 0, None
    except Exception as exc:  # the C API returns a status, whatever went wrong
        _set_error(f"internal error: {type(exc).__name__}: {exc}")
        return ACLNN_ERR_INNER, 0, None
    return ACLNN_SUCCESS, executor.workspace_size, executor


def _second_phase(op: str, workspace, workspace_size, executor) -> int:
    return _status(lambda: execute(op, workspace, workspace_size, executor), ACLNN_ERR_RUNTIME_ERROR, "runtime error")


def _phases(record: OpRecord) -> tuple[Callable, Callable]:
    """``aclnnXxxGetWorkspaceSize`` and ``aclnnXxx`` of one registered op."""

    def first(*args, **kwargs) -> tuple[int, int, Executor | None]:
        return _first_phase(lambda: record.aclnn_prepare(*args, **kwargs))

    def second(workspace, workspace_size, executor, stream=None) -> int:
        return _second_phase(record.name, workspace, workspace_size, executor)

    first.__name__ = first.__qualname__ = f"{record.aclnn}GetWorkspaceSize"
    first.__doc__ = record.aclnn_prepare.__doc__
    first.__wrapped__ = record.aclnn_prepare  # so help() and inspect show CANN's parameter names
    second.__name__ = second.__qualname__ = record.aclnn
    second.__doc__ = f"Second phase of {record.aclnn}: runs the executor of the first phase in ``workspace``."
    return first, second


for _record in records():
    for _phase in _phases(_record):
        globals()[_phase.__name__] = _phase
        __all__.append(_phase.__name__)
