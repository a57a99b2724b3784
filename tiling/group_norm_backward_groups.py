"""GroupNormBackward's host plan of normkern's own, ``groups``: chosen for a CPU (``source="modeled"``).

Each core owns whole groups ``g`` (all N batches of them); a group's task ``(n, g)`` is its ``C_G`` channel rows of
``HxW`` elements, read once from memory for both sums and once more, from cache, for dx. Per row ``(n, c)``, in
float32 (``m``, ``r`` the task's mean and rstd)::

    db[n, c]  = sum dy                   ds[n, c] = sum dy * (x - m)         (one pass: 64 lanes each)
    A = sum_c gamma[c] * db[n, c]        B = sum_c gamma[c] * ds[n, c]       (the task's C_G rows in order)
    dx = dy * (gamma[c] * r) - ((x - m) * (((r * r) * r) * B / M) + r * A / M),     M = C_G * HxW
    grad_beta[c]  = sum_n db[n, c]       grad_gamma[c] = sum_n ds[n, c] * r[n, g]   (batch order)

Each row is summed by 64 interleaved lanes (lane ``j`` adds elements ``j, j+64, ...``; a row longer than
``CHUNK_ELEMS`` in segments of it, the segments' sums in order), folded pairwise. ``ds`` is centered (``dy * (x -
m)``, as PyTorch's and the batch norms' host plans): no cancellation of a large mean. The batch sums run over ``n``
in order inside the core that owns the group, so no workspace and no second stage: the bits are the same at any core
and thread count and on every CPU (the lane count is the plan's, not the vector width). The NPUs refuse it; their
plans (``cann``, ``atomic``, ``arch35``) are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .group_norm_backward import GroupNormBackwardDims, GroupNormBackwardStrategy
from .picture import Share
from .plan import Rejection, unit
from .reduction import LANES, Combine, LaneOrder, ReduceLevel, ReductionTree
from .soc import HOST
from .split import Split
from .workspace import WorkspaceLayout

#: Elements of a row's segment at most, the row the 64 lanes sum before a fold (the batch norms' chunk).
CHUNK_ELEMS = 16384


class GroupsArgs(NamedTuple):
    """What the ``groups`` kernel receives: ints and int64 arrays only."""

    n: int
    c: int
    hxw: int
    g: int
    c_g: int
    row_elems: int
    segs_per_row: int
    core_start: np.ndarray
    core_count: np.ndarray


@dataclass(frozen=True, kw_only=True)
class GroupNormBackwardGroupsPlan(GroupNormBackwardDims):
    op = "group_norm_backward"
    own_strategies = ("groups",)
    explain_notes = (
        "each core owns whole groups: a task's C_G rows read once for db = sum dy and ds = sum dy*(x - mean), "
        "then its dx from cache",
        "each row: 64 interleaved float32 lanes folded pairwise; grad_gamma and grad_beta summed over the batch in "
        "order in the group's core (no workspace, no second stage)",
    )

    output_mask: tuple[bool, bool, bool] = unit("", "(grad_input, grad_gamma, grad_beta) asked for")

    def check(self) -> None:
        if self.c % self.g or self.core_split.total != self.g or not self.n * self.c * self.hxw:
            raise ValueError(f"a groups plan covers the {self.g} groups of a non-empty input, got {self.core_split}")

    def index_axes(self) -> tuple[tuple[str, int], tuple[str, int]]:
        return ("groups", self.g), ("batches", self.n)

    def shares(self) -> tuple[Share, ...]:
        """A core's groups, each over all N batches."""
        return tuple(Share(core, 0, (start, start + count), (0, self.n), ())
                     for core, (start, count) in enumerate(self.core_split.ranges()) if count)

    def summary_ub(self) -> str:
        return f"rows of {min(self.hxw, CHUNK_ELEMS)}"

    def kernel_args(self) -> GroupsArgs:
        ranges = self.core_split.ranges()
        return GroupsArgs(n=self.n, c=self.c, hxw=self.hxw, g=self.g, c_g=self.c_g,
                          row_elems=min(self.hxw, CHUNK_ELEMS), segs_per_row=-(-self.hxw // CHUNK_ELEMS),
                          core_start=np.array([s for s, _ in ranges], np.int64),
                          core_count=np.array([k for _, k in ranges], np.int64))


#: Whether a host SoC plans ``groups`` unless another strategy is asked for (tests of the A2 code's host model
#: turn it off).
HOST_OWN_PLAN = True


def check_groups(p) -> Rejection | None:
    if p.soc.arch != HOST:
        return Rejection("groups", f"normkern's own CPU plan; {p.soc.name} runs the GroupNormGrad tilings", True)
    if not p.n * p.c * p.hxw:
        return Rejection("groups", "input is empty", True)
    if not HOST_OWN_PLAN:
        return Rejection("groups", "the A2 code's host model was asked for", False)
    return None


def build_groups(p, rejected: tuple[Rejection, ...]) -> GroupNormBackwardGroupsPlan:
    """The ``groups`` plan of problem ``p`` (a ``GroupNormBackwardProblem``)."""
    core_split = Split.even(p.g, p.soc.vector_cores)
    levels = (ReduceLevel("lanes", Combine.PAIRWISE, LANES, "64 interleaved float32 lanes over a row's segment, "
                          "folded 32+32 .. 1+1"),
              ReduceLevel("segments", Combine.SEQUENTIAL, -(-p.hxw // CHUNK_ELEMS), "a row's segments' sums in order"),
              ReduceLevel("batches", Combine.SEQUENTIAL, p.n, "each channel's N rows' sums in batch order (grad_gamma, "
                          "grad_beta); a task's C_G rows in channel order for dx"))
    return GroupNormBackwardGroupsPlan(
        soc=p.soc, strategy=GroupNormBackwardStrategy.GROUPS, source="modeled", tiling_key=None, rejected=rejected,
        tiling_data=None, block_dim=core_split.parts, core_split=core_split,
        tree=ReductionTree(levels, LaneOrder.INTERLEAVED), workspace=WorkspaceLayout(p.soc.system_workspace_bytes, 0),
        n=p.n, c=p.c, hxw=p.hxw, g=p.g, dtype=p.dtype, out_dtype=p.out_dtype, output_mask=p.mask)
