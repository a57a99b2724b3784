"""BatchNormStats plans: our own model in the Ascend style (``source="modeled"``).

No CANN tiling is public for this op on A2 (it is TBE ReduceMean + ReduceStdWithMean), so this is
a model, written the way an Ascend host tiling is written. The problem: ``x`` of shape
``(N, C, *spatial)``, ``HxW = prod(spatial)``; per channel ``c`` over ``R = N*HxW`` elements::

    mean[c]   = (sum_i x_i) / R                                    pass 1
    invstd[c] = 1 / sqrt((sum_i (x_i - mean[c])^2) / R + eps)      pass 2 (two-pass, as CANN composes it)

all in float32 (``R`` and ``eps`` rounded to float32 once). The data of one channel is ``N``
contiguous planes of ``HxW`` elements. A *row* is one plane, or, when a plane does not fit a UB
block, one segment of it (``segs_per_plane`` segments of ``seg_elems``, the last ``tail_seg_elems``
long). Rows sit in UB at a pitch rounded up to 64 elements, so each row starts at lane 0. A UB
block holds ``rows_per_block`` rows; UB bytes per element are the input copy, its float32 cast
(half inputs only) and the deviation buffer of pass 2, plus a 1 KiB reserve for lanes and scalars.

Each pass is the loop nest::

    for core in cores:                          # parallel; core = one vector core
        for c, rows in core's work:             # split_c: its channels, all rows
            part = 0                            # split_r: every channel, its rows
            for block in blocks(rows, rows_per_block):
                lanes[0:64] = 0
                for row in block: lanes[j] += row[j + 64 v] for v ascending   # tail into lanes < t
                part += fold(lanes)             # 32+32, 16+16, ..., 1+1
            split_c: channel total = part
            split_r: workspace[core, c] = part  # then total = sum over cores in core order
                                                # (atomic: in the arrival order)

Strategies, tried in this order:

- ``empty``: no elements per channel; mean 0, invstd NaN, no kernel.
- ``split_c``: channels over cores (preferred while ``C >= cores``).
- ``split_r``: rows of every channel over cores, per-core partials through the workspace, added in
  core order: deterministic. Chosen when ``C < cores``.
- ``atomic``: as ``split_r`` but the partials are added in an arrival order (what atomic adds onto
  the output would do); non-deterministic with three or more cores. Only when asked for: the CANN
  doc says aclnnBatchNormStats is deterministic.

The ``host`` SoC first tries a plan of normkern's own, chosen for a CPU: ``channels``, BatchNorm's training
statistics (``tiling.batch_norm``: each channel's N planes one stream, 64 lanes a 16384-element chunk, chunk sums in
stream order; a BatchNormStats and a BatchNorm of one input give the same mean and invstd bit for bit). The rows
strategies above stay the NPUs' and, when asked for, the host's model of them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import ClassVar, NamedTuple

import numpy as np

from .picture import Share
from .plan import Plan, Rejection, Strategy, StrategyRegistry, TilingError, dtype_name, unit
from .reduction import LANES, Combine, LaneOrder, ReduceLevel, ReductionTree
from .soc import DTYPE_BYTES, HOST, SocSpec, get_soc
from .split import Split
from .support import ACLNN_NAMES, require
from .workspace import WorkspaceLayout, align_up

OP = "batch_norm_stats"
RESERVE_BYTES = 1024
DTYPES = ("float32", "float16", "bfloat16")


class BatchNormStatsStrategy(enum.Enum):
    EMPTY = "empty"
    SPLIT_C = "split_c"
    SPLIT_R = "split_r"
    ATOMIC = "atomic"
    CHANNELS = "channels"


class BatchNormStatsArgs(NamedTuple):
    """What the kernels receive: ints and int64 arrays only."""

    n: int
    c: int
    hxw: int
    segs_per_plane: int
    seg_elems: int
    tail_seg_elems: int
    rows_per_channel: int
    rows_per_block: int
    count: int
    core_start: np.ndarray
    core_count: np.ndarray
    sum_offset: int
    sqdev_offset: int


@dataclass(frozen=True)
class BatchNormStatsProblem:
    """One per-channel row reduction; BatchNormReduceBackward plans its sums with the same layout."""

    op: ClassVar[str] = OP

    shape: tuple[int, ...]
    dtype: str
    soc: SocSpec

    def plan_class(self) -> type[BatchNormStatsPlan]:
        return BatchNormStatsPlan

    def plan_fields(self) -> dict:
        """Fields of the op's plan class beyond BatchNormStatsPlan's."""
        return {}

    @property
    def n(self) -> int:
        return self.shape[0]

    @property
    def c(self) -> int:
        return self.shape[1]

    @property
    def hxw(self) -> int:
        return prod(self.shape[2:])

    @property
    def reduction_len(self) -> int:
        return self.n * self.hxw

    @property
    def bytes_per_elem(self) -> int:
        """UB bytes per element: input copy (+ float32 cast for half) + pass-2 deviation buffer."""
        if self.dtype == "float32":
            return 2 * DTYPE_BYTES["float32"]
        return DTYPE_BYTES[self.dtype] + 2 * DTYPE_BYTES["float32"]

    @property
    def ub_block_elems(self) -> int:
        return (self.soc.ub_bytes - RESERVE_BYTES) // self.bytes_per_elem // LANES * LANES


@dataclass(frozen=True, kw_only=True)
class BatchNormStatsPlan(Plan):
    op = OP
    explain_properties = ("ub_bytes_used",)
    explain_notes = (
        "two passes with the same tree: pass 1 sums x (mean), pass 2 sums (x - mean)^2 (invstd)",
        "rows start at lane 0 (64-element UB pitch); each lane adds its elements in ascending order",
    )

    #: The workspace regions of the per-core partials, one per summed quantity.
    partial_regions: ClassVar[tuple[str, str]] = ("sum_partials", "sqdev_partials")

    strategy: BatchNormStatsStrategy
    shape: tuple[int, ...] = unit("", "input shape (N, C, *spatial)")
    dtype: str = unit("", "input dtype; compute and outputs are float32")
    n: int = unit("", "N, planes per channel")
    c: int = unit("", "C, channels")
    hxw: int = unit("elements", "plane size, product of the spatial dims")
    bytes_per_elem: int = unit("bytes", "UB bytes per element (input, cast, deviation)")
    ub_block_elems: int = unit("elements", "UB block capacity, a multiple of 64")
    row_pitch: int = unit("elements", "UB pitch of one row (64-aligned)")
    segs_per_plane: int = unit("", "rows per plane (1 unless a plane exceeds a block)")
    seg_elems: int = unit("elements", "row length")
    tail_seg_elems: int = unit("elements", "length of a plane's last row")
    rows_per_channel: int = unit("rows", "N * segs_per_plane")
    rows_per_block: int = unit("rows", "rows per UB block")
    block_split: Split = unit("", "rows of one core's channel over blocks (largest core)")

    @property
    def reduction_len(self) -> int:
        return self.n * self.hxw

    def check(self) -> None:
        if prod(self.shape) != self.n * self.c * self.hxw or self.shape[1] != self.c:
            raise ValueError(f"plan dims {self.n},{self.c},{self.hxw} do not match shape {self.shape}")
        if self.strategy.value == "empty":
            if self.reduction_len:
                raise ValueError("an empty plan for a non-empty problem")
            return
        if (self.segs_per_plane - 1) * self.seg_elems + self.tail_seg_elems != self.hxw:
            raise ValueError("plane segments do not cover HxW exactly")
        if not 0 < self.tail_seg_elems <= self.seg_elems <= self.row_pitch:
            raise ValueError("row lengths must satisfy 0 < tail <= seg <= pitch")
        if self.row_pitch % LANES:
            raise ValueError(f"row pitch {self.row_pitch} is not a multiple of {LANES}")
        if self.rows_per_channel != self.n * self.segs_per_plane:
            raise ValueError("rows_per_channel != N * segs_per_plane")
        used = self.ub_bytes_used
        if used > self.soc.ub_bytes:
            raise ValueError(f"UB block needs {used} bytes, {self.soc.name} has {self.soc.ub_bytes}")
        items = self.c if self.strategy.value == "split_c" else self.rows_per_channel
        if self.core_split.total != items:
            raise ValueError(f"core split covers {self.core_split.total} items, expected {items}")
        rows_per_core = self.rows_per_channel if self.strategy.value == "split_c" \
            else self.core_split.big_items
        if self.block_split.total != rows_per_core or self.block_split.block_items > self.rows_per_block:
            raise ValueError("block split does not cover the largest core's rows in UB-sized blocks")
        if self.strategy.value != "split_c":
            for name in self.partial_regions:
                if self.workspace.region(name).shape != (self.block_dim, self.c):
                    raise ValueError(f"workspace region {name} must hold ({self.block_dim}, {self.c}) partials")

    def index_axes(self) -> tuple[tuple[str, int], tuple[str, int]]:
        return ("channels", self.c), ("rows of a channel", self.rows_per_channel)

    def shares(self) -> tuple[Share, ...]:
        """split_c: a core's channels, every row; split_r and atomic: a core's rows of every channel. UB blocks
        of ``rows_per_block`` rows from the start of the core's rows."""
        shares = []
        for core, (start, count) in enumerate(self.core_split.ranges()):
            if not count:
                continue
            if self.strategy.value == "split_c":
                rows, cols = (start, start + count), (0, self.rows_per_channel)
            else:
                rows, cols = (0, self.c), (start, start + count)
            edges = tuple(range(cols[0] + self.rows_per_block, cols[1], self.rows_per_block))
            shares.append(Share(core, 0, rows, cols, edges))
        return tuple(shares)

    @property
    def ub_bytes_used(self) -> int:
        """UB bytes one block occupies [bytes]"""
        if not self.rows_per_block:
            return 0
        return self.rows_per_block * self.row_pitch * self.bytes_per_elem + RESERVE_BYTES

    def summary_ub(self) -> str:
        return f"{self.rows_per_block}x{self.row_pitch} {self.dtype}"

    def kernel_args(self) -> BatchNormStatsArgs:
        ranges = self.core_split.ranges()
        sum_offset = sqdev_offset = 0
        if self.strategy.value in ("split_r", "atomic"):
            sum_offset = self.workspace.region(self.partial_regions[0]).offset // 4
            sqdev_offset = self.workspace.region(self.partial_regions[1]).offset // 4
        return BatchNormStatsArgs(
            n=self.n, c=self.c, hxw=self.hxw,
            segs_per_plane=self.segs_per_plane, seg_elems=self.seg_elems,
            tail_seg_elems=self.tail_seg_elems, rows_per_channel=self.rows_per_channel,
            rows_per_block=self.rows_per_block, count=self.reduction_len,
            core_start=np.array([s for s, _ in ranges], dtype=np.int64),
            core_count=np.array([c for _, c in ranges], dtype=np.int64),
            sum_offset=sum_offset, sqdev_offset=sqdev_offset,
        )


def _rows_layout(problem: BatchNormStatsProblem) -> dict:
    block = problem.ub_block_elems
    if block < LANES:
        raise TilingError(f"[{problem.op}] UB of {problem.soc.ub_bytes} bytes cannot hold one 64-element row")
    pitch = align_up(problem.hxw, LANES)
    if pitch <= block:
        return dict(row_pitch=pitch, segs_per_plane=1, seg_elems=problem.hxw,
                    tail_seg_elems=problem.hxw, rows_per_block=block // pitch)
    segs = -(-problem.hxw // block)
    return dict(row_pitch=block, segs_per_plane=segs, seg_elems=block,
                tail_seg_elems=problem.hxw - (segs - 1) * block, rows_per_block=1)


def _lanes_level() -> ReduceLevel:
    return ReduceLevel("lanes", Combine.PAIRWISE, LANES, "64 interleaved float32 lanes, folded 32+32 .. 1+1")


def _build(problem: BatchNormStatsProblem, strategy: BatchNormStatsStrategy,
           rejected: tuple[Rejection, ...]) -> BatchNormStatsPlan:
    soc = problem.soc
    common = dict(soc=soc, strategy=strategy, source="modeled", tiling_key=None, rejected=rejected,
                  tiling_data=None, shape=problem.shape, dtype=problem.dtype, n=problem.n, c=problem.c,
                  hxw=problem.hxw, bytes_per_elem=problem.bytes_per_elem,
                  ub_block_elems=problem.ub_block_elems, **problem.plan_fields())
    plan_class = problem.plan_class()
    if strategy.value == "empty":
        return plan_class(
            **common, block_dim=0, core_split=Split.even(0, soc.vector_cores),
            tree=ReductionTree(()), workspace=WorkspaceLayout(0, 0),
            row_pitch=0, segs_per_plane=0, seg_elems=0, tail_seg_elems=0, rows_per_channel=0,
            rows_per_block=0, block_split=Split.blocks(0, 1))
    layout = _rows_layout(problem)
    rows = problem.n * layout["segs_per_plane"]
    if strategy.value == "split_c":
        core_split = Split.even(problem.c, soc.vector_cores)
        block_split = Split.blocks(rows, layout["rows_per_block"])
        levels = (_lanes_level(),
                  ReduceLevel("blocks", Combine.SEQUENTIAL, block_split.parts, "block sums in block order"))
        workspace = WorkspaceLayout(soc.system_workspace_bytes, 0)
    else:
        core_split = Split.even(rows, soc.vector_cores)
        block_split = Split.blocks(core_split.big_items, layout["rows_per_block"])
        cores = core_split.parts
        if strategy.value == "split_r":
            core_level = ReduceLevel("cores", Combine.SEQUENTIAL, cores,
                                     "per-core partials in the workspace, added in core order")
        else:
            core_level = ReduceLevel("cores", Combine.ATOMIC, cores,
                                     "per-core partials added in their arrival order")
        levels = (_lanes_level(),
                  ReduceLevel("blocks", Combine.SEQUENTIAL, block_split.parts, "block sums in block order"),
                  core_level)
        workspace = WorkspaceLayout.build(soc.system_workspace_bytes,
                                          tuple((name, (cores, problem.c))
                                                for name in plan_class.partial_regions))
    return plan_class(
        **common, block_dim=core_split.parts, core_split=core_split,
        tree=ReductionTree(levels, LaneOrder.INTERLEAVED), workspace=workspace,
        rows_per_channel=rows, block_split=block_split, **layout)


def _rows(problem: BatchNormStatsProblem) -> int:
    return problem.n * _rows_layout(problem)["segs_per_plane"] if problem.reduction_len else 0


def _check_empty(problem):
    if problem.reduction_len:
        return Rejection("empty", f"each channel has N*HxW={problem.reduction_len} elements", True)
    return None


def _check_split_c(problem):
    if not problem.reduction_len:
        return Rejection("split_c", "no elements to reduce", True)
    cores = problem.soc.vector_cores
    if problem.c < cores and _rows(problem) >= 2:
        return Rejection("split_c", f"C={problem.c} < {cores} cores would leave {cores - problem.c} "
                         f"cores idle; the reduction axis has {_rows(problem)} rows to split", False)
    return None


def _check_split_r(problem):
    if not problem.reduction_len:
        return Rejection("split_r", "no elements to reduce", True)
    if _rows(problem) < 2:
        return Rejection("split_r", "the reduction axis is a single row, nothing to split", True)
    return None


def _check_atomic(problem):
    rejection = _check_split_r(problem)
    if rejection is not None:
        return Rejection("atomic", rejection.reason, True)
    return Rejection("atomic", f"{ACLNN_NAMES[problem.op]} is deterministic by default; atomic only when asked for",
                     False)


#: Whether a host SoC plans normkern's own strategy (BatchNormStats' ``channels``, BatchNormReduceBackward's
#: ``planes``) unless another is asked for; tests of the rows strategies' host model turn it off.
HOST_OWN_PLAN = True


def check_own(strategy: str, problem) -> Rejection | None:
    """The rule of a plan of normkern's own: the host SoC's, with elements to reduce."""
    if problem.soc.arch != HOST:
        return Rejection(strategy, f"normkern's own CPU plan; {problem.soc.name} runs the rows strategies", True)
    if not problem.reduction_len:
        return Rejection(strategy, "no elements to reduce", True)
    if not HOST_OWN_PLAN:
        return Rejection(strategy, "the rows strategies' host model was asked for", False)
    return None


def row_reduction_registry(op: str, strategy_enum, own, build_own, host: bool) -> StrategyRegistry:
    """The four strategies of a per-channel row reduction, for ``strategy_enum``'s members of the same
    names (BatchNormStats and BatchNormReduceBackward), and ``own`` (built by ``build_own(problem,
    rejected)``): first after ``empty`` on the host (``host``), last on the NPUs, where it is refused."""
    checks = {"empty": _check_empty, "split_c": _check_split_c, "split_r": _check_split_r,
              "atomic": _check_atomic}
    rows = tuple(Strategy(s, checks[s.value], lambda p, r, s=s: _build(p, s, r)) for s in strategy_enum if s is not own)
    mine = Strategy(own, lambda p: check_own(own.value, p), build_own)
    return StrategyRegistry(op, strategy_enum, rows[:1] + (mine,) + rows[1:] if host else rows + (mine,))


def _build_channels(problem, rejected):
    from .batch_norm import plan_stats_channels  # batch_norm builds on this module's problem

    return plan_stats_channels(problem, rejected)


def check_shape(op: str, shape: tuple[int, ...]) -> None:
    """Rank 2 to 8, no negative dim, C > 0."""
    if not 2 <= len(shape) <= 8:
        raise TilingError(f"[{op}] input must have rank 2 to 8, got rank {len(shape)}")
    if any(d < 0 for d in shape):
        raise TilingError(f"[{op}] input dims must be non-negative, got {shape}")
    if shape[1] == 0:
        raise TilingError(f"[{op}] input dim 1 (C) must be positive, got shape {shape}")


REGISTRY = row_reduction_registry(OP, BatchNormStatsStrategy, BatchNormStatsStrategy.CHANNELS, _build_channels, False)
HOST_REGISTRY = row_reduction_registry(OP, BatchNormStatsStrategy, BatchNormStatsStrategy.CHANNELS, _build_channels,
                                       True)


def plan_batch_norm_stats(shape, dtype="float32", soc: str | SocSpec | None = None,
                          strategy: str | BatchNormStatsStrategy | None = None) -> BatchNormStatsPlan:
    """Plan BatchNormStats for an input of ``shape`` and ``dtype`` on ``soc``.

    ``strategy`` forces one strategy (by Enum or name); otherwise the first capable one is chosen
    and the plan records why the earlier ones were passed over.
    """
    return _plan_cached(tuple(int(d) for d in shape), dtype_name(dtype), get_soc(soc),
                        REGISTRY.parse(strategy))


@lru_cache(maxsize=256)
def _plan_cached(shape, dtype, soc, strategy) -> BatchNormStatsPlan:
    check_shape(OP, shape)
    require(OP, soc, dtype)
    return (HOST_REGISTRY if soc.arch == HOST else REGISTRY).plan(BatchNormStatsProblem(shape, dtype, soc), strategy)
