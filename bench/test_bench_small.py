"""Small late-layer problems: FastBatchNormBackward, GroupNormBackward and BatchNormStats at 7x7, 14x14 and
28x28 planes, prepared (``normkern.prepare``) and plain, against PyTorch in the same rounds.

Target (2 threads, float32, host plans): prepared calls at least as fast as PyTorch (``nk_prepared_vs_torch``
>= 1.0). FastBatchNormBackward float32 rows also time ``model``: the bench's plain two-pass kernel with none
of the exact order (``test_bench_fast_batch_norm_backward._two_passes``), what such a kernel can do here.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import normkern
from normkern.kernels.dtypes import kernel_view
from normkern.ops.batch_norm_stats import bytes_moved as stats_bytes
from normkern.ops.fast_batch_norm_backward import bytes_moved as fast_bytes
from normkern.ops.group_norm_backward import bytes_moved as group_bytes

from .conftest import interleaved_medians, record, timing_columns
from .test_bench_fast_batch_norm_backward import _two_passes

torch = pytest.importorskip("torch")

SHAPES = [(8, 512, 7, 7), (16, 1024, 7, 7), (32, 64, 28, 28), (32, 256, 14, 14)]
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
#: GroupNorm's groups at each shape (ResNet-style: 32, fewer where C is small).
GROUPS = {(8, 512, 7, 7): 32, (16, 1024, 7, 7): 32, (32, 64, 28, 28): 8, (32, 256, 14, 14): 32}


def _tensor(a):
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _data(shape, dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) + 3).astype(DTYPES[dtype])
    dy = rng.standard_normal(shape).astype(DTYPES[dtype])
    return x, dy


def _row(op, shape, dtype, times, nbytes, **extra) -> dict:
    row = {"op": op, "shape": "x".join(map(str, shape)), "dtype": dtype, **extra}
    timing_columns(row, times, nbytes)
    for name in ("nk_prepared", "nk_plain", "model"):
        if name in times:
            row[f"{name}_vs_torch"] = round(times["torch"][0] / times[name][0], 2)
    return row


@pytest.mark.parametrize("training", [True, False], ids=["train", "infer"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_small_fast_batch_norm_backward(benchmark, environment, shape, dtype, training):
    x, dy = _data(shape, dtype)
    c = shape[1]
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=(0, 2, 3)).astype(np.float32)
    invstd = (1 / np.sqrt(x64.var(axis=(0, 2, 3)) + 1e-5)).astype(np.float32)
    var = (1 / invstd.astype(np.float64) ** 2).astype(np.float32)
    weight = np.random.default_rng(1).uniform(0.5, 1.5, c).astype(np.float32)
    args = (dy, x, weight, mean, var, mean, invstd, training, 1e-5)
    prepared = normkern.prepare("fast_batch_norm_backward", *args, soc="host")
    targs = [_tensor(a) for a in (dy, x, weight, mean, var, mean, invstd)]
    runs = {"nk_prepared": lambda: prepared(*args),
            "nk_plain": lambda: normkern.fast_batch_norm_backward(*args, soc="host"),
            "torch": lambda: torch.ops.aten.native_batch_norm_backward(*targs, training, 1e-5, [True] * 3)}
    if dtype == "float32":
        views = [kernel_view(a.reshape(shape[0], c, -1)) for a in (dy, x, np.empty_like(x))]
        gw, gb = np.empty(c, np.float32), np.empty(c, np.float32)
        runs["model"] = lambda: _two_passes(*views, mean, invstd, weight, gw, gb, environment["threads"], training)
    times = interleaved_medians(runs)
    benchmark.pedantic(runs["nk_prepared"], rounds=5, warmup_rounds=1)
    record(_row("fast_batch_norm_backward", shape, dtype, times, fast_bytes(shape, dtype),
                mode="training" if training else "inference", plan_host=str(prepared.plan)))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_small_group_norm_backward(benchmark, environment, shape, dtype):
    x, dy = _data(shape, dtype)
    n, c, hxw, group = shape[0], shape[1], shape[2] * shape[3], GROUPS[shape]
    grouped = x.astype(np.float64).reshape(n, group, -1)
    mean = grouped.mean(-1).astype(DTYPES[dtype])
    rstd = (1 / np.sqrt(grouped.var(-1) + 1e-5)).astype(DTYPES[dtype])
    gamma = np.random.default_rng(1).uniform(0.5, 1.5, c).astype(DTYPES[dtype])
    args = (dy, x, mean, rstd, gamma, n, c, hxw, group)
    prepared = normkern.prepare("group_norm_backward", *args, soc="host")
    targs = [_tensor(a) for a in (dy, x, mean, rstd, gamma)]
    runs = {"nk_prepared": lambda: prepared(*args),
            "nk_plain": lambda: normkern.group_norm_backward(*args, soc="host"),
            "torch": lambda: torch.ops.aten.native_group_norm_backward(*targs, n, c, hxw, group, [True] * 3)}
    times = interleaved_medians(runs)
    benchmark.pedantic(runs["nk_prepared"], rounds=5, warmup_rounds=1)
    record(_row("group_norm_backward", shape, dtype, times, group_bytes(n, c, hxw, dtype), group=group,
                plan_host=str(prepared.plan)))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_small_batch_norm_stats(benchmark, environment, shape, dtype):
    x, _ = _data(shape, dtype)
    prepared = normkern.prepare("batch_norm_stats", x, 1e-5, soc="host")
    xt = _tensor(x)
    runs = {"nk_prepared": lambda: prepared(x, 1e-5),
            "nk_plain": lambda: normkern.batch_norm_stats(x, 1e-5, soc="host"),
            "torch": lambda: torch.batch_norm_update_stats(xt, None, None, 0.1)}
    times = interleaved_medians(runs)
    benchmark.pedantic(runs["nk_prepared"], rounds=5, warmup_rounds=1)
    record(_row("batch_norm_stats", shape, dtype, times, stats_bytes(shape, dtype), plan_host=str(prepared.plan)))
