"""FastBatchNormBackward speed: normkern (default A2 plan and host plan) against PyTorch, same run.

Targets (2 threads): >= 1.5x ``torch.ops.aten.native_batch_norm_backward`` (training and inference)
at (32,64,56,56), (256,256,14,14) and (8,512,7,7) in fp32, fp16 and bf16 (PyTorch given float32
weight and statistics for the half rows, as it runs them); >= 80% of the same run's STREAM triad on
(64,128,56,56) fp32 under the 3-tensor-pass model (``bytes_moved``).

Two ceilings run in the same rounds: the bare channel walk at (64,128,56,56) fp32 inference
(``walk``), and at (8,512,7,7) a model of the op's two passes with none of the exact order and no
Python layer (``two_passes``): its ``two_passes_vs_torch`` is what a plain kernel of those passes reaches
here, beside which the exact-order rows can be read.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from numba import njit, prange

import normkern
import tiling
from normkern.kernels.dtypes import from_f32, kernel_view, to_f32
from normkern.ops.fast_batch_norm_backward import bytes_moved

from .conftest import record, time_against_triad

SHAPES = [(32, 64, 56, 56), (256, 256, 14, 14), (8, 512, 7, 7), (64, 128, 56, 56)]
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
SOCS = ("Ascend910B2", "host")
#: The shape of the 80% target, whose inference row also times the bare channel walk (``_walk_channels``).
WALK_SHAPE = (64, 128, 56, 56)
#: The rows that also time a model of the op's two passes (``_two_passes``).
TWO_PASS_SHAPE = (8, 512, 7, 7)


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


@njit(parallel=True, cache=True, error_model="numpy")
def _two_passes(dy, x, dx, mean, invstd, weight, grad_weight, grad_bias, threads, training):
    """A model of the op with none of the exact order: thread ``p`` takes the channels of its share of
    axis 1 one after another; a channel's two sums go over its (N, HxW) rows into HxW float32
    accumulators (one vectorizable add a position and row, then one sum of the HxW), then its dx
    (training), or dx is written in the same pass (inference). No UB-sized buffers, no fold, no
    Python layer: what a kernel of the op's passes can do on this machine. Arrays in kernel views."""
    n_rows, channels, hw = dy.shape
    like = dx[0, 0, 0]
    count = np.float32(n_rows * hw)
    for p in prange(threads):
        acc_dy = np.empty(hw, np.float32)
        acc_dyx = np.empty(hw, np.float32)
        for c in range(channels * p // threads, channels * (p + 1) // threads):
            m, r, w = mean[c], invstd[c], weight[c]
            acc_dy[:] = 0.0
            acc_dyx[:] = 0.0
            for n in range(n_rows):
                for i in range(hw):
                    d = to_f32(dy[n, c, i])
                    acc_dy[i] += d
                    acc_dyx[i] += (to_f32(x[n, c, i]) - m) * d
                    if not training:
                        dx[n, c, i] = from_f32(d * (r * w), like)
            s_dy = np.float32(0.0)
            s_dyx = np.float32(0.0)
            for i in range(hw):
                s_dy += acc_dy[i]
                s_dyx += acc_dyx[i]
            grad_bias[c] = s_dy
            grad_weight[c] = s_dyx * r
            if training:
                shift, k = s_dy / count, (s_dyx * r * r) / count
                for n in range(n_rows):
                    for i in range(hw):
                        v = ((to_f32(dy[n, c, i]) - shift) - (to_f32(x[n, c, i]) - m) * k) * (r * w)
                        dx[n, c, i] = from_f32(v, like)


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
    if shape == TWO_PASS_SHAPE:  # the two passes with none of the exact order, same rounds
        views = [kernel_view(a.reshape(shape[0], c, -1)) for a in (dy, x, np.empty_like(out[0]))]
        sums = (np.empty(c, np.float32), np.empty(c, np.float32))
        # the op's own statistics: save_invstd in training, 1/sqrt(running_var + eps) in inference
        invstd = save_invstd if training else (1 / np.sqrt(running_var + np.float32(1e-5))).astype(np.float32)
        runs["two_passes"] = lambda: _two_passes(*views, save_mean, invstd, weight, *sums, stream.threads, training)
        runs["two_passes"]()  # a model that computed something else would bound nothing: check it once
        runs[f"nk_{SOCS[0]}"]()
        got = (views[2].view(x.dtype).astype(np.float64), *sums)
        for a, b in zip(got, (out[0].reshape(views[2].shape).astype(np.float64), out[1], out[2]), strict=True):
            assert np.abs(a - b).max() <= 1e-2 * np.abs(b).max(), "the two-pass model disagrees with the op"
    time_against_triad(benchmark, stream, runs, row, nbytes, [f"nk_{soc}" for soc in SOCS],
                       ceilings=["walk", "two_passes"])
    benchmark.extra_info.update(row)
    record(row)
