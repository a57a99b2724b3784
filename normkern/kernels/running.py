"""Per-channel updates of a batch norm's running statistics and their inverse standard deviation, as compiled
serial loops over the channels (one call where NumPy takes one call an operation).

Each is the float32 expression its NumPy twin evaluates, operation by operation (no fused multiply-add: no
fast-math), so the bits are NumPy's.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, error_model="numpy")
def update_running(running_mean, running_var, mean, invstd, eps, keep, factor, unbiased):
    """``running = running * keep + batch * weight`` per channel, float32: the mean with ``factor``, the
    variance ``1 / (invstd * invstd) - eps`` with ``unbiased`` (torch.nn's update, its variance as PyTorch's
    SyncBatchNorm derives it)."""
    for c in range(mean.shape[0]):
        variance = np.float32(1.0) / (invstd[c] * invstd[c]) - eps
        running_mean[c] = running_mean[c] * keep + mean[c] * factor
        running_var[c] = running_var[c] * keep + variance * unbiased


@njit(cache=True, nogil=True, error_model="numpy")
def inverse_std(variance, eps, out):
    """``out = 1 / sqrt(variance + eps)`` per channel, float32."""
    for c in range(variance.shape[0]):
        out[c] = np.float32(1.0) / np.sqrt(variance[c] + eps)
