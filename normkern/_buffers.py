"""Output staging: kernels write float32 C-contiguous arrays, callers may pass any layout or dtype."""

from __future__ import annotations

import numpy as np

F32 = np.dtype(np.float32)


def f32_buffer(target: np.ndarray | None, size: int, copy: bool = False) -> np.ndarray:
    """``target`` itself when the kernel can write it in place, else a float32 working array
    (holding ``target``'s values when ``copy``, for in-place updates)."""
    if target is None:
        return np.empty(size, F32)
    if target.dtype == F32 and target.flags.c_contiguous:
        return target
    return target.astype(F32) if copy else np.empty(target.shape, F32)


def write_back(pairs) -> None:
    """Copy each ``(target, result)`` working array into its caller's array, rounding to its dtype."""
    for target, result in pairs:
        if target is not None and target is not result:
            target[...] = result.astype(target.dtype, copy=False)
