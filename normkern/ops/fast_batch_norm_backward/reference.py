"""The float64 reference: the specification of FastBatchNormBackward.

For ``x``, ``dy`` of shape ``(N, C, *spatial)``, per channel ``c`` over the ``n = N * prod(spatial)``
elements of all other axes, with ``w = weight[c]`` (1 when weight is None)::

    training (mean m = save_mean[c], r = save_invstd[c], the reciprocal standard deviation):
        grad_bias   = sum dy
        grad_weight = sum (x - m) * dy * r
        grad_input  = (dy - sum(dy)/n - (x - m) * sum((x - m) * dy) * r^2 / n) * r * w
    inference (m = running_mean[c], r = 1/sqrt(running_var[c] + eps)):
        grad_input  = dy * r * w
        grad_weight = sum (x - m) * dy * r,   grad_bias = sum dy

as PyTorch's ``native_batch_norm_backward`` and the aclnn parameter table define them. Missing
statistics take CANN's fills: means 0, variances and save_invstd 1.
"""

from __future__ import annotations

import numpy as np


def fast_batch_norm_backward_reference(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd,
                                       training: bool, eps: float):
    dy = np.asarray(grad_out).astype(np.float64)
    x = np.asarray(input).astype(np.float64)
    c = x.shape[1]
    axes = (0, *range(2, x.ndim))
    bshape = (1, c) + (1,) * (x.ndim - 2)

    def vec(value, fill):
        return np.full(c, fill, np.float64) if value is None else np.asarray(value).astype(np.float64)

    w = vec(weight, 1.0)
    if training:
        m, r = vec(save_mean, 0.0), vec(save_invstd, 1.0)
    else:
        m, r = vec(running_mean, 0.0), 1.0 / np.sqrt(vec(running_var, 1.0) + eps)
    n = x.size // c if c else 0
    xm = x - m.reshape(bshape)
    sum_dy = dy.sum(axis=axes)
    dot = (xm * dy).sum(axis=axes)
    if training:
        grad_input = dy - (sum_dy / n).reshape(bshape) - xm * (dot * r * r / n).reshape(bshape)
        grad_input = grad_input * (r * w).reshape(bshape)
    else:
        grad_input = dy * (r * w).reshape(bshape)
    return grad_input, dot * r, sum_dy
