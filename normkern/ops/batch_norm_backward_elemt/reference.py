"""The float64 reference of BatchNormElemtBackward: with ``n = sum(count)``, per channel (axis 1)::

    grad_input = (dy - sum_dy/n - (x - mean) * invstd^2 * sum_dy_xmu/n) * invstd * weight
"""

from __future__ import annotations

import numpy as np


def batch_norm_backward_elemt_reference(dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count) -> np.ndarray:
    x64 = np.asarray(x).astype(np.float64)
    c = x64.shape[1]
    shape = (1, c) + (1,) * (x64.ndim - 2)

    def channel(v):
        return np.asarray(v).astype(np.float64).reshape(shape)

    n = np.asarray(count).astype(np.float64).sum()
    w = np.ones(shape) if weight is None else channel(weight)
    inv = channel(invstd)
    return (np.asarray(dy).astype(np.float64) - channel(sum_dy) / n
            - (x64 - channel(mean)) * inv * inv * channel(sum_dy_xmu) / n) * inv * w
