"""The float64 reference of BatchNormReduceBackward, per channel (axis 1) over every other axis::

    sum_dy = sum(dy)    sum_dy_xmu = sum(dy * (x - mean))
    grad_weight = sum_dy_xmu * invstd    grad_bias = sum_dy
"""

from __future__ import annotations

import numpy as np


def batch_norm_backward_reduce_reference(dy, x, mean, invstd) -> tuple[np.ndarray, ...]:
    dy64 = np.asarray(dy).astype(np.float64)
    x64 = np.asarray(x).astype(np.float64)
    c = x64.shape[1]
    axes = (0, *range(2, x64.ndim))
    mean64 = np.asarray(mean).astype(np.float64)
    sum_dy = dy64.sum(axis=axes)
    sum_dy_xmu = (dy64 * (x64 - mean64.reshape((1, c) + (1,) * (x64.ndim - 2)))).sum(axis=axes)
    return sum_dy, sum_dy_xmu, sum_dy_xmu * np.asarray(invstd).astype(np.float64), sum_dy
