"""The SyncBatchNorm family's speed: normkern (A2 and host plans) against the fastest CPU equivalent PyTorch has.

- batch_norm_elemt against ``F.batch_norm`` in eval mode with the same statistics (running_var =
  1/invstd^2 - eps). Target: >= 80% of the same run's triad bandwidth on tensors larger than L3.
- batch_norm_backward_reduce and batch_norm_backward_elemt, each alone with its own bytes model, and
  the pair on one device (reduce, then elemt with the local sums) against
  ``torch.ops.aten.native_batch_norm_backward`` (the fused local backward; PyTorch's own pair is
  CUDA only).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import normkern
import tiling
from normkern.ops.batch_norm_backward_elemt import bytes_moved as elemt_backward_bytes
from normkern.ops.batch_norm_backward_reduce import bytes_moved as reduce_bytes
from normkern.ops.batch_norm_elemt import bytes_moved as elemt_bytes

from .conftest import record, time_against_triad

SHAPES = [(32, 64, 56, 56), (256, 256, 14, 14), (8, 512, 7, 7)]
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
EPS = 1e-5
SOCS = ("Ascend910B2", "host")


def _tt(torch, a):
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if a.dtype == ml_dtypes.bfloat16 else \
        torch.from_numpy(a)


def _problem(shape, dtype):
    rng = np.random.default_rng(0)
    c = shape[1]
    x = (rng.standard_normal(shape) * 2 + 1).astype(DTYPES[dtype])
    dy = rng.standard_normal(shape).astype(DTYPES[dtype])
    axes = (0, *range(2, len(shape)))
    x32 = x.astype(np.float32)
    mean = x32.mean(axis=axes)
    invstd = (1 / np.sqrt(x32.var(axis=axes) + EPS)).astype(np.float32)
    weight = rng.uniform(0.5, 2, c).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    return x, dy, mean, invstd, weight, bias


def _stats_for(soc, dtype, *stats):
    """aclnnBatchNormElemt takes statistics of the data's dtype only; host (as PyTorch) float32 beside any."""
    if tiling.support("batch_norm_elemt", tiling.get_soc(soc)).mixed:
        return stats
    return tuple(s.astype(DTYPES[dtype]) for s in stats)


def _row(op, shape, dtype):
    return {"op": op, "shape": "x".join(map(str, shape)), "dtype": dtype}


def _measure(benchmark, stream, runs, row, nbytes, names=("nk_Ascend910B2", "nk_host")):
    time_against_triad(benchmark, stream, runs, row, nbytes, list(names))
    benchmark.extra_info.update(row)
    record(row)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_batch_norm_elemt(benchmark, environment, stream, shape, dtype):
    x, _, mean, invstd, weight, bias = _problem(shape, dtype)
    out = np.empty_like(x)
    row = _row("batch_norm_elemt", shape, dtype)
    runs = {}
    for soc in SOCS:
        w, b, m, s = _stats_for(soc, dtype, weight, bias, mean, invstd)
        row[f"plan_{soc}"] = str(tiling.plan_batch_norm_elemt(shape, dtype, soc, stats_dtype=m.dtype))
        runs[f"nk_{soc}"] = lambda soc=soc, w=w, b=b, m=m, s=s: normkern.batch_norm_elemt(
            x, w, b, m, s, EPS, soc=soc, out=out)
    try:
        import torch
        import torch.nn.functional as F

        var = torch.from_numpy(1 / (invstd * invstd) - np.float32(EPS))
        tx = _tt(torch, x)
        targs = (torch.from_numpy(mean), var, torch.from_numpy(weight), torch.from_numpy(bias))
        runs["torch"] = lambda: F.batch_norm(tx, *targs, training=False, eps=EPS)
    except ImportError:
        pass
    _measure(benchmark, stream, runs, row, elemt_bytes(shape, x.dtype))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_batch_norm_backward_reduce(benchmark, environment, stream, shape, dtype):
    x, dy, mean, invstd, weight, _ = _problem(shape, dtype)
    c = shape[1]
    outs = tuple(np.empty(c, np.float32) for _ in range(4))
    row = _row("batch_norm_backward_reduce", shape, dtype)
    runs = {}
    for soc in SOCS:
        row[f"plan_{soc}"] = str(tiling.plan_batch_norm_backward_reduce(shape, dtype, soc))
        runs[f"nk_{soc}"] = lambda soc=soc: normkern.batch_norm_backward_reduce(
            dy, x, mean, invstd, weight, True, True, True, soc=soc, out=outs)
    _measure(benchmark, stream, runs, row, reduce_bytes(shape, x.dtype))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_batch_norm_backward_elemt(benchmark, environment, stream, shape, dtype):
    x, dy, mean, invstd, weight, _ = _problem(shape, dtype)
    sum_dy, sum_dy_xmu, _, _ = normkern.batch_norm_backward_reduce(dy, x, mean, invstd, weight, True, False, False,
                                                                   soc="host")
    count = np.array([x.size // shape[1]], np.int32)
    out = np.empty_like(x)
    row = _row("batch_norm_backward_elemt", shape, dtype)
    runs = {}
    for soc in SOCS:
        row[f"plan_{soc}"] = str(tiling.plan_batch_norm_backward_elemt(shape, dtype, soc, stats_dtype="float32"))
        runs[f"nk_{soc}"] = lambda soc=soc: normkern.batch_norm_backward_elemt(
            dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count, soc=soc, out=out)
    _measure(benchmark, stream, runs, row, elemt_backward_bytes(shape, x.dtype))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_backward_pair_against_native_batch_norm_backward(benchmark, environment, stream, shape, dtype):
    """One device: reduce, then elemt with the local sums, against PyTorch's fused local backward."""
    x, dy, mean, invstd, weight, _ = _problem(shape, dtype)
    c = shape[1]
    sums = tuple(np.empty(c, np.float32) for _ in range(4))
    out = np.empty_like(x)
    count = np.array([x.size // c], np.int32)
    row = _row("sync_backward_pair", shape, dtype)
    runs = {}
    for soc in SOCS:
        def pair(soc=soc):
            normkern.batch_norm_backward_reduce(dy, x, mean, invstd, weight, True, True, True, soc=soc, out=sums)
            normkern.batch_norm_backward_elemt(dy, x, mean, invstd, weight, sums[0], sums[1], count, soc=soc, out=out)
        runs[f"nk_{soc}"] = pair
    runs["nk_fast_host"] = lambda: normkern.fast_batch_norm_backward(dy, x, weight, None, None, mean, invstd, True,
                                                                     EPS, soc="host")
    try:
        import torch

        targs = [_tt(torch, dy), _tt(torch, x), torch.from_numpy(weight), None, None, torch.from_numpy(mean),
                 torch.from_numpy(invstd)]
        runs["torch"] = lambda: torch.ops.aten.native_batch_norm_backward(*targs, True, EPS, [True] * 3)
    except ImportError:
        pass
    nbytes = reduce_bytes(shape, x.dtype) + elemt_backward_bytes(shape, x.dtype)
    _measure(benchmark, stream, runs, row, nbytes, ("nk_Ascend910B2", "nk_host", "nk_fast_host"))
