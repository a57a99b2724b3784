"""A NumPy interpreter of BatchNormReduceBackward plans, equal to the kernels bit for bit.

The rows, blocks, lanes and core order of a BatchNormStats plan (its simulator's lane helpers), with
two sums per row: ``dy`` and ``dy * (x - shift)`` (``shift`` is mean on centered plans, else 0), each
product rounded to float32 before it is added; the host's ``planes`` plan in FastBatchNormBackward's ``planes``
order (``kernels.simulate.planes_sums``). Scratch starts as NaN, so a read before a write shows.
"""

from __future__ import annotations

import numpy as np

from tiling import LANES, BatchNormReduceBackwardPlan, BatchNormReduceBackwardStrategy
from tiling.batch_norm_backward_reduce import BatchNormReduceBackwardPlanesPlan

from ...kernels.simulate import lanes_add, pairwise64, plane_row, planes_sums

F32 = np.float32


def _sums(plan, dyc, xc, shift, first_row, n_rows):
    totals = np.zeros((2, dyc.shape[0]), F32)
    lanes = np.full((2, dyc.shape[0], LANES), np.nan, F32)
    for block_start in range(first_row, first_row + n_rows, plan.rows_per_block):
        lanes[:] = 0
        for r in range(block_start, min(block_start + plan.rows_per_block, first_row + n_rows)):
            n, start, length = plane_row(plan, r)
            d = dyc[:, n, start:start + length]
            lanes_add(lanes[0], d)
            lanes_add(lanes[1], d * (xc[:, n, start:start + length] - shift[:, None]))
        totals[0] += pairwise64(lanes[0])
        totals[1] += pairwise64(lanes[1])
    return totals


def simulate(plan: BatchNormReduceBackwardPlan | BatchNormReduceBackwardPlanesPlan, dy, x, mean, invstd,
             arrival_order: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Execute ``plan``: float32 ``(sum_dy, sum_dy_xmu, grad_weight, grad_bias)``; ``arrival_order``
    (2, cores) is the order an atomic plan adds the partials of each sum."""
    mean32 = np.asarray(mean).astype(F32)
    if plan.strategy is BatchNormReduceBackwardStrategy.EMPTY:
        zero = np.zeros(plan.c, F32)
        return zero, zero, zero, zero
    shift = mean32 if plan.centered else np.zeros(plan.c, F32)

    def by_channel(a):
        return np.ascontiguousarray(a).astype(F32).reshape(plan.n, plan.c, plan.hxw).transpose(1, 0, 2)

    if plan.strategy is BatchNormReduceBackwardStrategy.PLANES:
        args = plan.kernel_args()
        sums = planes_sums(args, *(np.ascontiguousarray(a).astype(F32).reshape(plan.n, plan.c, plan.hxw)
                                   for a in (dy, x)), shift)
        return sums[0], sums[1], sums[1] * np.asarray(invstd).astype(F32), sums[0]
    dyc, xc = by_channel(dy), by_channel(x)
    if plan.strategy is BatchNormReduceBackwardStrategy.SPLIT_C:
        sums = np.full((2, plan.c), np.nan, F32)
        for start, channels in plan.core_split.ranges():
            sel = slice(start, start + channels)
            sums[:, sel] = _sums(plan, dyc[sel], xc[sel], shift[sel], 0, plan.rows_per_channel)
    else:
        if plan.strategy is BatchNormReduceBackwardStrategy.ATOMIC and arrival_order is None:
            raise ValueError("an atomic plan needs its arrival order to be simulated")
        order = np.tile(np.arange(plan.block_dim), (2, 1)) if arrival_order is None else np.asarray(arrival_order)
        partials = np.stack([_sums(plan, dyc, xc, shift, first, n_rows)
                             for first, n_rows in plan.core_split.ranges()], axis=1)
        sums = np.zeros((2, plan.c), F32)
        for p in range(2):
            for k in order[p]:
                sums[p] += partials[p, k]
    xmu = sums[1] if plan.centered else sums[1] - mean32 * sums[0]
    return sums[0], xmu, xmu * np.asarray(invstd).astype(F32), sums[0]
