"""A NumPy interpreter of BatchNormElemtBackward plans, equal to the kernel bit for bit: the counter summed
one entry at a time, the means divided (and rounded to float16 for float16 statistics), then each UB
block of each core in the DAG's float32 order."""

from __future__ import annotations

import numpy as np

from tiling import BatchNormElemtBackwardPlan, ElementwiseStrategy

from ...kernels.simulate import ub_blocks

F32 = np.float32


def simulate(plan: BatchNormElemtBackwardPlan, dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, counter):
    out = np.full(x.shape, np.nan, x.dtype).reshape(-1)
    if plan.strategy is ElementwiseStrategy.EMPTY:
        return out.reshape(x.shape)
    n = F32(0)
    for value in np.asarray(counter).reshape(-1):
        n = F32(n + F32(value))
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_dy = np.asarray(sum_dy).astype(F32) / n
        mean_dy_xmu = np.asarray(sum_dy_xmu).astype(F32) / n
    if plan.stats_dtype == "float16":
        mean_dy, mean_dy_xmu = (v.astype(np.float16).astype(F32) for v in (mean_dy, mean_dy_xmu))
    inv = np.asarray(invstd).astype(F32)
    w = np.ones(plan.c, F32) if weight is None else np.asarray(weight).astype(F32)
    m = np.asarray(mean).astype(F32)
    flat_dy = np.ascontiguousarray(dy).reshape(-1)
    flat_x = np.ascontiguousarray(x).reshape(-1)
    for start, stop in ub_blocks(plan):
        ch = (np.arange(start, stop) // plan.hxw) % plan.c
        sub1 = flat_dy[start:stop].astype(F32) - mean_dy[ch]
        sub2 = flat_x[start:stop].astype(F32) - m[ch]
        mul2 = mean_dy_xmu[ch] * (inv[ch] * inv[ch])
        out[start:stop] = ((sub1 - sub2 * mul2) * (inv[ch] * w[ch])).astype(x.dtype)
    return out.reshape(x.shape)
