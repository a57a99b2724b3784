"""BatchNormStats speed: normkern (default A2 plan and host plan) against PyTorch and NumPy.

Targets (2 threads, fp32): >= 3x ``torch.batch_norm_update_stats`` on (32,64,56,56) and
(256,256,14,14); >= 80% of the same run's read bandwidth on a tensor larger than L3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
import pytest
from numba import njit, prange

import normkern
import tiling
from normkern.kernels.lanes import LANES, accumulate, fold
from normkern.ops.batch_norm_stats import bytes_moved

from .conftest import STREAM_BYTES, interleaved_medians, record, timing_columns

SHAPES = [(32, 64, 56, 56), (256, 256, 14, 14), (64, 128, 56, 56)]
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
#: The default A2 plan; A2 has no bf16 BatchNormStats, so bf16 uses the Ascend950 plan.
ASCEND = {"float32": "Ascend910B2", "float16": "Ascend910B2", "bfloat16": "Ascend950"}
#: The shape of the 80% target, whose row also times the bare channel walk (``_read_channels``).
WALK_SHAPE = (64, 128, 56, 56)


def _peers(x):
    peers = {}
    axes = (0, *range(2, x.ndim))

    def numpy_stats():
        x32 = x.astype(np.float32, copy=False)
        mean = x32.mean(axis=axes)
        var = ((x32 - mean.reshape(1, -1, *([1] * (x.ndim - 2)))) ** 2).mean(axis=axes)
        return mean, 1 / np.sqrt(var + 1e-5)

    peers["numpy"] = numpy_stats
    try:
        import torch
    except ImportError:
        return peers
    xt = torch.from_numpy(x) if x.dtype != ml_dtypes.bfloat16 else \
        torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    peers["torch"] = lambda: torch.batch_norm_update_stats(xt, None, None, 0.1)
    return peers


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_batch_norm_stats(benchmark, environment, stream, shape, dtype):
    x = (np.random.default_rng(0).standard_normal(shape) + 3).astype(DTYPES[dtype])
    out = (np.empty(shape[1], np.float32), np.empty(shape[1], np.float32))
    nbytes = bytes_moved(shape, dtype)
    row = {"op": "batch_norm_stats", "shape": "x".join(map(str, shape)), "dtype": dtype}
    runs = {}
    for soc in (ASCEND[dtype], "host"):
        plan = tiling.plan_batch_norm_stats(shape, dtype, soc)
        runs[f"nk_{soc}"] = lambda soc=soc: normkern.batch_norm_stats(x, 1e-5, soc=soc, out=out)
        row[f"plan_{soc}"] = str(plan)
    runs.update(_peers(x))
    if shape == WALK_SHAPE and dtype == "float32":  # the walk alone, in the same rounds as the kernels
        for passes in (1, 2):
            runs[f"walk_{passes}x"] = lambda passes=passes: _read_channels(x, passes, stream.out)
    runs["stream_read"] = stream.read  # same rounds as the kernels: the machine's bandwidth drifts
    times = interleaved_medians(runs)
    benchmark.pedantic(runs[f"nk_{ASCEND[dtype]}"], rounds=10, warmup_rounds=1)
    read_GBps = STREAM_BYTES / times.pop("stream_read")[0] / 1e9
    row["stream_read_GBps"] = round(read_GBps, 1)
    timing_columns(row, times, nbytes)
    for soc in (ASCEND[dtype], "host"):
        nk = times[f"nk_{soc}"][0]
        row[f"nk_{soc}_read_fraction"] = round(nbytes / nk / 1e9 / read_GBps, 2)
        if "torch" in times:
            row[f"nk_{soc}_vs_torch"] = round(times["torch"][0] / nk, 2)
        row[f"nk_{soc}_vs_numpy"] = round(times["numpy"][0] / nk, 2)
    for passes in (1, 2):
        if f"walk_{passes}x" in times:
            row[f"walk_{passes}x_read_fraction"] = round(nbytes / times[f"walk_{passes}x"][0] / 1e9 / read_GBps, 2)
    benchmark.extra_info.update(row)
    record(row)


@njit(parallel=True, cache=True)
def _read_twice(x, block, out):
    """Every thread reads its contiguous share block by block, each block twice in a row: the
    access pattern of an exact two-pass over blocks of ``block`` elements, without the arithmetic."""
    parts = out.shape[0]
    share = x.shape[0] // parts
    for p in prange(parts):
        lanes = np.zeros(LANES, np.float32)
        for start in range(p * share, (p + 1) * share, block):
            stop = min(start + block, (p + 1) * share)
            accumulate(lanes, x[start:stop])
            accumulate(lanes, x[start:stop])
        out[p] = fold(lanes)


def test_two_pass_ceiling(environment, stream):
    """How close to one read an exact two-pass can come on this machine, by the bytes between the
    passes: a channel that stays in L2 is re-read almost free, one that spills to L3 is not.

    The fraction is (bytes / time) / read bandwidth with the bytes counted once, the figure the
    80% target uses. A BatchNormStats channel of N*HxW*4 bytes sits in the matching column.
    """
    sizes_kib = (128, 256, 512, 1024, 2048, 8192)
    runs = {f"twice_{kib}KiB": (lambda kib=kib: _read_twice(stream.x, kib * 256, stream.out)) for kib in sizes_kib}
    runs["stream_read"] = stream.read
    times = interleaved_medians(runs, rounds=9)
    read = times.pop("stream_read")[0]
    row = {"op": "two_pass_ceiling", "stream_read_GBps": round(STREAM_BYTES / read / 1e9, 1)}
    for name, (med, _) in times.items():
        row[f"{name}_read_fraction"] = round(read / med, 2)
    record(row)


@njit(parallel=True, cache=True)
def _read_channels(x, passes, out):
    """Thread ``p`` reads the channels of its share of axis 1 one after another, each channel's N plane
    rows ``passes`` times in a row: the walk of a channel-major two-pass over an (N, C, *spatial)
    tensor (a row of HxW elements at a stride of C*HxW) without the arithmetic. At 64x128x56x56 a
    channel is 64 rows of 12.5 KiB, 1.6 MiB apart, and each row starts a fresh hardware stream. Its
    read fraction, with no arithmetic at all, is what a channel-major two-pass kernel can hope for
    (``passes=1``: what any channel-major walk can)."""
    parts = out.shape[0]
    rows = x.reshape(x.shape[0], x.shape[1], -1)
    channels = rows.shape[1]
    for p in prange(parts):
        lanes = np.zeros(LANES, np.float32)
        for c in range(channels * p // parts, channels * (p + 1) // parts):
            for _ in range(passes):
                for n in range(rows.shape[0]):
                    accumulate(lanes, rows[n, c])
        out[p] = fold(lanes)


_STARTUP = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np, ml_dtypes, normkern
t1 = time.perf_counter()
x = (np.random.default_rng(0).standard_normal((8, 16, 32, 32)) + 3).astype({dtype})
normkern.batch_norm_stats(x, 1e-5, soc="{soc}")
t2 = time.perf_counter()
print(json.dumps({{"import_s": t1 - t0, "first_call_s": t2 - t1}}))
"""


@pytest.mark.parametrize("dtype, soc", [("np.float32", "Ascend910B2"), ("np.float32", "host"),
                                        ("np.float16", "Ascend910B2"), ("ml_dtypes.bfloat16", "Ascend950")])
def test_first_call_compile_and_warm_start(environment, dtype, soc):
    """First call in a fresh process with an empty Numba cache (cold), then again with it filled (warm)."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        code = _STARTUP.format(dtype=dtype, soc=soc)
        cold, warm = (json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                                text=True, check=True).stdout) for _ in range(2))
    record({"op": "startup", "dtype": dtype.split(".")[-1], "soc": soc,
            "cold_first_call_s": round(cold["first_call_s"], 2), "warm_first_call_s": round(warm["first_call_s"], 3),
            "import_s": round(warm["import_s"], 3)})
