"""Seeded example inputs for every op, as keyword dictionaries (used by the CLI and the determinism checker).

Values are what a training step would pass: activations with a non-zero mean, the statistics of a
forward pass over them, weights near one.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
OPS = ("batch_norm_stats", "batch_norm_gather_stats_with_counts", "fast_batch_norm_backward", "group_norm_backward")


def example_inputs(op: str, shape, dtype: str = "float32", *, seed: int = 0, group: int = 1, training: bool = True,
                   eps: float = 1e-5) -> dict:
    """Keyword arguments for ``normkern.<op>``. ``shape`` is the input's shape; for
    ``batch_norm_gather_stats_with_counts`` it is ``(D, C)``, the shape of the per-device statistics."""
    if op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}, got {op!r}")
    shape = tuple(int(d) for d in shape)
    kind = DTYPES[dtype]
    rng = np.random.default_rng(seed)
    if op == "batch_norm_gather_stats_with_counts":
        d, c = shape
        return {"input": np.empty((2, c), kind), "mean": (rng.standard_normal((d, c)) + 1).astype(kind),
                "invstd": rng.uniform(0.5, 2.0, (d, c)).astype(kind), "running_mean": np.zeros(c, kind),
                "running_var": np.ones(c, kind), "momentum": 0.1, "eps": eps,
                "counts": rng.integers(1, 4096, d).astype(kind)}
    x = (rng.standard_normal(shape) * 2 + 1).astype(kind)
    if op == "batch_norm_stats":
        return {"input": x, "eps": eps}
    dy = rng.standard_normal(shape).astype(kind)
    n, c = shape[0], shape[1]
    if op == "fast_batch_norm_backward":
        axes = (0, *range(2, len(shape)))
        x64 = x.astype(np.float64)
        return {"grad_out": dy, "input": x, "weight": rng.uniform(0.5, 2, c).astype(np.float32),
                "running_mean": x64.mean(axis=axes).astype(np.float32), "running_var": x64.var(axis=axes).astype(
                    np.float32), "save_mean": x64.mean(axis=axes).astype(np.float32),
                "save_invstd": (1 / np.sqrt(x64.var(axis=axes) + eps)).astype(np.float32), "training": training,
                "eps": eps}
    hxw = x.size // max(n * c, 1)
    grouped = x.astype(np.float64).reshape(n, group, -1)
    return {"grad_out": dy, "input": x, "mean": grouped.mean(axis=-1).astype(kind),
            "rstd": (1 / np.sqrt(grouped.var(axis=-1) + eps)).astype(kind),
            "gamma": rng.uniform(0.5, 1.5, c).astype(kind), "N": n, "C": c, "HxW": hxw, "group": group}
