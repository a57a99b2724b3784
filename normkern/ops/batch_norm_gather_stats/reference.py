"""The float64 reference: the specification of BatchNormGatherStatsWithCounts.

Per channel, with device weights ``w = counts`` and ``W = sum(w)``::

    mean_all   = sum(mean * w) / W
    var_sum    = sum((1/invstd^2 - eps + (mean - mean_all)^2) * w)
    invstd_all = 1 / sqrt(var_sum / W + eps)
    running_mean' = (1 - momentum) * running_mean + momentum * mean_all
    running_var'  = (1 - momentum) * running_var + momentum * var_sum / (W - 1)     # unbiased

Nothing is guarded: a zero count contributes nothing unless its statistics are non-finite or its
invstd is 0 (then ``inf * 0`` is NaN); ``W == 1`` makes the unbiased variance ``x / 0``.
"""

from __future__ import annotations

import numpy as np


def batch_norm_gather_stats_reference(mean, invstd, counts, running_mean, running_var, momentum, eps):
    mean = np.asarray(mean).astype(np.float64)
    invstd = np.asarray(invstd).astype(np.float64)
    w = np.asarray(counts).astype(np.float64)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        total = w.sum()
        mean_all = (mean * w).sum(axis=0) / total
        var_sum = ((1 / invstd**2 - eps + (mean - mean_all) ** 2) * w).sum(axis=0)
        invstd_all = 1 / np.sqrt(var_sum / total + eps)
        new_mean = new_var = None
        if running_mean is not None:
            new_mean = (1 - momentum) * np.asarray(running_mean, np.float64) + momentum * mean_all
            new_var = (1 - momentum) * np.asarray(running_var, np.float64) + momentum * var_sum / (total - 1)
    return mean_all, invstd_all, new_mean, new_var
