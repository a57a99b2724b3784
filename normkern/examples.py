"""Seeded example inputs for every registered op, as keyword dictionaries (the CLI and the determinism
checker use them).

Values are what a training step would pass: activations with a non-zero mean, the statistics of a
forward pass over them, weights near one. Each op's record builds its own from the helpers here.
"""

from __future__ import annotations

import numpy as np

from . import registry
from .kernels.dtypes import bfloat16

DTYPE_NAMES = ("float32", "float16", "bfloat16")


def activations(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Values of mean 1 and standard deviation 2, rounded to ``dtype``."""
    return (rng.standard_normal(shape) * 2 + 1).astype(dtype)


def gradients(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Standard normal values, rounded to ``dtype``."""
    return rng.standard_normal(shape).astype(dtype)


def channel_statistics(x: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Float64 per-channel (axis 1) mean and ``1/sqrt(biased_var + eps)`` of ``x``, as a forward pass gives."""
    axes = (0, *range(2, x.ndim))
    x64 = x.astype(np.float64)
    return x64.mean(axis=axes), 1 / np.sqrt(x64.var(axis=axes) + eps)


def example_inputs(op: str, shape, dtype: str = "float32", *, seed: int = 0, eps: float = 1e-5, **options) -> dict:
    """Keyword arguments for ``normkern.<op>``: the op record's ``shape_help`` says what ``shape`` is,
    and ``options`` are the op's own (the ``dest`` of its CLI options, such as ``group``)."""
    record = registry.get(op, "example_inputs")
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"[{op}] dtype must be one of {', '.join(DTYPE_NAMES)}, got {dtype!r}")
    kind = bfloat16() if dtype == "bfloat16" else np.dtype(dtype)
    return record.example(tuple(int(d) for d in shape), kind, np.random.default_rng(seed), eps=eps, **options)
