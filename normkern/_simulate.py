"""Reduction orders in plain NumPy float32, shared by the plan simulators (each written literally)."""

from __future__ import annotations

import numpy as np

from tiling import LANES

F32 = np.float32


def pairwise64(buf: np.ndarray) -> F32 | np.ndarray:
    """The 64-lane pairwise fold (32+32, 16+16, ..., 1+1) of ``buf[..., :64]``, zero-padded when shorter:
    a scalar of a 1-D buffer, one sum per row of a 2-D one."""
    lanes = np.zeros((*buf.shape[:-1], LANES), F32)
    lanes[..., :min(buf.shape[-1], LANES)] = buf[..., :LANES]
    width = LANES // 2
    while width >= 1:
        lanes[..., :width] = lanes[..., :width] + lanes[..., width:2 * width]
        width //= 2
    return lanes[..., 0]


def fold_halves(values: np.ndarray) -> F32:
    """The A2 ReduceSum order on a whole buffer: tail onto the front, halves down to 64, then pairwise."""
    buf = np.asarray(values, F32).copy()
    n = buf.shape[0]
    if n > LANES:
        half = LANES
        while half * 2 < n:
            half *= 2
        buf[:n - half] = buf[:n - half] + buf[half:n]
        while half > LANES:
            half //= 2
            buf[:half] = buf[:half] + buf[half:2 * half]
    return pairwise64(buf[:min(n, LANES)])
