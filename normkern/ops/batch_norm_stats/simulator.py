"""A NumPy interpreter of BatchNormStats plans: slow, obvious, and equal to the kernels bit for bit.

It walks the plan's fields (core ranges, rows, blocks, lanes, the core order) step by step in
float32 (the host's ``channels`` plan: BatchNorm's stream statistics, ``kernels.simulate.stream_stats``).
Scratch (lanes, workspace) starts as NaN, so a read before a write would show. Sums along
one lane use ``np.add.accumulate``, which adds strictly in order; channels are independent and are
processed side by side.
"""

from __future__ import annotations

import numpy as np

from tiling import LANES, BatchNormStatsPlan, BatchNormStatsStrategy
from tiling.batch_norm import BatchNormStatsChannelsPlan

from ...kernels.simulate import lanes_add, pairwise64, plane_row, stream_stats

F32 = np.float32


def _rows_sum(plan, xc, first_row, n_rows, mean):
    """Per-channel sums over rows [first_row, first_row + n_rows) of ``xc`` (C', N, HxW)."""
    total = np.zeros(xc.shape[0], F32)
    lanes = np.full((xc.shape[0], LANES), np.nan, F32)
    for block_start in range(first_row, first_row + n_rows, plan.rows_per_block):
        lanes[:] = 0
        for r in range(block_start, min(block_start + plan.rows_per_block, first_row + n_rows)):
            n, start, length = plane_row(plan, r)
            values = xc[:, n, start:start + length]
            if mean is not None:
                values = values - mean[:, None]
                values = values * values
            lanes_add(lanes, values)
        total += pairwise64(lanes)
    return total


def simulate(plan: BatchNormStatsPlan | BatchNormStatsChannelsPlan, x: np.ndarray, eps: float,
             arrival_order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Execute ``plan`` on ``x``; returns float32 ``(mean, invstd)``.

    ``arrival_order`` (2, cores) gives, per pass, the order in which an atomic plan adds the core
    partials; deterministic plans add them in core order.
    """
    eps32 = F32(eps)
    count = F32(plan.reduction_len)
    if plan.strategy is BatchNormStatsStrategy.EMPTY:
        return np.zeros(plan.c, F32), np.full(plan.c, np.nan, F32)
    if plan.strategy is BatchNormStatsStrategy.CHANNELS:
        x3 = np.ascontiguousarray(x).astype(F32).reshape(plan.n, plan.c, plan.hxw)
        mean, _, invstd = stream_stats(x3, plan.chunk_elems, eps32)
        return mean, invstd
    xc = np.ascontiguousarray(x).astype(F32).reshape(plan.n, plan.c, plan.hxw).transpose(1, 0, 2)
    mean = np.full(plan.c, np.nan, F32)
    sqdev = np.full(plan.c, np.nan, F32)
    if plan.strategy is BatchNormStatsStrategy.SPLIT_C:
        for start, channels in plan.core_split.ranges():
            sel = slice(start, start + channels)
            mean[sel] = _rows_sum(plan, xc[sel], 0, plan.rows_per_channel, None) / count
            sqdev[sel] = _rows_sum(plan, xc[sel], 0, plan.rows_per_channel, mean[sel])
    else:
        cores = plan.block_dim
        if plan.strategy is BatchNormStatsStrategy.ATOMIC:
            if arrival_order is None:
                raise ValueError("an atomic plan needs its arrival order to be simulated")
            order = np.asarray(arrival_order)
        else:
            order = np.tile(np.arange(cores), (2, 1))
        partials = np.full((2, cores, plan.c), np.nan, F32)
        for p, target in enumerate((mean, sqdev)):
            for core, (first, n_rows) in enumerate(plan.core_split.ranges()):
                partials[p, core] = _rows_sum(plan, xc, first, n_rows, None if p == 0 else mean)
            total = np.zeros(plan.c, F32)
            for k in order[p]:
                total += partials[p, k]
            target[:] = total / count if p == 0 else total
    invstd = F32(1.0) / np.sqrt(sqdev / count + eps32)
    return mean, invstd
