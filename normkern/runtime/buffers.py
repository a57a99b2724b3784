"""Arrays around a kernel call: output staging (kernels write float32 C-contiguous arrays, callers may
pass any layout or dtype), and the read-only addition orders of deterministic plans."""

from __future__ import annotations

import numpy as np

from ..kernels.dtypes import kernel_view
from .derived import derived

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


def in_order(plan, rows: int, count: int) -> np.ndarray:
    """A deterministic plan's (rows, count) addition order ``0, 1, ..., count - 1`` on every row: made once
    per plan (plans are cached) and read-only, so no call can change what the next one reads."""
    def make() -> np.ndarray:
        order = np.tile(np.arange(count, dtype=np.int64), (rows, 1))
        order.flags.writeable = False
        return order

    return derived(plan, ("in_order", rows, count), make)


def arrival_order(plan, seed: int | None = None) -> np.ndarray:
    """The (2, cores) order in which each of a plan's two row passes (BatchNormStats' two passes,
    BatchNormReduceBackward's two sums) adds the core partials: core order for a deterministic plan; for an
    atomic plan a random permutation a pass, drawn from ``seed`` (fresh entropy when None), which is how a
    replay reproduces a run."""
    cores = plan.block_dim
    if plan.strategy.value != "atomic":
        return in_order(plan, 2, cores)
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(cores), rng.permutation(cores)]).astype(np.int64)


def elementwise_output(output: np.ndarray | None, like: np.ndarray, launch) -> np.ndarray:
    """An elementwise op's output: ``output``, or a new array of ``like``'s shape and dtype. ``launch(flat)``
    fills a flat kernel view of it, or of a C-contiguous staging array copied into a strided ``output``;
    ``launch`` None (an empty plan) writes nothing."""
    target = output if output is not None else np.empty(like.shape, like.dtype)
    if launch is None:
        return target
    direct = target.flags.c_contiguous
    result = target if direct else np.empty(like.shape, like.dtype)
    launch(kernel_view(result).reshape(-1))
    if not direct:
        target[...] = result
    return target
