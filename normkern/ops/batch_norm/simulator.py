"""A NumPy interpreter of BatchNorm plans: slow, obvious, and equal to the kernels bit for bit.

It walks the plan's fields in float32: each channel's N planes end to end as one stream, each chunk of
``chunk_elems`` summed by 64 lanes (one add at a time) and folded pairwise, the chunk sums added in stream
order; then the output and the running statistics with the kernel's float32 expressions. Channels are
independent and are processed side by side.
"""

from __future__ import annotations

import numpy as np

from tiling import BatchNormPlan, BatchNormStrategy

from ...kernels.simulate import stream_stats

F32 = np.float32


def simulate(plan: BatchNormPlan, x, weight, bias, running_mean, running_var, momentum: float, eps: float):
    """Execute ``plan``: returns ``(output, save_mean, save_invstd, running_mean, running_var)``, the output in
    ``x``'s dtype, the rest float32 (the running statistics as updated, or as given in evaluation)."""
    c = plan.c
    w = np.ones(c, F32) if weight is None else np.asarray(weight, F32)
    b = np.zeros(c, F32) if bias is None else np.asarray(bias, F32)
    rm = np.zeros(c, F32) if running_mean is None else np.array(running_mean, F32)
    rv = np.ones(c, F32) if running_var is None else np.array(running_var, F32)
    eps32, momentum32 = F32(eps), F32(momentum)
    if plan.strategy is BatchNormStrategy.EMPTY:
        return np.empty(x.shape, x.dtype), np.zeros(c, F32), np.full(c, np.nan, F32), rm, rv
    planes = np.ascontiguousarray(x).astype(F32).reshape(plan.n, c, plan.hxw)
    if plan.training:
        mean, sqdev, invstd = stream_stats(planes, plan.chunk_elems, eps32)
        keep = F32(1.0) - momentum32
        rm = rm * keep + mean * momentum32
        rv = rv * keep + sqdev / F32(plan.stream_elems - 1) * momentum32
    else:
        mean = rm.copy()
        invstd = F32(1.0) / np.sqrt(rv + eps32)
    scale = invstd * w
    y = (planes - mean[None, :, None]) * scale[None, :, None] + b[None, :, None]
    return y.astype(x.dtype).reshape(x.shape), mean, invstd, rm, rv
