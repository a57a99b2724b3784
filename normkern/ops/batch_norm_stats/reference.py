"""The float64 reference: the specification of BatchNormStats.

For ``x`` of shape ``(N, C, *spatial)`` and each channel ``c`` over all other axes::

    mean[c]   = mean(x[:, c])
    invstd[c] = 1 / sqrt(mean((x[:, c] - mean[c])^2) + eps)      # biased variance

An input with no elements per channel gives mean 0 and invstd NaN (as CANN).
"""

from __future__ import annotations

import numpy as np


def batch_norm_stats_reference(x: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    x64 = np.asarray(x).astype(np.float64)
    c = x64.shape[1]
    if x64.size == 0:
        return np.zeros(c), np.full(c, np.nan)
    axes = (0, *range(2, x64.ndim))
    mean = x64.mean(axis=axes)
    shape = (1, c) + (1,) * (x64.ndim - 2)
    var = ((x64 - mean.reshape(shape)) ** 2).mean(axis=axes)
    return mean, 1.0 / np.sqrt(var + eps)
