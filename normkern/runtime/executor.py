"""A checked and planned call (``Bound``), and the executor the aclnn layer's first phase returns around it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

import tiling

from ..errors import InternalNullError, InvalidParameterError, NullPointerError, WorkspaceError
from .checks import check_overlaps, own_their_memory, shares_memory

#: The workspace of plans without a user part: nothing can be written to it, so one serves every call.
_NO_WORKSPACE = np.empty(0, np.float32)


class Bound:
    """One call of an op checked and planned: its plan and the op's ``run(workspace, *arrays)``, which launches
    the kernels on ``arrays`` (the op's inputs, then its outputs, in the order of ``names``). It holds no
    array: a later call of the same signature runs it on its own arrays (``calls.Signatures``), a prepared
    call (``normkern.prepare``) and an aclnn executor on theirs."""

    __slots__ = ("op", "plan", "run", "overlaps", "entry", "_written", "_read", "_floats")

    def __init__(self, op: str, plan: tiling.Plan, run: Callable[..., Any], names: tuple[str, ...],
                 overlaps: tuple[tuple[str, ...], tuple[str, ...]]) -> None:
        self.op, self.plan, self.run = op, plan, run
        #: The op's overlap rule as names (``checks.check_overlaps``): outputs, and what they were checked against.
        self.overlaps = overlaps
        self._written = tuple((name, names.index(name)) for name in overlaps[0])
        self._read = tuple((name, names.index(name)) for name in overlaps[1])
        self._floats = plan.workspace.user_bytes // 4
        #: What a call runs: ``run`` itself, bound to the empty workspace, when there is nothing to check and no
        #: workspace to make (one Python frame less), else ``__call__``.
        self.entry = self if self._written or self._floats else functools.partial(run, _NO_WORKSPACE)

    def __call__(self, *arrays):
        """Run on ``arrays`` (which repeat the bound call's shapes, dtypes, strides and aliasing) in a private
        workspace; outputs the caller gave are checked against the op's overlap rule first."""
        if self._written:
            check_overlaps(self.op, tuple((n, arrays[i]) for n, i in self._written),
                           tuple((n, arrays[i]) for n, i in self._read))
        return self.run(np.empty(self._floats, np.float32) if self._floats else _NO_WORKSPACE, *arrays)

    def __repr__(self) -> str:
        return f"<Bound {self.plan}>"


class Executor:
    """What ``aclnnXxxGetWorkspaceSize`` returns: a ``Bound`` call and the arrays its first phase checked.

    ``tensors`` are the op's (name, array) inputs, then its ``outputs`` last ones. A repeatable executor
    (``aclSetAclOpExecutorRepeatable``) may have them replaced by arrays of the same shape and dtype
    (``aclSetInputTensorAddr`` / ``aclSetOutputTensorAddr``).
    """

    def __init__(self, op: str, plan: tiling.Plan, run: Callable[..., Any],
                 tensors: tuple[tuple[str, Any], ...] = (), outputs: int = 0,
                 overlaps: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())) -> None:
        self.bound = Bound(op, plan, run, tuple(name for name, _ in tensors), overlaps)
        #: The op's (name, array) inputs and outputs, which a caller's workspace must not overlap.
        self.tensors = tensors
        self.outputs = outputs
        self.repeatable = False
        self.spent = False

    @property
    def op(self) -> str:
        return self.bound.op

    @property
    def plan(self) -> tiling.Plan:
        return self.bound.plan

    @property
    def overlaps(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return self.bound.overlaps

    def run(self):
        """Run on the bound arrays in a private workspace: what the op returns."""
        return self.bound(*[array for _, array in self.tensors])

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

    @property
    def workspace_size(self) -> int:
        return self.plan.workspace.total_bytes

    def __repr__(self) -> str:
        return f"<Executor {self.plan}>"


def execute(op: str, workspace, workspace_size, executor: Executor | None) -> None:
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
    executor.bound.run(workspace, *[array for _, array in executor.tensors])


def _describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {value.shape}"
    return type(value).__name__
