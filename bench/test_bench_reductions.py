"""What each reduction strategy costs and buys: a sweep over length (1e3 to 1e8) and input dtype.

Strategies a kernel author chooses between, each an exact-order Numba loop (no fast-math):
``sequential`` (one float32 accumulator), ``lanes64`` (64 interleaved float32 lanes folded pairwise:
the host plans), ``fold_halves`` (the A2 ReduceSum of each 192 KiB UB block, blocks in order: the A2
plans), ``pairwise`` (blocks of 128 summed in order, then a balanced tree over the block sums),
``core_partials`` (lanes64 per core, the two cores' partials added in core order), ``atomic`` (48
per-core partials added in a fresh random arrival order every call, as atomic adds land),
``kahan`` (compensated sequential sum) and ``float64`` (64 float64 lanes). For each: GB/s of input,
and the error against the exact sum (``math.fsum``), relative to ``sum(|x|)``. Results go to
``bench/results/reductions-*.json`` (and a ``.png`` when matplotlib is installed: ``.[plot]``).
"""

from __future__ import annotations

import json
import math
import time

import ml_dtypes
import numpy as np
import pytest
from numba import njit, prange

from normkern.kernels.dtypes import kernel_view, to_f32
from normkern.kernels.lanes import LANES, accumulate, fold, fold_halves

from .conftest import RESULTS, median_seconds

LENGTHS = [10**k for k in range(3, 9)]
UB_ELEMS = 196608 // 4
A2_CORES = 48
TABLE: list[dict] = []


@njit(cache=True, error_model="numpy")
def sequential(x):
    s = np.float32(0.0)
    for i in range(x.shape[0]):
        s += to_f32(x[i])
    return s


@njit(cache=True, error_model="numpy")
def lanes64(x):
    lanes = np.zeros(LANES, np.float32)
    accumulate(lanes, x)
    return fold(lanes)


@njit(cache=True, error_model="numpy")
def fold_halves_blocks(x):
    buf = np.empty(UB_ELEMS, np.float32)
    total = np.float32(0.0)
    for start in range(0, x.shape[0], UB_ELEMS):
        block = x[start:min(start + UB_ELEMS, x.shape[0])]
        for i in range(block.shape[0]):
            buf[i] = to_f32(block[i])
        total += fold_halves(buf, block.shape[0], block.shape[0])
    return total


@njit(cache=True, error_model="numpy")
def pairwise(x):
    blocks = (x.shape[0] + 127) // 128
    sums = np.empty(max(blocks, 1), np.float32)
    for b in range(blocks):
        chunk = x[b * 128:min(b * 128 + 128, x.shape[0])]
        s = np.float32(0.0)
        for i in range(chunk.shape[0]):
            s += to_f32(chunk[i])
        sums[b] = s
    width = blocks
    while width > 1:
        half = width // 2
        for i in range(half):
            sums[i] = sums[2 * i] + sums[2 * i + 1]
        if width % 2:
            sums[half] = sums[width - 1]
            width = half + 1
        else:
            width = half
    return sums[0] if blocks else np.float32(0.0)


@njit(parallel=True, cache=True, error_model="numpy")
def core_partials(x, cores, order):
    """Per-core lanes64 partials over equal 64-aligned shares, added in ``order`` (core order: deterministic)."""
    n = x.shape[0]
    share = (n // cores + LANES - 1) // LANES * LANES
    parts = np.empty(cores, np.float32)
    for core in prange(cores):
        lanes = np.zeros(LANES, np.float32)
        accumulate(lanes, x[min(core * share, n):min((core + 1) * share, n)])
        parts[core] = fold(lanes)
    total = np.float32(0.0)
    for k in range(cores):
        total += parts[order[k]]
    return total


@njit(cache=True, error_model="numpy")
def kahan(x):
    s = np.float32(0.0)
    c = np.float32(0.0)
    for i in range(x.shape[0]):
        y = to_f32(x[i]) - c
        t = s + y
        c = (t - s) - y
        s = t
    return s


@njit(cache=True, error_model="numpy")
def float64_lanes(x):
    lanes = np.zeros(LANES, np.float64)
    steps = x.shape[0] // LANES
    for v in range(steps):
        chunk = x[v * LANES:(v + 1) * LANES]
        for j in range(LANES):
            lanes[j] += np.float64(to_f32(chunk[j]))
    for j in range(x.shape[0] - steps * LANES):
        lanes[j] += np.float64(to_f32(x[steps * LANES + j]))
    return lanes.sum()


def _strategies(rng):
    cores2, cores48 = np.arange(2, dtype=np.int64), np.arange(A2_CORES, dtype=np.int64)
    return {
        "sequential": sequential, "lanes64": lanes64, "fold_halves": fold_halves_blocks, "pairwise": pairwise,
        "core_partials": lambda x: core_partials(x, 2, cores2),
        "atomic": lambda x: core_partials(x, A2_CORES, rng.permutation(cores48)),
        "kahan": kahan, "float64": float64_lanes,
    }


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("length", LENGTHS, ids=lambda n: f"1e{round(math.log10(n))}")
def test_reduction_strategies(environment, length, dtype):
    rng = np.random.default_rng(length)
    x = (rng.standard_normal(length) + 1.0).astype(np.float32 if dtype == "float32" else ml_dtypes.bfloat16)
    exact = math.fsum(x.astype(np.float64))
    scale = float(np.abs(x.astype(np.float64)).sum())
    view = kernel_view(x)
    for name, fn in _strategies(rng).items():
        values = [float(fn(view)) for _ in range(5 if name == "atomic" else 1)]
        rounds = 3 if length >= 10**7 else 9
        med, iqr = median_seconds(lambda fn=fn: fn(view), rounds=rounds, warmup=1)
        errors = [abs(v - exact) / scale for v in values]
        TABLE.append({"strategy": name, "length": length, "dtype": dtype, "GBps": round(x.nbytes / med / 1e9, 2),
                      "ms": round(med * 1e3, 4), "rel_error": float(f"{max(errors):.3g}"),
                      "distinct_results": len(set(values))})


def teardown_module(module):
    if not TABLE:
        return
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (RESULTS / f"reductions-{stamp}.json").write_text(json.dumps(TABLE, indent=2))
    lines = [f"{'strategy':<14}{'dtype':<10}" + "".join(f"{f'1e{round(math.log10(n))}':>22}" for n in LENGTHS)]
    for name in dict.fromkeys(r["strategy"] for r in TABLE):
        for dtype in ("float32", "bfloat16"):
            cells = {r["length"]: r for r in TABLE if r["strategy"] == name and r["dtype"] == dtype}
            lines.append(f"{name:<14}{dtype:<10}" + "".join(
                f"{cells[n]['GBps']:>9.1f}GB/s {cells[n]['rel_error']:>8.1e}" if n in cells else " " * 22
                for n in LENGTHS))
    (RESULTS / f"reductions-{stamp}.txt").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (ax_speed, ax_error) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name in dict.fromkeys(r["strategy"] for r in TABLE):
        rows = [r for r in TABLE if r["strategy"] == name and r["dtype"] == "float32"]
        ax_speed.plot([r["length"] for r in rows], [r["GBps"] for r in rows], marker="o", label=name)
        ax_error.plot([r["length"] for r in rows], [max(r["rel_error"], 1e-17) for r in rows], marker="o", label=name)
    for ax, label in ((ax_speed, "GB/s of float32 input (2 threads for core_partials/atomic)"),
                      (ax_error, "|sum - fsum| / sum(|x|)")):
        ax.set_xscale("log")
        ax.set_xlabel("elements")
        ax.set_ylabel(label)
    ax_error.set_yscale("log")
    ax_speed.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / f"reductions-{stamp}.png", dpi=110)
