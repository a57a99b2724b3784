"""The float64 reference: the specification of BatchNorm's forward.

For ``x`` of shape ``(N, C, *spatial)`` and each channel ``c`` over all other axes, in training::

    mean[c]   = mean(x[:, c]);  var[c] = mean((x[:, c] - mean[c])^2)          # biased
    invstd[c] = 1 / sqrt(var[c] + eps)
    y         = (x - mean[c]) * invstd[c] * weight[c] + bias[c]
    running_mean[c] <- (1 - momentum) * running_mean[c] + momentum * mean[c]
    running_var[c]  <- (1 - momentum) * running_var[c] + momentum * var[c] * R / (R - 1)   # R = N*HxW

In evaluation the running statistics take the place of the batch's and nothing is updated. Missing weight,
bias, running mean and running variance are ones, zeros, zeros and ones.
"""

from __future__ import annotations

import numpy as np


def batch_norm_reference(x, weight, bias, running_mean, running_var, training: bool, momentum: float, eps: float):
    """``(output, save_mean, save_invstd, running_mean, running_var)`` in float64."""
    x64 = np.asarray(x).astype(np.float64)
    c = x64.shape[1]

    def vec(value, fill):
        return np.full(c, fill) if value is None else np.asarray(value).astype(np.float64)

    w, b, rm, rv = vec(weight, 1.0), vec(bias, 0.0), vec(running_mean, 0.0), vec(running_var, 1.0)
    shape = (1, c) + (1,) * (x64.ndim - 2)
    if x64.size == 0:
        return x64, np.zeros(c), np.full(c, np.nan), rm, rv
    if training:
        axes = (0, *range(2, x64.ndim))
        count = x64.size // c
        mean = x64.mean(axis=axes)
        var = ((x64 - mean.reshape(shape)) ** 2).mean(axis=axes)
        rm = (1 - momentum) * rm + momentum * mean
        rv = (1 - momentum) * rv + momentum * var * count / (count - 1) if count > 1 else np.full(c, np.nan)
    else:
        mean, var = rm, rv
    invstd = 1.0 / np.sqrt(var + eps)
    y = (x64 - mean.reshape(shape)) * (invstd * w).reshape(shape) + b.reshape(shape)
    return y, mean, invstd, rm, rv
