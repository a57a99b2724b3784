"""The executor a first phase returns, and the second phase that runs it in a workspace."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import tiling

from ._checks import own_their_memory, shares_memory
from .errors import InvalidParameterError, NullPointerError, WorkspaceError

#: The workspace of plans without a user part: nothing can be written to it, so one serves every call.
_NO_WORKSPACE = np.empty(0, np.float32)


class Executor:
    """What ``aclnnXxxGetWorkspaceSize`` returns: the plan it will run and the bound arguments."""

    def __init__(self, op: str, plan: tiling.Plan, run: Callable[[np.ndarray], Any],
                 tensors: tuple[tuple[str, Any], ...] = ()) -> None:
        self.op = op
        self.plan = plan
        self._run = run
        #: The op's (name, array) inputs and outputs, which a caller's workspace must not overlap.
        self.tensors = tensors

    @property
    def workspace_size(self) -> int:
        return self.plan.workspace.total_bytes

    def __repr__(self) -> str:
        return f"<Executor {self.plan}>"

    def run_private(self):
        """Run with a workspace of our own (the Pythonic layer): only the user part is allocated."""
        size = self.plan.workspace.user_bytes // 4
        return self._run(np.empty(size, np.float32) if size else _NO_WORKSPACE)


def launch(op: str, workspace, workspace_size, executor: Executor | None) -> None:
    """The second phase: check the caller's workspace, then run in its user region."""
    if executor is None:
        raise NullPointerError(op, "executor", "must not be None (null pointer)", None)
    if not isinstance(executor, Executor) or executor.op != op:
        made_by = f"an executor of {executor.op}" if isinstance(executor, Executor) else type(executor).__name__
        raise InvalidParameterError(op, "executor", f"must be the executor {op}'s first phase returned", made_by)
    layout = executor.plan.workspace
    if not isinstance(workspace_size, (int, np.integer)) or workspace_size < layout.total_bytes:
        raise WorkspaceError(op, "workspaceSize", f"must be at least the {layout.total_bytes} bytes the "
                             "first phase returned", workspace_size)
    if workspace is None:
        if layout.total_bytes:
            raise NullPointerError(op, "workspace", f"must not be None when {layout.total_bytes} bytes are "
                                   "required", None)
        executor._run(np.empty(0, np.float32))
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
    executor._run(workspace[start:start + layout.user_bytes].view(np.float32))


def _describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {value.shape}"
    return type(value).__name__
