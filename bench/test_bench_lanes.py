"""What the lanes level costs: the 64-lane exact order against a plain sequential float32 loop."""

import numpy as np
import pytest
from numba import njit

from normkern.kernels.lanes import accumulate, fold

from .conftest import median_seconds, record


@njit(cache=True)
def _sequential(x):
    total = np.float32(0.0)
    for i in range(x.shape[0]):
        total += x[i]
    return total


@njit(cache=True)
def _lanes(x):
    lanes = np.zeros(64, np.float32)
    accumulate(lanes, x)
    return fold(lanes)


@pytest.mark.parametrize("n", [10**5, 10**6, 10**8], ids=["L2", "L3", "DRAM"])
def test_lanes_vs_sequential(environment, n):
    x = np.random.default_rng(0).random(n, dtype=np.float32)
    exact = float(np.sum(x, dtype=np.float64))
    row = {"op": "lanes", "n": n}
    for name, fn in (("sequential", _sequential), ("lanes64", _lanes)):
        med, _ = median_seconds(lambda fn=fn: fn(x), rounds=9)
        row[f"{name}_GBps"] = round(x.nbytes / med / 1e9, 1)
        row[f"{name}_rel_err"] = f"{abs(float(fn(x)) - exact) / exact:.1e}"
    record(row)
