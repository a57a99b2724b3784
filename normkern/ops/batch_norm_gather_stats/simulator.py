"""NumPy interpreter of gather-stats plans, equal to the kernel bit for bit (float32, NaN scratch)."""

from __future__ import annotations

import numpy as np

from tiling import GatherStatsPlan, GatherStatsStrategy
from tiling.batch_norm_gather_stats import FIRST_AXIS

F32 = np.float32


def simulate(plan: GatherStatsPlan, mean, invstd, counts, running_mean, running_var, momentum, eps):
    """Returns float32 ``(mean_all, invstd_all, running_mean', running_var')`` (running None if absent)."""
    eps32, m32 = F32(eps), F32(momentum)
    if plan.strategy is GatherStatsStrategy.EMPTY:
        return np.zeros(plan.c, F32), np.full(plan.c, np.nan, F32), running_mean, running_var
    mean = np.asarray(mean).astype(F32)
    invstd = np.asarray(invstd).astype(F32)
    w = np.asarray(counts).astype(F32)
    total = F32(0)
    for n in range(plan.n):
        total = F32(total + w[n])
    inv = F32(1) / invstd

    def pass_sum(terms):
        if plan.strategy not in FIRST_AXIS:
            acc = np.zeros(plan.c, F32)
            for n in range(plan.n):
                acc += terms(n)
            return acc
        partial = np.full((plan.core_split.parts, plan.c), np.nan, F32)
        for k, (start, count) in enumerate(plan.core_split.ranges()):
            partial[k] = 0
            for n in range(start, start + count):
                partial[k] += terms(n)
        acc = np.zeros(plan.c, F32)
        for k in range(plan.core_split.parts):
            acc += partial[k]
        return acc

    mean_all = pass_sum(lambda n: mean[n] * w[n]) / total

    def terms2(n):
        d = mean[n] - mean_all
        return ((inv[n] * inv[n] - eps32) + d * d) * w[n]

    var_sum = pass_sum(terms2)
    invstd_all = F32(1) / np.sqrt(var_sum / total + eps32)
    new_mean = new_var = None
    if running_mean is not None:
        keep = F32(1) - m32
        new_mean = keep * np.asarray(running_mean).astype(F32) + m32 * mean_all
        new_var = keep * np.asarray(running_var).astype(F32) + m32 * (var_sum / (total - F32(1)))
    return mean_all, invstd_all, new_mean, new_var
