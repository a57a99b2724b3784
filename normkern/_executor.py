"""The executor a first phase returns, and the second phase that runs it in a workspace."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

import tiling

from ._checks import check_overlaps, own_their_memory, shares_memory
from .errors import InternalNullError, InvalidParameterError, NullPointerError, WorkspaceError

#: The workspace of plans without a user part: nothing can be written to it, so one serves every call.
_NO_WORKSPACE = np.empty(0, np.float32)


class Executor:
    """What ``aclnnXxxGetWorkspaceSize`` returns: the plan it will run and the bound arguments.

    ``run(workspace, *arrays)`` runs the kernel on ``arrays``, given in the order of ``tensors``: the op's
    (name, array) inputs, then its ``outputs`` last ones. The executor holds the arrays the first phase
    checked; a repeatable executor (``aclSetAclOpExecutorRepeatable``) may have them replaced by arrays of
    the same shape and dtype (``aclSetInputTensorAddr`` / ``aclSetOutputTensorAddr``), and a prepared
    call (``normkern.prepare``) passes its own to ``run_with``.
    """

    def __init__(self, op: str, plan: tiling.Plan, run: Callable[..., Any],
                 tensors: tuple[tuple[str, Any], ...] = (), outputs: int = 0,
                 overlaps: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())) -> None:
        self.op = op
        self.plan = plan
        self._kernel = run
        #: The op's (name, array) inputs and outputs, which a caller's workspace must not overlap.
        self.tensors = tensors
        self.outputs = outputs
        #: The op's overlap rule as names (``_checks.check_overlaps``): outputs, and what they were checked against.
        self.overlaps = overlaps
        self.repeatable = False
        self.spent = False

    def _run(self, workspace: np.ndarray):
        return self._kernel(workspace, *[array for _, array in self.tensors])

    def replace(self, index: int, tensor, addr, output: bool, caller: str) -> None:
        """``aclSetInputTensorAddr`` / ``aclSetOutputTensorAddr``: the input (or output) ``index`` of a repeatable
        executor, bound as ``tensor`` in the first phase, now reads (writes) the array ``addr``, which must
        have its shape and dtype. Checked like the first phase: the op's overlap rule on the new set."""
        if tensor is None:
            raise InternalNullError(caller, "tensor", "must not be None (null pointer)", None)
        if not self.repeatable:
            raise InvalidParameterError(caller, "executor", "must be repeatable (aclSetAclOpExecutorRepeatable) "
                                        "to have its tensors replaced", "a one-shot executor")
        count = len(self.tensors) - self.outputs
        first, total = (count, self.outputs) if output else (0, count)
        if not (isinstance(index, (int, np.integer)) and 0 <= index < total):
            raise InvalidParameterError(caller, "index", f"must be in [0, {total - 1}]", index)
        name, bound = self.tensors[first + index]
        if bound is None:
            raise InvalidParameterError(caller, "index", f"must not name a tensor that was None in the first "
                                        f"phase ({name})", index)
        if tensor is not bound:
            raise InvalidParameterError(caller, "tensor", f"must be the {name} the first phase bound at index "
                                        f"{index}", _describe(tensor))
        if not (type(addr) is np.ndarray and addr.shape == bound.shape and addr.dtype == bound.dtype):
            raise InvalidParameterError(caller, "addr", f"must be a {bound.dtype} array of shape {bound.shape} "
                                        f"(the {name} it replaces)", _describe(addr))
        if output and not addr.flags.writeable:
            raise InvalidParameterError(caller, "addr", "must be writeable", "a read-only array")
        tensors = list(self.tensors)
        tensors[first + index] = (name, addr)
        named = dict(tensors)
        written, read = self.overlaps
        check_overlaps(self.op, tuple((n, named[n]) for n in written), tuple((n, named[n]) for n in read))
        self.tensors = tuple(tensors)

    def run_with(self, arrays: list):
        """Run with a private workspace on ``arrays`` (in the order of ``tensors``), which the caller has
        matched to the bound ones (shapes and dtypes, None where they were None)."""
        size = self.plan.workspace.user_bytes // 4
        return self._kernel(np.empty(size, np.float32) if size else _NO_WORKSPACE, *arrays)

    @property
    def workspace_size(self) -> int:
        return self.plan.workspace.total_bytes

    def __repr__(self) -> str:
        return f"<Executor {self.plan}>"

    def run_private(self):
        """Run with a workspace of our own (the Pythonic layer): only the user part is allocated."""
        return self.run_with([array for _, array in self.tensors])


def launch(op: str, workspace, workspace_size, executor: Executor | None) -> None:
    """The second phase: check the caller's workspace, then run in its user region. A one-shot executor is
    spent by its run (CANN frees it); a repeatable one runs until it is destroyed."""
    if executor is None:
        raise NullPointerError(op, "executor", "must not be None (null pointer)", None)
    if not isinstance(executor, Executor) or executor.op != op:
        made_by = f"an executor of {executor.op}" if isinstance(executor, Executor) else type(executor).__name__
        raise InvalidParameterError(op, "executor", f"must be the executor {op}'s first phase returned", made_by)
    if executor.spent:
        rule = "must not be destroyed" if executor.repeatable else "must not have run already (call " \
            "aclSetAclOpExecutorRepeatable after the first phase to run an executor again)"
        raise InvalidParameterError(op, "executor", rule, "a spent executor")
    layout = executor.plan.workspace
    if not isinstance(workspace_size, (int, np.integer)) or workspace_size < layout.total_bytes:
        raise WorkspaceError(op, "workspaceSize", f"must be at least the {layout.total_bytes} bytes the "
                             "first phase returned", workspace_size)
    if workspace is None:
        if layout.total_bytes:
            raise NullPointerError(op, "workspace", f"must not be None when {layout.total_bytes} bytes are "
                                   "required", None)
        _run_once(executor, np.empty(0, np.float32))
        return
    if not (isinstance(workspace, np.ndarray) and workspace.dtype == np.uint8 and workspace.ndim == 1
            and workspace.flags.c_contiguous and workspace.flags.writeable):
        raise WorkspaceError(op, "workspace", "must be a writeable contiguous 1-D uint8 numpy array",
                             _describe(workspace))
    if workspace.nbytes < workspace_size:
        raise WorkspaceError(op, "workspace", f"must hold workspaceSize={workspace_size} bytes",
                             f"{workspace.nbytes} bytes")
    start = layout.system_bytes
    if (workspace.ctypes.data + start) % 4:
        raise WorkspaceError(op, "workspace", "must start at a 4-byte aligned address",
                             hex(workspace.ctypes.data))
    for name, tensor in executor.tensors:
        if isinstance(tensor, np.ndarray) and not own_their_memory([workspace, tensor]) \
                and shares_memory(workspace, tensor):
            raise WorkspaceError(op, "workspace", f"must not share memory with {name}", "an overlapping array")
    _run_once(executor, workspace[start:start + layout.user_bytes].view(np.float32))


def _run_once(executor: Executor, workspace: np.ndarray) -> None:
    executor.spent = not executor.repeatable
    executor._run(workspace)


def _describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {value.shape}"
    return type(value).__name__


#: Repeated call signatures an op keeps a prepared call for; past this many they are dropped and made anew.
REPEATED_CALLS = 256


def pythonic(bind: Callable[..., Executor]) -> Callable:
    """The Pythonic op made of ``bind``, which checks a call and plans it into an Executor: the op runs that
    executor at once, in a private workspace. ``bind`` stays reachable as the op's ``bind``, for
    ``normkern.prepare``, which keeps the executor to run it again.

    The lean path of repeated calls: a call whose arguments repeat an earlier call's signature (``call_key``:
    array shapes, dtypes, strides and aliasing, every other value, and this context's default SoC and
    determinism) runs as a prepared call of it, its arrays matched to the binding and its overlap rule
    checked, with no re-planning. A signature is prepared the second time it is seen (a call that never
    repeats costs nothing more); the results are the same bits either way."""
    from ._config import _settings
    from ._prepared import PreparedCall, call_key

    op_name = bind.__module__.split(".")[-2]
    soc_setting, deterministic_setting = _settings["soc"], _settings["deterministic"]
    repeated: dict = {}
    once: set = set()

    @functools.wraps(bind)
    def op(*args, **kwargs):
        key = call_key(args, kwargs)
        if key is not None:
            key = (key, soc_setting.get(), deterministic_setting.get())
            call = repeated.get(key)
            if call is not None:
                return call.repeat(args, kwargs)
        executor = bind(*args, **kwargs)
        if key is not None:
            if key in once:
                call = PreparedCall(op_name, args, kwargs, function=op, executor=executor)
                if call.repeatable:
                    if len(repeated) >= REPEATED_CALLS:
                        repeated.clear()
                    repeated[key] = call
            else:
                if len(once) >= REPEATED_CALLS:
                    once.clear()
                once.add(key)
        return executor.run_private()

    def forget() -> None:
        """Drop every prepared call and every signature seen once."""
        repeated.clear()
        once.clear()

    op.bind = bind
    op.repeated = repeated
    op.forget_repeated = forget
    return op
