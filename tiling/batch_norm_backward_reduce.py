"""BatchNormReduceBackward plans: the per-channel sums of BatchNormStats' row layout, over two tensors.

CANN composes aclnnBatchNormReduceBackward in its op_api (``norm/sync_batch_norm_backward_reduce``):
every input cast to float32, ``sumDy = ReduceSum(dy)`` and ``sumDyX = ReduceSum(Mul(dy, x))`` over
every axis but 1, then the elementwise SyncBatchNormBackwardReduce kernel (arch35 source public)::

    sumDyXmu   = sumDyX - mean * sumDy
    gradWeight = sumDyXmu * invstd
    gradBias   = sumDy

The reductions are the generic ReduceSum, whose tiling is not in ops-nn, so the sums are planned with
the row layout of :mod:`tiling.batch_norm_stats` (rows of planes in 64-lane UB blocks, channels or
rows over cores) and marked ``modeled``. Both sums walk the same rows in one pass: the UB holds a
row of ``dy``, a row of ``x`` (plus their float32 casts for half inputs) and the float32 product.

``centered`` says how ``sumDyXmu`` is formed. The NPU plans follow CANN (``False``: the product
``dy * x`` is summed and ``mean * sumDy`` subtracted afterwards, which cancels when ``|mean|`` is
large against the spread of ``x``). The ``host`` plans are ours: they sum ``dy * (x - mean)``
directly, as PyTorch's kernels do, at the same cost (``mean`` is an input).

The ``host`` SoC first tries a plan of normkern's own, chosen for a CPU: ``planes``, the order of
FastBatchNormBackward's host plan (``tiling.fast_batch_norm_backward.planes_tree``): each core owns whole channels,
a channel's N planes are added position by position in plane order, the row summed by 64 lanes, the segments of a
plane longer than 16384 in order. The two ops' sums over one input are then the same bits.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import ClassVar

from .batch_norm_stats import BatchNormStatsPlan, BatchNormStatsProblem, check_shape, row_reduction_registry
from .fast_batch_norm_backward import PlanesArgs, planes_args, planes_tree
from .picture import Share
from .plan import Plan, dtype_name, unit
from .soc import DTYPE_BYTES, HOST, SocSpec, get_soc
from .split import Split
from .support import require
from .workspace import WorkspaceLayout

OP = "batch_norm_backward_reduce"


class BatchNormReduceBackwardStrategy(enum.Enum):
    EMPTY = "empty"
    SPLIT_C = "split_c"
    SPLIT_R = "split_r"
    ATOMIC = "atomic"
    PLANES = "planes"


@dataclass(frozen=True)
class BatchNormReduceBackwardProblem(BatchNormStatsProblem):
    op: ClassVar[str] = OP

    def plan_class(self) -> type[BatchNormReduceBackwardPlan]:
        return BatchNormReduceBackwardPlan

    def plan_fields(self) -> dict:
        return {"centered": self.soc.arch == HOST}

    @property
    def bytes_per_elem(self) -> int:
        """UB bytes per element: dy and x (+ their float32 casts for half) + the float32 product."""
        f32 = DTYPE_BYTES["float32"]
        if self.dtype == "float32":
            return 3 * f32
        return 2 * DTYPE_BYTES[self.dtype] + 3 * f32


@dataclass(frozen=True, kw_only=True)
class BatchNormReduceBackwardPlan(BatchNormStatsPlan):
    op = OP
    explain_notes = (
        "one pass with two sums per row: sum_dy = sum dy and the dy*x (CANN) or dy*(x - mean) (host) sum",
        "rows start at lane 0 (64-element UB pitch); each lane adds its elements in ascending order",
    )
    partial_regions: ClassVar[tuple[str, str]] = ("dy_partials", "dyx_partials")

    strategy: BatchNormReduceBackwardStrategy
    bytes_per_elem: int = unit("bytes", "UB bytes per element (dy, x, casts, product)")
    centered: bool = unit("", "sum dy*(x - mean) directly (host); else sum dy*x, then subtract mean*sum_dy")


@dataclass(frozen=True, kw_only=True)
class BatchNormReduceBackwardPlanesPlan(Plan):
    """BatchNormReduceBackward's host plan (``planes``, normkern's own): FastBatchNormBackward's ``planes`` sums."""

    op = OP
    own_strategies = ("planes",)
    explain_notes = (
        "per channel: sum_dy = sum dy and sum_dy_xmu = sum dy*(x - mean), one pass over a core's channels",
        "a plane's segment of each of the N planes added position by position, in plane order, then 64 lanes",
    )

    strategy: BatchNormReduceBackwardStrategy
    shape: tuple[int, ...] = unit("", "grad_out and input shape (N, C, *spatial)")
    dtype: str = unit("", "grad_out and input dtype; compute is float32")
    n: int = unit("", "N, planes per channel")
    c: int = unit("", "C, channels")
    hxw: int = unit("elements", "plane size, the product of the spatial dims")
    centered: bool = unit("", "sum dy*(x - mean) directly (always, on this plan)")

    @property
    def segs_per_plane(self) -> int:
        """segments of a plane, each at most 16384 elements [segments]"""
        return self.kernel_args().segs_per_plane

    def check(self) -> None:
        if prod(self.shape) != self.n * self.c * self.hxw or self.shape[1] != self.c:
            raise ValueError(f"plan dims {self.n},{self.c},{self.hxw} do not match shape {self.shape}")
        if self.core_split.total != self.c:
            raise ValueError(f"core split covers {self.core_split.total} channels, expected {self.c}")

    def index_axes(self) -> tuple[tuple[str, int], tuple[str, int]]:
        return ("channels", self.c), ("planes", self.n)

    def shares(self) -> tuple[Share, ...]:
        """A core's channels, each over all N planes."""
        return tuple(Share(core, 0, (start, start + count), (0, self.n), ())
                     for core, (start, count) in enumerate(self.core_split.ranges()) if count)

    def summary_ub(self) -> str:
        return f"segments of {self.kernel_args().row_elems}"

    def kernel_args(self) -> PlanesArgs:
        return planes_args(self.n, self.c, self.hxw, self.core_split)


def _build_planes(problem: BatchNormReduceBackwardProblem, rejected) -> BatchNormReduceBackwardPlanesPlan:
    soc = problem.soc
    core_split = Split.even(problem.c, soc.vector_cores)
    return BatchNormReduceBackwardPlanesPlan(
        soc=soc, strategy=BatchNormReduceBackwardStrategy.PLANES, source="modeled", tiling_key=None,
        rejected=rejected, tiling_data=None, block_dim=core_split.parts, core_split=core_split,
        tree=planes_tree(problem.n, problem.hxw), workspace=WorkspaceLayout(soc.system_workspace_bytes, 0),
        shape=problem.shape, dtype=problem.dtype, n=problem.n, c=problem.c, hxw=problem.hxw, centered=True)


def plan_batch_norm_backward_reduce(shape, dtype="float32", soc: str | SocSpec | None = None,
                                    strategy: str | BatchNormReduceBackwardStrategy | None = None
                                    ) -> BatchNormReduceBackwardPlan | BatchNormReduceBackwardPlanesPlan:
    """Plan BatchNormReduceBackward for ``grad_out``/``input`` of ``shape`` and ``dtype`` on ``soc``."""
    return _plan_cached(tuple(int(d) for d in shape), dtype_name(dtype), get_soc(soc), REGISTRY.parse(strategy))


_PLANES = BatchNormReduceBackwardStrategy.PLANES
REGISTRY = row_reduction_registry(OP, BatchNormReduceBackwardStrategy, _PLANES, _build_planes, False)
HOST_REGISTRY = row_reduction_registry(OP, BatchNormReduceBackwardStrategy, _PLANES, _build_planes, True)


@lru_cache(maxsize=256)
def _plan_cached(shape, dtype, soc, strategy):
    check_shape(OP, shape)
    require(OP, soc, dtype)
    registry = HOST_REGISTRY if soc.arch == HOST else REGISTRY
    return registry.plan(BatchNormReduceBackwardProblem(shape, dtype, soc), strategy)
