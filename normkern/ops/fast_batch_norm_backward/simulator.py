"""A NumPy interpreter of FastBatchNormBackward plans: slow, literal, equal to the kernels bit for bit.

A ``planes`` plan (the host's) adds each segment's N planes position by position, sums the row by 64 lanes (one
add at a time), folds them pairwise and adds the segments' sums in order (``_simulate_planes``).
Any other plan: it walks ``plan.jobs()`` phase by phase: for each job and channel it builds the two UB buffers of
``plan.fold_len`` float32 zeros, adds every UB pass into them at its positions (plane ``j`` of a
pass at ``j * b1_align``), folds each whole buffer with the fold-halves ReduceSum (every element,
zeros included), and for cross-core jobs goes through a NaN-filled workspace of per-core slots
added in core order. The elementwise formulas are those of ``kernel.py``, in NumPy float32.
"""

from __future__ import annotations

import numpy as np

from tiling import FastBatchNormBackwardPlan, FastBatchNormBackwardStrategy
from tiling.fast_batch_norm_backward import pass_extent, pass_step

from ...kernels.simulate import F32, fold_halves, planes_sums


def _passes(plan: FastBatchNormBackwardPlan, first: int, count: int):
    """[(plane, hw_start, hw_len, planes)] of the UB passes over blocks [first, first + count)."""
    geometry = plan.passes
    return [pass_extent(geometry, block, first + count)
            for block in range(first, first + count, pass_step(geometry))]


def simulate(plan: FastBatchNormBackwardPlan, dy3: np.ndarray, x3: np.ndarray, mean: np.ndarray,
             scale: np.ndarray, weight: np.ndarray, write_dx: bool = True):
    """Execute ``plan`` on (B0, C, B1) arrays; returns ``(dx float32 or None, grad_weight, grad_bias)``.

    ``mean``, ``scale`` (the inverse standard deviation) and ``weight`` are float32 (C,).
    """
    dy = dy3.astype(F32)
    x = x3.astype(F32)
    dx = np.full(dy.shape, np.nan, F32)
    grad_weight = np.full(plan.a, np.nan, F32)
    grad_bias = np.full(plan.a, np.nan, F32)
    slots = np.full((plan.block_dim, 2), np.nan, F32)
    n = F32(plan.b0 * plan.b1)
    if plan.strategy is FastBatchNormBackwardStrategy.PLANES:
        return _simulate_planes(plan, dy, x, mean, scale, weight, write_dx)

    def dx_blocks(c, first, count, sum_dy, gw):
        if not (plan.training and write_dx):
            return
        shift, k = sum_dy * (F32(1.0) / n), (gw * scale[c]) / n
        for plane, hw0, hw_len, planes in _passes(plan, first, count):
            sel = (slice(plane, plane + planes), c, slice(hw0, hw0 + hw_len))
            dx[sel] = (((dy[sel] - shift) - (x[sel] - mean[c]) * k) * scale[c]) * weight[c]

    for phase in sorted({job.phase for job in plan.jobs()}):
        jobs = [job for job in plan.jobs() if job.phase == phase]
        for job in jobs:
            for c in range(job.channel_start, job.channel_start + job.channel_count):
                acc = np.zeros((2, plan.fold_len), F32)
                for plane, hw0, hw_len, planes in _passes(plan, job.block_start, job.block_count):
                    for j in range(planes):
                        pos = slice(j * plan.b1_align, j * plan.b1_align + hw_len)
                        d = dy[plane + j, c, hw0:hw0 + hw_len]
                        acc[0, pos] = acc[0, pos] + d
                        acc[1, pos] = acc[1, pos] + (x[plane + j, c, hw0:hw0 + hw_len] - mean[c]) * d
                        if not plan.training and write_dx:
                            dx[plane + j, c, hw0:hw0 + hw_len] = (d * scale[c]) * weight[c]
                sums = (fold_halves(acc[0]), fold_halves(acc[1]))
                if job.group_size > 1:
                    slots[job.core] = sums
                    continue
                grad_bias[c], grad_weight[c] = sums[0], sums[1] * scale[c]
                dx_blocks(c, job.block_start, job.block_count, sums[0], grad_weight[c])
        for job in jobs:
            if job.group_size == 1:
                continue
            c = job.channel_start
            totals = [F32(0.0), F32(0.0)]
            for k in (0, 1):
                for member in range(job.group_first, job.group_first + job.group_size):
                    totals[k] = totals[k] + slots[member, k]
            gw = totals[1] * scale[c]
            if job.core == job.group_first:
                grad_bias[c], grad_weight[c] = totals[0], gw
            dx_blocks(c, job.block_start, job.block_count, totals[0], gw)
    return (dx if write_dx else None), grad_weight, grad_bias


def _simulate_planes(plan, dy, x, mean, scale, weight, write_dx):
    """A ``planes`` plan, every channel side by side: each segment's planes added position by position in plane
    order, the result summed by 64 lanes and folded, the segments' sums added in order."""
    args = plan.kernel_args()
    sum_dy, sum_dyx = planes_sums(args, dy, x, mean)
    grad_bias, grad_weight = sum_dy, sum_dyx * scale
    dx = None
    if write_dx:
        r, w = scale[None, :, None], weight[None, :, None]
        if plan.training:
            n = F32(args.n * args.hxw)
            shift = (grad_bias * (F32(1.0) / n))[None, :, None]
            k = ((grad_weight * scale) / n)[None, :, None]
            dx = (((dy - shift) - (x - mean[None, :, None]) * k) * r) * w
        else:
            dx = (dy * r) * w
    return dx, grad_weight, grad_bias
