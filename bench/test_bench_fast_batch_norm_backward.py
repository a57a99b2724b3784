"""FastBatchNormBackward speed: normkern (default A2 plan and host plan) against PyTorch, same run.

Targets (2 threads): >= 1.5x ``torch.ops.aten.native_batch_norm_backward`` (training and inference)
at (32,64,56,56), (256,256,14,14) and (8,512,7,7) in fp32, fp16 and bf16 (PyTorch given float32
weight and statistics for the half rows, as it runs them); >= 80% of the same run's STREAM triad on
(64,128,56,56) fp32 under the 3-tensor-pass model (``bytes_moved``).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from numba import njit, prange

import normkern
import tiling
from normkern.ops.fast_batch_norm_backward import bytes_moved

from .conftest import record, time_against_triad

SHAPES = [(32, 64, 56, 56), (256, 256, 14, 14), (8, 512, 7, 7), (64, 128, 56, 56)]
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
SOCS = ("Ascend910B2", "host")
#: The shape of the 80% target, whose inference row also times the bare channel walk (``_walk_channels``).
WALK_SHAPE = (64, 128, 56, 56)


@njit(cache=True)
def _triad_row(dy, x, dx):
    for i in range(dx.shape[0]):
        dx[i] = dy[i] + np.float32(3.0) * x[i]


@njit(parallel=True, cache=True)
def _walk_channels(dy, x, dx, threads):
    """The walk of a channel-major inference kernel over (N, C, HxW) float32 arrays, without its
    arithmetic: thread ``p`` takes the channels of its share of axis 1 one after another and writes
    each channel's dx rows from its dy and x rows (a row of HxW at a stride of C*HxW) as a triad.
    Its triad fraction is what such a kernel can hope for. (A training walk, which reads each channel
    first and then again, modelled the kernel badly: it ran at half the kernel's speed.)"""
    channels = dy.shape[1]
    for p in prange(threads):
        for c in range(channels * p // threads, channels * (p + 1) // threads):
            for n in range(dy.shape[0]):
                _triad_row(dy[n, c], x[n, c], dx[n, c])


def _torch_peer(dy, x, params, training):
    try:
        import torch
    except ImportError:
        return None

    def tt(a):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if a.dtype == ml_dtypes.bfloat16 else \
            torch.from_numpy(a)

    args = (tt(dy), tt(x), *map(torch.from_numpy, params))
    return lambda: torch.ops.aten.native_batch_norm_backward(*args, training, 1e-5, [True, True, True])


@pytest.mark.parametrize("training", [True, False], ids=["train", "infer"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fast_batch_norm_backward(benchmark, environment, stream, shape, dtype, training):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) + 3).astype(DTYPES[dtype])
    dy = rng.standard_normal(shape).astype(DTYPES[dtype])
    c = shape[1]
    weight, save_mean = rng.uniform(0.5, 2, c).astype(np.float32), np.full(c, 3, np.float32)
    save_invstd, running_var = np.ones(c, np.float32), np.ones(c, np.float32)
    params = (weight, save_mean, running_var, save_mean, save_invstd)
    out = (np.empty(shape, x.dtype), np.empty(c, np.float32), np.empty(c, np.float32))
    nbytes = bytes_moved(shape, dtype)
    row = {"op": "fast_batch_norm_backward", "shape": "x".join(map(str, shape)), "dtype": dtype,
           "mode": "train" if training else "infer"}
    runs = {}
    for soc in SOCS:
        row[f"plan_{soc}"] = str(tiling.plan_fast_batch_norm_backward(shape, dtype, soc, training=training,
                                                                       weight_dtype="float32"))
        runs[f"nk_{soc}"] = lambda soc=soc: normkern.fast_batch_norm_backward(dy, x, *params, training, 1e-5,
                                                                              soc=soc, out=out)
    peer = _torch_peer(dy, x, params, training)
    if peer is not None:
        runs["torch"] = peer
    if shape == WALK_SHAPE and dtype == "float32" and not training:  # the walk alone, same rounds
        views = [a.reshape(shape[0], c, -1) for a in (dy, x, out[0])]
        runs["walk"] = lambda: _walk_channels(*views, stream.threads)
    time_against_triad(benchmark, stream, runs, row, nbytes, [f"nk_{soc}" for soc in SOCS], ceilings=["walk"])
    benchmark.extra_info.update(row)
    record(row)
