"""GroupNormBackward speed: normkern (default A2 plan, host plan, atomic) against PyTorch, same run.

Targets (2 threads): >= 1.5x ``torch.ops.aten.native_group_norm_backward`` at (8,256,56,56) G=32,
(32,64,28,28) G=8 and (4,512,96,96) G=32 in fp32 and bf16, >= 3x in fp16; the deterministic
``cann`` strategy within 1.1x of the ``atomic`` one.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import normkern
import tiling
from normkern.ops.group_norm_backward import bytes_moved

from .conftest import record, time_against_triad

CASES = [((8, 256, 56, 56), 32), ((32, 64, 28, 28), 8), ((4, 512, 96, 96), 32)]
DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def _tt(torch, a):
    return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if a.dtype == ml_dtypes.bfloat16 else \
        torch.from_numpy(a)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape, group", CASES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple)
                         else f"G{v}")
def test_group_norm_backward(benchmark, environment, stream, shape, group, dtype):
    rng = np.random.default_rng(0)
    n, c = shape[:2]
    hxw = int(np.prod(shape[2:]))
    x = (rng.standard_normal(shape) + 1).astype(DTYPES[dtype])
    dy = rng.standard_normal(shape).astype(DTYPES[dtype])
    grouped = x.astype(np.float32).reshape(n, group, -1)
    mean = grouped.mean(axis=-1).astype(x.dtype)
    rstd = (1 / np.sqrt(grouped.var(axis=-1) + 1e-5)).astype(x.dtype)
    gamma = rng.uniform(0.5, 1.5, c).astype(x.dtype)
    out = (np.empty(shape, x.dtype), np.empty(c, x.dtype), np.empty(c, x.dtype))
    args = (dy, x, mean, rstd, gamma, n, c, hxw, group)
    nbytes = bytes_moved(n, c, hxw, dtype)
    row = {"op": "group_norm_backward", "shape": "x".join(map(str, shape)), "G": group, "dtype": dtype}
    runs = {}
    for soc in ("Ascend910B2", "host"):
        row[f"plan_{soc}"] = str(tiling.plan_group_norm_backward(n, c, hxw, group, dtype, soc))
        runs[f"nk_{soc}"] = lambda soc=soc: normkern.group_norm_backward(*args, soc=soc, out=out)
    runs["nk_atomic"] = lambda: normkern.group_norm_backward(*args, strategy="atomic", arrival_seed=0, out=out)
    try:
        import torch

        targs = [_tt(torch, a) for a in (dy, x, mean.reshape(n, group), rstd.reshape(n, group), gamma)]
        runs["torch"] = lambda: torch.ops.aten.native_group_norm_backward(*targs, n, c, hxw, group, [True] * 3)
    except ImportError:
        pass
    times = time_against_triad(benchmark, stream, runs, row, nbytes, ["nk_Ascend910B2", "nk_host"])
    row["cann_over_atomic"] = round(times["nk_Ascend910B2"][0] / times["nk_atomic"][0], 2)
    benchmark.extra_info.update(row)
    record(row)


#: Issue 49's op table: the layer table's shapes (G = 32) and the ResNet one (G = 8), float32.
HOST_CASES = [((8, 1024, 14, 14), 32), ((8, 2048, 7, 7), 32), ((32, 256, 14, 14), 32), ((2, 64, 56, 56), 32),
              ((32, 64, 28, 28), 8), ((8, 256, 56, 56), 32), ((4, 512, 96, 96), 32)]


@pytest.mark.parametrize("shape, group", HOST_CASES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple)
                         else f"G{v}")
def test_host_plan_against_pytorch(benchmark, environment, stream, shape, group):
    """The host's own plan (``groups``) and the A2 code's host model (``cann`` on the host) against
    ``native_group_norm_backward``, with the row's triad (bytes: dy and x read, dx written)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    n, c = shape[:2]
    hxw = int(np.prod(shape[2:]))
    x = (rng.standard_normal(shape) + 1).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    grouped = x.reshape(n, group, -1)
    mean = grouped.mean(axis=-1).astype(np.float32)
    rstd = (1 / np.sqrt(grouped.var(axis=-1) + 1e-5)).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, c).astype(np.float32)
    out = (np.empty(shape, np.float32), np.empty(c, np.float32), np.empty(c, np.float32))
    args = (dy, x, mean, rstd, gamma, n, c, hxw, group)
    targs = [torch.from_numpy(a) for a in (dy, x, mean.reshape(n, group), rstd.reshape(n, group), gamma)]
    row = {"op": "group_norm_backward_host", "shape": "x".join(map(str, shape)), "G": group, "dtype": "float32"}
    runs = {"groups": lambda: normkern.group_norm_backward(*args, soc="host", out=out),
            "cann_host": lambda: normkern.group_norm_backward(*args, soc="host", strategy="cann", out=out),
            "torch": lambda: torch.ops.aten.native_group_norm_backward(*targs, n, c, hxw, group, [True] * 3)}
    time_against_triad(benchmark, stream, runs, row, bytes_moved(n, c, hxw, "float32"), ["groups", "cann_host"])
    benchmark.extra_info.update(row)
    record(row)
