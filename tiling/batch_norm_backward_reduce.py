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
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from .batch_norm_stats import BatchNormStatsPlan, BatchNormStatsProblem, check_shape, row_reduction_registry
from .plan import dtype_name, unit
from .soc import DTYPE_BYTES, HOST, SocSpec, get_soc
from .support import require

OP = "batch_norm_backward_reduce"


class BatchNormReduceBackwardStrategy(enum.Enum):
    EMPTY = "empty"
    SPLIT_C = "split_c"
    SPLIT_R = "split_r"
    ATOMIC = "atomic"


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


def plan_batch_norm_backward_reduce(shape, dtype="float32", soc: str | SocSpec | None = None,
                                    strategy: str | BatchNormReduceBackwardStrategy | None = None
                                    ) -> BatchNormReduceBackwardPlan:
    """Plan BatchNormReduceBackward for ``grad_out``/``input`` of ``shape`` and ``dtype`` on ``soc``."""
    return _plan_cached(tuple(int(d) for d in shape), dtype_name(dtype), get_soc(soc), REGISTRY.parse(strategy))


REGISTRY = row_reduction_registry(OP, BatchNormReduceBackwardStrategy)


@lru_cache(maxsize=256)
def _plan_cached(shape, dtype, soc, strategy) -> BatchNormReduceBackwardPlan:
    check_shape(OP, shape)
    require(OP, soc, dtype)
    return REGISTRY.plan(BatchNormReduceBackwardProblem(shape, dtype, soc), strategy)
