"""A NumPy interpreter of BatchNormElemt plans, equal to the kernel bit for bit.

Each core's flat range is computed on its own, in the plan's UB blocks, with NumPy float32 operations
in the kernel's order; the per-channel scale is formed from the plan's ``recompute_var`` rule here,
independently of the API's code.
"""

from __future__ import annotations

import numpy as np

from tiling import BatchNormElemtPlan, ElementwiseStrategy

from ...kernels.simulate import ub_blocks

F32 = np.float32


def simulate(plan: BatchNormElemtPlan, x, weight, bias, mean, invstd, eps) -> np.ndarray:
    out = np.full(x.shape, np.nan, x.dtype).reshape(-1)
    if plan.strategy is ElementwiseStrategy.EMPTY:
        return out.reshape(x.shape)
    inv = np.asarray(invstd).astype(F32)
    if plan.recompute_var:
        var = (F32(1) / (inv * inv) - F32(eps)).astype(np.asarray(mean).dtype).astype(F32)
        scale = F32(1) / np.sqrt(var + F32(eps))
    else:
        scale = inv
    ones = np.ones(plan.c, F32)
    m = np.asarray(mean).astype(F32)
    w = ones if weight is None else np.asarray(weight).astype(F32)
    b = ones * 0 if bias is None else np.asarray(bias).astype(F32)
    flat = np.ascontiguousarray(x).reshape(-1)
    for start, stop in ub_blocks(plan):
        channel = (np.arange(start, stop) // plan.hxw) % plan.c
        values = flat[start:stop].astype(F32)
        out[start:stop] = (((values - m[channel]) * scale[channel]) * w[channel] + b[channel]).astype(x.dtype)
    return out.reshape(x.shape)
