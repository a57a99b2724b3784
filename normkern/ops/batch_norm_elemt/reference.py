"""The float64 reference of BatchNormElemt: ``(x - mean) * invstd * weight + bias`` per channel (axis 1)."""

from __future__ import annotations

import numpy as np


def batch_norm_elemt_reference(x, weight, bias, mean, invstd) -> np.ndarray:
    x64 = np.asarray(x).astype(np.float64)
    c = x64.shape[1]
    shape = (1, c) + (1,) * (x64.ndim - 2)

    def channel(v, fill):
        return np.full(shape, fill) if v is None else np.asarray(v).astype(np.float64).reshape(shape)

    return (x64 - channel(mean, 0.0)) * channel(invstd, 1.0) * channel(weight, 1.0) + channel(bias, 0.0)
