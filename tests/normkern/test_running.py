"""``kernels.running``: the running statistics' update and the inverse standard deviation, bit for bit the
float32 NumPy expressions they replace, on values that round differently in every operation."""

import numpy as np

from normkern.kernels.running import inverse_std, update_running

F32 = np.float32


def _channels(seed, n=257):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * 3).astype(F32), (rng.random(n) * 4 + 1e-3).astype(F32)


def test_update_running_is_numpys_float32_update():
    mean, invstd = _channels(0)
    running_mean, running_var = _channels(1)
    eps, factor, count = F32(1e-5), 0.1, 37
    keep, unbiased = F32(1.0 - factor), F32(factor * count / (count - 1))
    want_mean, want_var = running_mean.copy(), running_var.copy()
    variance = np.reciprocal(invstd * invstd)
    variance -= eps
    want_mean *= keep
    want_mean += mean * F32(factor)
    want_var *= keep
    want_var += variance * unbiased
    update_running(running_mean, running_var, mean, invstd, eps, keep, F32(factor), unbiased)
    assert np.array_equal(running_mean.view(np.int32), want_mean.view(np.int32))
    assert np.array_equal(running_var.view(np.int32), want_var.view(np.int32))


def test_inverse_std_is_numpys_float32_root():
    _, variance = _channels(2)
    variance[:3] = (0.0, 1e-30, 65504.0)
    out = np.empty_like(variance)
    inverse_std(variance, F32(1e-5), out)
    want = F32(1.0) / np.sqrt(variance + F32(1e-5))
    assert np.array_equal(out.view(np.int32), want.view(np.int32))
