"""BatchNorm (aclnnBatchNorm) plans: normkern's own, for a CPU (``source="modeled"``; host only for now).

The forward of a batch norm in one op: in training, per channel ``c`` over its ``R = N*HxW`` elements::

    mean[c]   = S1 / R,  S1 = sum x                                  pass 1
    invstd[c] = 1 / sqrt(S2 / R + eps),  S2 = sum (x - mean[c])^2    pass 2 (two-pass, as batch_norm_stats)
    y         = (x - mean[c]) * (invstd[c] * weight[c]) + bias[c]    pass 3
    running_mean[c] = running_mean[c] * (1 - momentum) + mean[c] * momentum
    running_var[c]  = running_var[c] * (1 - momentum) + (S2 / (R - 1)) * momentum

all in float32; in evaluation, pass 3 alone with the running statistics (``invstd = 1 / sqrt(running_var +
eps)``). CANN's BatchNormV3 templates (``norm/batch_norm_v3``) are NPU plans this module does not model yet:
the NPU SoCs refuse the op (561002).

The order is the CPU's, not an Ascend template's: a channel's ``N`` planes, end to end, are one *stream*
of ``R`` elements (small planes pack across the batch instead of being reduced one at a time); the stream
is cut into *chunks* of ``CHUNK_ELEMS`` elements (the last one shorter), and each chunk is summed by 64
interleaved float32 lanes (lane ``j`` adds the chunk's elements ``j, j+64, ...`` in order), folded pairwise
32+32 .. 1+1; the chunk sums are added in stream order. The chunk length is a constant of the plan, not of the
machine: the bits are the same on every CPU and at any thread count (each core owns whole channels).

A core stages a channel's stream in float32 (the CPU's L2: ``stage_elems``, half the host SoC's "UB") when
it fits, so the three passes read the input once from memory; a longer stream is staged a chunk at a time
and read three times. Staging moves data, never an order: both give the same bits.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from functools import lru_cache
from math import prod
from typing import ClassVar, NamedTuple

import numpy as np

from .batch_norm_stats import BatchNormStatsProblem, BatchNormStatsStrategy, check_shape
from .picture import Share
from .plan import Plan, Rejection, Strategy, StrategyRegistry, dtype_name, unit
from .reduction import LANES, Combine, LaneOrder, ReduceLevel, ReductionTree
from .soc import SocSpec, get_soc
from .split import Split
from .support import require
from .workspace import WorkspaceLayout

OP = "batch_norm"
#: Elements of a channel's stream each 64-lane sum takes (64 KiB of float32: four 64-lane steps 64 times).
CHUNK_ELEMS = 16384


class BatchNormStrategy(enum.Enum):
    EMPTY = "empty"
    CHANNELS = "channels"


class BatchNormArgs(NamedTuple):
    """What the kernels receive: ints and int64 arrays only."""

    n: int
    c: int
    hxw: int
    chunk_elems: int
    stage_elems: int
    direct: bool
    core_start: np.ndarray
    core_count: np.ndarray


@dataclass(frozen=True)
class BatchNormProblem(BatchNormStatsProblem):
    """BatchNormStats' problem (its N, C and HxW) and the mode."""

    op: ClassVar[str] = OP

    training: bool = True


@dataclass(frozen=True, kw_only=True)
class BatchNormPlan(Plan):
    op = OP
    explain_properties = ("stream_elems", "direct", "staged")
    explain_notes = (
        "a channel's N planes end to end are one stream; pass 1 sums x, pass 2 (x - mean)^2, pass 3 writes y",
        "each chunk of the stream: 64 interleaved float32 lanes folded pairwise; chunk sums in stream order",
    )

    strategy: BatchNormStrategy
    shape: tuple[int, ...] = unit("", "input shape (N, C, *spatial)")
    dtype: str = unit("", "input and output dtype; compute is float32")
    n: int = unit("", "N, planes per channel")
    c: int = unit("", "C, channels")
    hxw: int = unit("elements", "plane size, the product of the spatial dims")
    training: bool = unit("", "batch statistics (and the running statistics updated), else the running ones")
    chunk_elems: int = unit("elements", "a chunk of a channel's stream, summed by 64 lanes (fixed: the same "
                            "bits on every CPU)")
    chunks_per_channel: int = unit("", "chunks of one channel's stream (0 in evaluation: nothing is summed)")
    stage_elems: int = unit("elements", "float32 staging capacity of a core (half its L2): a stream up to this "
                            "long is read from memory once")

    @property
    def stream_elems(self) -> int:
        """elements of one channel's stream, N * HxW [elements]"""
        return self.n * self.hxw

    @property
    def direct(self) -> bool:
        """whether the lanes add a float32 stream's planes where they lie (each plane whole lane steps: HxW a
        multiple of 64), with no staged copy"""
        return self.dtype == "float32" and self.hxw % LANES == 0

    @property
    def staged(self) -> bool:
        """whether a channel's whole stream is staged (one read of the input), else a chunk at a time (neither when
        direct)"""
        return self.stream_elems <= self.stage_elems and not self.direct

    def check(self) -> None:
        if prod(self.shape) != self.n * self.c * self.hxw or self.shape[1] != self.c:
            raise ValueError(f"plan dims {self.n},{self.c},{self.hxw} do not match shape {self.shape}")
        if self.strategy is BatchNormStrategy.EMPTY:
            if self.n * self.hxw:
                raise ValueError("an empty plan for a non-empty problem")
            return
        if self.chunk_elems % (4 * LANES) or self.stage_elems < self.chunk_elems:
            raise ValueError("chunks must be whole 4-vector steps and the stage must hold one")
        expected = -(-self.stream_elems // self.chunk_elems) if self.training else 0
        if self.chunks_per_channel != expected:
            raise ValueError(f"chunks_per_channel {self.chunks_per_channel} != {expected}")
        if self.core_split.total != self.c:
            raise ValueError(f"core split covers {self.core_split.total} channels, expected {self.c}")

    def index_axes(self) -> tuple[tuple[str, int], tuple[str, int]]:
        return ("channels", self.c), ("stream (N planes)", self.stream_elems)

    def shares(self) -> tuple[Share, ...]:
        """A core's channels, each whole stream; a new chunk at every ``chunk_elems``."""
        edges = tuple(range(self.chunk_elems, self.stream_elems, self.chunk_elems)) if self.training else ()
        return tuple(Share(core, 0, (start, start + count), (0, self.stream_elems), edges)
                     for core, (start, count) in enumerate(self.core_split.ranges()) if count)

    def summary_ub(self) -> str:
        if self.direct:
            return "planes in place"
        return f"stage {self.stage_elems} f32" + ("" if self.staged else " (chunks)")

    def kernel_args(self) -> BatchNormArgs:
        ranges = self.core_split.ranges()
        return BatchNormArgs(
            n=self.n, c=self.c, hxw=self.hxw, chunk_elems=self.chunk_elems, stage_elems=self.stage_elems,
            direct=self.direct, core_start=np.array([s for s, _ in ranges], dtype=np.int64),
            core_count=np.array([k for _, k in ranges], dtype=np.int64))


def stage_elems(soc: SocSpec) -> int:
    """A core's float32 staging capacity: half its L2 (the host SoC's "UB"), whole chunks, at least one."""
    return max(CHUNK_ELEMS, soc.ub_bytes // 2 // 4 // CHUNK_ELEMS * CHUNK_ELEMS)


def _build(problem: BatchNormProblem, strategy: BatchNormStrategy, rejected: tuple[Rejection, ...],
           plan_class: type[BatchNormPlan] = BatchNormPlan) -> BatchNormPlan:
    soc = problem.soc
    stream = problem.n * problem.hxw
    empty = strategy is BatchNormStrategy.EMPTY
    training = getattr(problem, "training", True)
    chunks = -(-stream // CHUNK_ELEMS) if training and not empty else 0
    core_split = Split.even(0 if empty else problem.c, soc.vector_cores)
    levels = ()
    if chunks:
        levels = (ReduceLevel("lanes", Combine.PAIRWISE, LANES, "64 interleaved float32 lanes over a chunk of a "
                              "channel's stream, folded 32+32 .. 1+1"),
                  ReduceLevel("chunks", Combine.SEQUENTIAL, chunks, "chunk sums in stream order"))
    return plan_class(
        soc=soc, strategy=strategy, source="modeled", tiling_key=None, rejected=rejected, tiling_data=None,
        block_dim=core_split.parts, core_split=core_split, tree=ReductionTree(levels, LaneOrder.INTERLEAVED),
        workspace=WorkspaceLayout(soc.system_workspace_bytes, 0), shape=problem.shape, dtype=problem.dtype,
        n=problem.n, c=problem.c, hxw=problem.hxw, training=training, chunk_elems=CHUNK_ELEMS,
        chunks_per_channel=chunks, stage_elems=stage_elems(soc))


@dataclass(frozen=True, kw_only=True)
class BatchNormStatsChannelsPlan(BatchNormPlan):
    """BatchNormStats' host plan (``channels``, normkern's own): BatchNorm's training statistics, passes 1 and 2."""

    op = "batch_norm_stats"
    own_strategies = ("channels",)
    explain_notes = (
        "a channel's N planes end to end are one stream; pass 1 sums x, pass 2 (x - mean)^2 (BatchNorm's passes)",
        "each chunk of the stream: 64 interleaved float32 lanes folded pairwise; chunk sums in stream order",
    )

    strategy: BatchNormStatsStrategy

    @property
    def reduction_len(self) -> int:
        """elements each channel's statistics reduce, N * HxW [elements]"""
        return self.stream_elems


def plan_stats_channels(problem, rejected: tuple[Rejection, ...]) -> BatchNormStatsChannelsPlan:
    """BatchNormStats' ``channels`` plan of ``problem`` (a ``BatchNormStatsProblem``): BatchNorm's training plan of
    the same input, as a plan of that op."""
    plan = _build(problem, BatchNormStrategy.CHANNELS, rejected, BatchNormStatsChannelsPlan)
    return replace(plan, strategy=BatchNormStatsStrategy.CHANNELS)


def _check_empty(problem):
    if problem.n * problem.hxw:
        return Rejection("empty", f"each channel has N*HxW={problem.n * problem.hxw} elements", True)
    return None


def _check_channels(problem):
    if not problem.n * problem.hxw:
        return Rejection("channels", "no elements per channel", True)
    return None


REGISTRY = StrategyRegistry(OP, BatchNormStrategy, (
    Strategy(BatchNormStrategy.EMPTY, _check_empty, lambda p, r: _build(p, BatchNormStrategy.EMPTY, r)),
    Strategy(BatchNormStrategy.CHANNELS, _check_channels, lambda p, r: _build(p, BatchNormStrategy.CHANNELS, r)),
))


def plan_batch_norm(shape, dtype="float32", soc: str | SocSpec | None = None,
                    strategy: str | BatchNormStrategy | None = None, *, training: bool = True) -> BatchNormPlan:
    """Plan BatchNorm's forward for an input of ``shape`` and ``dtype`` on ``soc`` (``training``: the batch's
    statistics, else the running ones). Only the ``host`` SoC has a plan; an NPU SoC raises a TilingError
    (561002) naming why."""
    return _plan_cached(tuple(int(d) for d in shape), dtype_name(dtype), get_soc(soc), REGISTRY.parse(strategy),
                        bool(training))


@lru_cache(maxsize=256)
def _plan_cached(shape, dtype, soc, strategy, training) -> BatchNormPlan:
    check_shape(OP, shape)
    require(OP, soc, dtype)
    return REGISTRY.plan(BatchNormProblem(shape, dtype, soc, training), strategy)
