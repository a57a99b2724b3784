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

from . import _config
from . import ops as _ops  # noqa: F401  (importing the slices registers them)
from ._executor import Executor, launch
from ._registry import OpRecord, records
from .errors import (
    ACLNN_ERR_INNER,
    ACLNN_ERR_INNER_FIND_KERNEL_ERROR,
    ACLNN_ERR_INNER_TILING_ERROR,
    ACLNN_ERR_PARAM_INVALID,
    ACLNN_ERR_PARAM_NULLPTR,
    ACLNN_ERR_RUNTIME_ERROR,
    ACLNN_SUCCESS,
    NormkernError,
)

__all__ = [
    "ACLNN_SUCCESS", "ACLNN_ERR_PARAM_NULLPTR", "ACLNN_ERR_PARAM_INVALID", "ACLNN_ERR_RUNTIME_ERROR",
    "ACLNN_ERR_INNER", "ACLNN_ERR_INNER_TILING_ERROR", "ACLNN_ERR_INNER_FIND_KERNEL_ERROR",
    "ACL_SUCCESS", "ACL_ERROR_INVALID_PARAM", "ACL_OPT_DETERMINISTIC", "ACL_OPT_ENABLE_DEBUG_KERNEL",
    "ACL_OPT_STRONG_CONSISTENCY", "ACL_OPT_ENABLE_KERNEL_EARLY_START",
    "aclrtCtxSetSysParamOpt", "aclrtCtxGetSysParamOpt", "aclGetRecentErrMsg", "Executor",
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
        _config.set_deterministic(value)
        return ACL_SUCCESS
    if opt in (ACL_OPT_ENABLE_DEBUG_KERNEL, ACL_OPT_STRONG_CONSISTENCY, ACL_OPT_ENABLE_KERNEL_EARLY_START):
        _other_options[opt] = int(value)
        return ACL_SUCCESS
    _set_error(f"aclrtCtxSetSysParamOpt: unknown option {opt!r}")
    return ACL_ERROR_INVALID_PARAM


def aclrtCtxGetSysParamOpt(opt: int) -> tuple[int, int]:
    """``(status, value)`` of a context option."""
    if opt == ACL_OPT_DETERMINISTIC:
        return ACL_SUCCESS, _config.get_deterministic()
    if opt in (ACL_OPT_ENABLE_DEBUG_KERNEL, ACL_OPT_STRONG_CONSISTENCY, ACL_OPT_ENABLE_KERNEL_EARLY_START):
        return ACL_SUCCESS, _other_options.get(opt, 0)
    _set_error(f"aclrtCtxGetSysParamOpt: unknown option {opt!r}")
    return ACL_ERROR_INVALID_PARAM, 0


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
    try:
        launch(op, workspace, workspace_size, executor)
    except NormkernError as exc:
        _set_error(str(exc))
        return exc.status
    except Exception as exc:  # the C API returns a status, whatever went wrong
        _set_error(f"runtime error: {type(exc).__name__}: {exc}")
        return ACLNN_ERR_RUNTIME_ERROR
    return ACLNN_SUCCESS


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
