"""The float64 reference: the specification of GroupNormBackward.

For ``N`` samples, ``C`` channels of ``HxW`` elements in ``group`` groups of ``C_G = C/group``
channels, per sample ``n`` and group ``g`` with ``m = mean[n, g]``, ``r = rstd[n, g]`` and
``x_hat = (x - m) * r``, ``M = C_G * HxW``::

    dbeta[n, c]  = sum_hw dy                 dgamma[n, c] = sum_hw dy * x_hat
    grad_beta[c] = sum_n dbeta[n, c]         grad_gamma[c] = sum_n dgamma[n, c]
    c1 = sum_{c in g} gamma[c] * dbeta[n, c] / M,   c2 = sum_{c in g} gamma[c] * dgamma[n, c] / M
    grad_input = r * (gamma[c] * dy - c1 - x_hat * c2)

which is PyTorch's ``native_group_norm_backward`` (``dx = r*gamma*dy + c2'*x + c3'``) rearranged.
gamma None means ones.
"""

from __future__ import annotations

import numpy as np


def group_norm_backward_reference(grad_out, input, mean, rstd, gamma, N: int, C: int, HxW: int, group: int):
    dy = np.asarray(grad_out, np.float64).reshape(N, group, C // group, HxW)
    x = np.asarray(input, np.float64).reshape(N, group, C // group, HxW)
    m = np.asarray(mean, np.float64).reshape(N, group, 1, 1)
    r = np.asarray(rstd, np.float64).reshape(N, group, 1, 1)
    gam = np.ones(C) if gamma is None else np.asarray(gamma, np.float64).reshape(C)
    gam = gam.reshape(1, group, C // group, 1)
    x_hat = (x - m) * r
    dbeta = dy.sum(axis=3, keepdims=True)
    dgamma = (dy * x_hat).sum(axis=3, keepdims=True)
    scale = (C // group) * HxW
    c1 = (gam * dbeta).sum(axis=2, keepdims=True) / scale
    c2 = (gam * dgamma).sum(axis=2, keepdims=True) / scale
    grad_input = r * (gam * dy - c1 - x_hat * c2)
    return (grad_input.reshape(np.shape(input)), dgamma.sum(axis=0).reshape(C), dbeta.sum(axis=0).reshape(C))
