"""The plain math of FastBatchNormBackward, one row at a time, in float32 (formulas in ``kernel.py``).

Every function here is the spec of what the faster sweeps (``sweeps.py``) do several rows at a time:
the same operations per element, in the same order.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tiling.fast_batch_norm_backward import pass_extent, pass_step

from ...kernels.dtypes import from_f32, to_f32

F32 = np.float32
#: The plan's own pass arithmetic, compiled into the kernels.
_pass_extent = njit(inline="always", error_model="numpy")(pass_extent)
_pass_step = njit(inline="always", error_model="numpy")(pass_step)


@njit(cache=True, inline="always", error_model="numpy")
def _infer_dx(d, scale, weight, like):
    """The inference dx of one element, ``(dy * r) * w``, in the element type of ``like``."""
    return from_f32((d * scale) * weight, like)


@njit(cache=True, inline="always", error_model="numpy")
def _add_at(acc_dy, acc_dyx, i, d, v, first):
    """acc[i] += (d, v); the first pass adds onto +0 without reading acc."""
    if first:
        acc_dy[i] = F32(0.0) + d
        acc_dyx[i] = F32(0.0) + v
    else:
        acc_dy[i] += d
        acc_dyx[i] += v


@njit(cache=True, inline="always", error_model="numpy")
def _add_row(acc_dy, acc_dyx, dy_row, x_row, mean, first):
    """acc += (dy, (x - mean) * dy) elementwise."""
    for i in range(dy_row.shape[0]):
        d = to_f32(dy_row[i])
        _add_at(acc_dy, acc_dyx, i, d, (to_f32(x_row[i]) - mean) * d, first)


@njit(cache=True, inline="always", error_model="numpy")
def _add_row_infer(acc_dy, acc_dyx, dy_row, x_row, dx_row, mean, scale, weight, first):
    """``_add_row`` that also stores the inference dx of each element it reads."""
    like = dx_row[0]
    for i in range(dy_row.shape[0]):
        d = to_f32(dy_row[i])
        _add_at(acc_dy, acc_dyx, i, d, (to_f32(x_row[i]) - mean) * d, first)
        dx_row[i] = _infer_dx(d, scale, weight, like)


@njit(cache=True, inline="always", error_model="numpy")
def _dx_row_infer(dy_row, dx_row, scale, weight):
    like = dx_row[0]
    for i in range(dy_row.shape[0]):
        dx_row[i] = _infer_dx(to_f32(dy_row[i]), scale, weight, like)


@njit(cache=True, inline="always", error_model="numpy")
def _dx_row(dy_row, x_row, dx_row, mean, shift, k, scale, weight):
    like = dx_row[0]
    for i in range(dy_row.shape[0]):
        d = to_f32(dy_row[i])
        dx_row[i] = from_f32((((d - shift) - (to_f32(x_row[i]) - mean) * k) * scale) * weight, like)


@njit(cache=True, inline="always", error_model="numpy")
def _row_start(t, plane, c, hw0):
    """Flat index of ``t[plane, c, hw0]`` in a C-contiguous (B0, C, B1) array."""
    return (plane * t.shape[1] + c) * t.shape[2] + hw0
