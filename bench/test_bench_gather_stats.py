"""BatchNormGatherStatsWithCounts: the end-to-end call (validation, cached plan, kernel) against NumPy.

Target: >= 3x a vectorized NumPy implementation at D=8, C=2048; the per-call overhead on tiny
inputs is reported. PyTorch has no CPU kernel for this op.
"""

from __future__ import annotations

import numpy as np
import pytest

import normkern

from .conftest import interleaved_medians, median_seconds, record


def numpy_gather(mean, invstd, counts, running_mean, running_var, momentum, eps):
    w = counts.astype(np.float32)[:, None]
    total = w.sum()
    mean_all = (mean * w).sum(axis=0) / total
    var_sum = ((1 / invstd**2 - eps + (mean - mean_all) ** 2) * w).sum(axis=0)
    invstd_all = 1 / np.sqrt(var_sum / total + eps)
    running_mean *= 1 - momentum
    running_mean += momentum * mean_all
    running_var *= 1 - momentum
    running_var += momentum * var_sum / (total - 1)
    return mean_all, invstd_all


@pytest.mark.parametrize("c", [256, 2048])
@pytest.mark.parametrize("d", [2, 8, 64])
def test_gather_stats(environment, d, c):
    rng = np.random.default_rng(0)
    mean = rng.standard_normal((d, c)).astype(np.float32)
    invstd = rng.uniform(0.5, 2, (d, c)).astype(np.float32)
    counts = rng.integers(1, 1000, d).astype(np.float32)
    x = np.empty((2, c), np.float32)
    rm, rv = np.zeros(c, np.float32), np.ones(c, np.float32)
    out = (np.empty(c, np.float32), np.empty(c, np.float32))
    row = {"op": "gather_stats", "D": d, "C": c}
    runs = {f"nk_{soc}": (lambda soc=soc: normkern.batch_norm_gather_stats_with_counts(
        x, mean, invstd, rm, rv, 0.1, 1e-5, counts, soc=soc, out=out)) for soc in ("Ascend910B2", "host")}
    runs["numpy"] = lambda: numpy_gather(mean, invstd, counts, rm, rv, 0.1, 1e-5)
    for name, (med, _) in interleaved_medians(runs, rounds=200, passes=3).items():
        row[f"{name}_us"] = round(med * 1e6, 1)
    for soc in ("Ascend910B2", "host"):
        row[f"nk_{soc}_vs_numpy"] = round(row["numpy_us"] / row[f"nk_{soc}_us"], 2)
    record(row)


def test_per_call_overhead(environment):
    """The whole Pythonic call on a (2, 4) problem: validation, plan cache, kernel launch."""
    mean = np.ones((2, 4), np.float32)
    counts = np.array([3, 5], np.float32)
    x = np.empty((2, 4), np.float32)
    med, _ = median_seconds(lambda: normkern.batch_norm_gather_stats_with_counts(
        x, mean, mean, None, None, 0.1, 1e-5, counts, soc="host"), rounds=500, warmup=10)
    stats_med, _ = median_seconds(lambda: normkern.batch_norm_stats(x, 1e-5, soc="host"), rounds=500, warmup=10)
    record({"op": "overhead", "gather_us": round(med * 1e6, 1), "batch_norm_stats_us": round(stats_med * 1e6, 1)})
