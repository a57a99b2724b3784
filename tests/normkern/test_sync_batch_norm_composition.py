"""A synchronized batch norm over simulated devices, composed of the five ops as PyTorch's SyncBatchNorm composes
them, against a float64 batch norm of the concatenated batch.

Forward: batch_norm_stats per device -> batch_norm_gather_stats_with_counts -> batch_norm_elemt per device.
Backward: batch_norm_backward_reduce per device -> sum_dy and sum_dy_xmu summed over devices (the all-reduce,
in device order) -> batch_norm_backward_elemt per device with the per-device counts.

On one device the composition computes what FastBatchNormBackward computes, but not in the same order:
FastBatchNormBackward (BatchNormGradV3) adds a channel's planes elementwise into a UB buffer at a 32-byte
pitch and folds it by halves, and forms dx from x_hat; BatchNormReduceBackward walks ReduceSum's rows into
64 interleaved lanes, and BatchNormElemtBackward forms dx from (x - mean) * invstd^2. So the two agree to
float32 rounding, not bit for bit.
"""

import numpy as np
import pytest

import normkern
import tiling
from tests.tolerances import TOLERANCE, assert_close

from .conftest import DTYPES

F32 = np.float32
EPS = 1e-5
MOMENTUM = 0.1


def _reference(xs, dys, weight, bias, running_mean, running_var):
    """Float64 batch norm (training) of the concatenated batch: output, running stats, gradients."""
    x = np.concatenate([a.astype(np.float64) for a in xs])
    dy = np.concatenate([a.astype(np.float64) for a in dys])
    c = x.shape[1]
    axes = (0, *range(2, x.ndim))
    shape = (1, c) + (1,) * (x.ndim - 2)
    n = x.size // c
    mean = x.mean(axis=axes)
    var = x.var(axis=axes)
    invstd = 1 / np.sqrt(var + EPS)
    x_hat = (x - mean.reshape(shape)) * invstd.reshape(shape)
    w = weight.astype(np.float64).reshape(shape)
    out = x_hat * w + bias.astype(np.float64).reshape(shape)
    rm = (1 - MOMENTUM) * running_mean + MOMENTUM * mean
    rv = (1 - MOMENTUM) * running_var + MOMENTUM * var * n / (n - 1)
    grad_bias = dy.sum(axis=axes)
    grad_weight = (dy * x_hat).sum(axis=axes)
    grad_input = (w * invstd.reshape(shape) / n) * (n * dy - grad_bias.reshape(shape)
                                                     - x_hat * grad_weight.reshape(shape))
    return out, rm, rv, grad_input, grad_weight, grad_bias


def _synchronized(xs, dys, weight, bias, running_mean, running_var, soc):
    """The five ops over the devices; running stats updated in place."""
    c = xs[0].shape[1]
    stats = [normkern.batch_norm_stats(x, EPS, soc=soc) for x in xs]
    mean = np.stack([m for m, _ in stats])
    invstd = np.stack([s for _, s in stats])
    counts = np.array([x.size // c for x in xs], F32)
    mean_all, invstd_all = normkern.batch_norm_gather_stats_with_counts(
        xs[0], mean, invstd, running_mean, running_var, MOMENTUM, EPS, counts, soc=soc)
    # aclnnBatchNormElemt takes statistics of the data's dtype only (the host, like PyTorch, any float)
    mixed = tiling.support("batch_norm_elemt", tiling.get_soc(soc)).mixed
    as_data = (lambda a: a) if mixed else (lambda a: a.astype(xs[0].dtype))
    outs = [normkern.batch_norm_elemt(x, as_data(weight), as_data(bias), as_data(mean_all), as_data(invstd_all),
                                      EPS, soc=soc) for x in xs]
    reduced = [normkern.batch_norm_backward_reduce(dy, x, mean_all, invstd_all, weight, True, True, True, soc=soc)
               for dy, x in zip(dys, xs, strict=True)]
    sum_dy = np.zeros(c, F32)
    sum_dy_xmu = np.zeros(c, F32)
    grad_weight = np.zeros(c, F32)
    grad_bias = np.zeros(c, F32)
    for s, sx, gw, gb in reduced:  # the all-reduce, in device order
        sum_dy += s
        sum_dy_xmu += sx
        grad_weight += gw
        grad_bias += gb
    count = counts.astype(np.int32)
    grads = [normkern.batch_norm_backward_elemt(dy, x, mean_all, invstd_all, weight, sum_dy, sum_dy_xmu, count,
                                                soc=soc) for dy, x in zip(dys, xs, strict=True)]
    return outs, grads, grad_weight, grad_bias


def _data(batches, c, spatial, dtype, seed):
    rng = np.random.default_rng(seed)
    xs = [(rng.standard_normal((b, c, *spatial)) * 2 + 1).astype(DTYPES[dtype]) for b in batches]
    dys = [rng.standard_normal((b, c, *spatial)).astype(DTYPES[dtype]) for b in batches]
    return xs, dys, rng.uniform(0.5, 2, c).astype(F32), rng.standard_normal(c).astype(F32)


@pytest.mark.parametrize("soc, dtype", [("host", "float32"), ("host", "bfloat16"), ("Ascend910B2", "float32"),
                                        ("Ascend910B2", "float16")])
@pytest.mark.parametrize("batches, spatial", [((3, 5), (7, 7)), ((1, 4, 2), (6,)), ((2, 1, 7, 3), (5, 4)),
                                              ((1, 1, 1, 1), (3, 2)), ((6, 1, 9), (2, 3, 2))])
def test_synchronized_batch_norm_matches_float64_over_the_concatenated_batch(batches, spatial, dtype, soc):
    c = 5
    xs, dys, weight, bias = _data(batches, c, spatial, dtype, seed=len(batches) + len(spatial))
    running_mean = np.linspace(-1, 1, c).astype(F32)
    running_var = np.linspace(0.5, 2, c).astype(F32)
    want = _reference(xs, dys, weight, bias, running_mean.astype(np.float64), running_var.astype(np.float64))
    outs, grads, grad_weight, grad_bias = _synchronized(xs, dys, weight, bias, running_mean, running_var, soc)
    out_want, rm_want, rv_want, gi_want, gw_want, gb_want = want
    # Outputs in the data's dtype: their final rounding dominates. The statistics and the sums are float32;
    # a sum's scale is the sum of its terms' magnitudes.
    assert_close(np.concatenate(outs), out_want, name="output")
    assert_close(np.concatenate(grads), gi_want, scale=2 * np.abs(gi_want).max(), name="grad_input")
    assert_close(running_mean, rm_want, scale=np.abs(rm_want).max(), name="running_mean")
    assert_close(running_var, rv_want, scale=np.abs(rv_want).max(), name="running_var")
    axes = (0, *range(2, xs[0].ndim))
    dy_sum = sum(np.abs(d.astype(np.float64)).sum(axis=axes) for d in dys).max()
    assert_close(grad_bias, gb_want, scale=dy_sum, name="grad_bias")
    assert_close(grad_weight, gw_want, scale=4 * dy_sum, name="grad_weight")


@pytest.mark.parametrize("soc", ["host", "Ascend910B2"])
def test_one_device_agrees_with_fast_batch_norm_backward_to_float32_rounding(soc):
    xs, dys, weight, bias = _data((8,), 16, (7, 7), "float32", seed=3)
    x, dy = xs[0], dys[0]
    mean, invstd = normkern.batch_norm_stats(x, EPS, soc=soc)
    fast = normkern.fast_batch_norm_backward(dy, x, weight, None, None, mean, invstd, True, EPS, soc=soc)
    _, sum_dy_xmu, grad_weight, grad_bias = normkern.batch_norm_backward_reduce(dy, x, mean, invstd, weight, True,
                                                                                True, True, soc=soc)
    grad_input = normkern.batch_norm_backward_elemt(dy, x, mean, invstd, weight, grad_bias, sum_dy_xmu,
                                                    np.array([x.size // 16], np.int32), soc=soc)
    scale = float(np.abs(dy).sum(axis=(0, 2, 3)).max()) * 4
    assert np.abs(grad_bias - fast[2]).max() <= TOLERANCE["float32"] * scale
    assert np.abs(grad_weight - fast[1]).max() <= TOLERANCE["float32"] * scale * 2
    assert np.abs(grad_input - fast[0]).max() <= TOLERANCE["float32"] * np.abs(fast[0]).max() * 4
