"""BatchNormGatherStatsWithCounts: kernel == simulator, float64 reference, SyncBatchNorm compositions."""

import ml_dtypes
import numpy as np
import pytest

import normkern
import tiling
from normkern import aclnn
from normkern.ops.batch_norm_gather_stats import batch_norm_gather_stats_reference, simulate
from tests.tolerances import assert_close

from .conftest import DTYPES, bits

STRATEGIES = [None, "common", "workspace", "first_axis_common", "first_axis_workspace"]


def _stats(d, c, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    mean = (rng.standard_normal((d, c)) + 2).astype(DTYPES[dtype])
    invstd = rng.uniform(0.5, 2.0, (d, c)).astype(DTYPES[dtype])
    counts = rng.integers(1, 500, d).astype(DTYPES[dtype])
    return mean, invstd, counts


def _run(mean, invstd, counts, running=True, running_dtype=None, **kw):
    c = mean.shape[1]
    rdt = running_dtype or mean.dtype
    rm = np.linspace(-1, 1, c).astype(rdt) if running else None
    rv = np.linspace(0.5, 2, c).astype(rdt) if running else None
    before = (None if rm is None else rm.copy(), None if rv is None else rv.copy())
    out = normkern.batch_norm_gather_stats_with_counts(np.empty((2, c), np.float32), mean, invstd, rm, rv,
                                                       0.1, 1e-5, counts, **kw)
    return out, (rm, rv), before


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("soc", ["Ascend950", "Ascend910B2", "host"])
@pytest.mark.parametrize("d, c", [(8, 2048), (3, 5), (300, 64), (65, 7), (40, 2048), (300, 300)])
def test_kernel_equals_simulator_and_reference(dtype, strategy, soc, d, c):
    mean, invstd, counts = _stats(d, c, dtype, seed=d + c)
    try:
        (mean_all, invstd_all), (rm, rv), (rm0, rv0) = _run(mean, invstd, counts, soc=soc, strategy=strategy)
    except normkern.TilingError as exc:
        assert strategy is not None and "cannot run" in str(exc)
        return
    plan = tiling.plan_batch_norm_gather_stats_with_counts(d, c, dtype, soc, strategy)
    sim = simulate(plan, mean, invstd, counts, rm0, rv0, 0.1, 1e-5)
    F = DTYPES[dtype]
    assert mean_all.dtype == invstd_all.dtype == np.dtype(F)
    for got, expected in zip((mean_all, invstd_all, rm, rv), sim, strict=True):
        assert np.array_equal(got, expected.astype(F)), plan
    ref = batch_norm_gather_stats_reference(mean, invstd, counts, rm0, rv0, 0.1, 1e-5)
    for name, got, expected in zip(("mean_all", "invstd_all", "running_mean", "running_var"), (mean_all, invstd_all,
                                                                                                 rm, rv), ref,
                                   strict=True):
        assert_close(got, expected, name=name)


def test_mixed_dtypes_as_syncbatchnorm_passes_them():
    """fp32 statistics with fp16 counts and fp16 running statistics (op-plugin case B style)."""
    mean, invstd, _ = _stats(4, 3, "float32")
    counts = np.array([4, 5, 3, 2], np.float16)
    (mean_all, invstd_all), (rm, rv), (rm0, rv0) = _run(mean, invstd, counts, running_dtype=np.float16, soc="host")
    assert mean_all.dtype == np.float32 and rm.dtype == np.float16
    ref = batch_norm_gather_stats_reference(mean, invstd, counts, rm0, rv0, 0.1, 1e-5)
    np.testing.assert_allclose(mean_all, ref[0], rtol=2e-6)
    np.testing.assert_allclose(rv.astype(np.float64), ref[3], rtol=1e-3)


def test_syncbatchnorm_composition_gives_the_whole_batch():
    """Shard one batch unequally, batch_norm_stats per shard, gather with counts: whole-batch statistics."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((23, 6, 5, 7)) * 3 + 1).astype(np.float32)
    shards = np.split(x, [3, 4, 15])
    stats = [normkern.batch_norm_stats(s, 1e-5, soc="host") for s in shards]
    mean = np.stack([m for m, _ in stats])
    invstd = np.stack([s for _, s in stats])
    counts = np.array([s.shape[0] * 35 for s in shards], np.float32)
    rm, rv = np.zeros(6, np.float32), np.ones(6, np.float32)
    mean_all, invstd_all = normkern.batch_norm_gather_stats_with_counts(x, mean, invstd, rm, rv, 0.1, 1e-5, counts)
    x64 = x.astype(np.float64)
    whole_mean = x64.mean(axis=(0, 2, 3))
    whole_var = x64.var(axis=(0, 2, 3))
    np.testing.assert_allclose(mean_all, whole_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(invstd_all, 1 / np.sqrt(whole_var + 1e-5), rtol=1e-5)
    np.testing.assert_allclose(rm, 0.1 * whole_mean, rtol=1e-5, atol=1e-6)
    n = x.size // 6
    np.testing.assert_allclose(rv, 0.9 + 0.1 * whole_var * n / (n - 1), rtol=1e-5)
    torch = pytest.importorskip("torch")
    bn = torch.nn.BatchNorm2d(6, momentum=0.1, eps=1e-5).double()
    bn.train()(torch.from_numpy(x64))
    np.testing.assert_allclose(rm, bn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv, bn.running_var.numpy(), rtol=1e-5)


def test_pytorch_distributed_running_value_case():
    """PyTorch's SyncBatchNorm Diff_Input_Sizes_Running_Value test, ranks simulated by direct calls."""
    world = 2
    inputs = []
    for rank in range(world):
        x = np.zeros((2, 2, 10 ** (rank + 1)), np.float32)
        x[:, 0] = 0.1 ** (rank - 1)
        x[:, 1] = 0.3 ** (rank - 1)
        inputs.append(x)
    rm, rv = np.zeros(2, np.float32), np.ones(2, np.float32)
    for _ in range(100):
        stats = [normkern.batch_norm_stats(x, 1e-5, soc="host") for x in inputs]
        counts = np.array([x.shape[0] * x.shape[2] for x in inputs], np.float32)
        normkern.batch_norm_gather_stats_with_counts(inputs[0], np.stack([m for m, _ in stats]),
                                                     np.stack([s for _, s in stats]), rm, rv, 0.99, 1e-5, counts)
    everything = np.concatenate([x.transpose(1, 0, 2).reshape(2, -1) for x in inputs], axis=1).astype(np.float64)
    np.testing.assert_allclose(rm, everything.mean(axis=1), rtol=1.3e-6, atol=1e-5)
    np.testing.assert_allclose(rv, everything.var(axis=1, ddof=1), rtol=1.3e-6, atol=1e-5)


class TestEdgeCases:
    """Each decided, documented in the README, and checked here."""

    def test_zero_count_rows_contribute_nothing_when_finite(self):
        mean, invstd, counts = _stats(3, 4)
        with_zero = counts.copy()
        with_zero[1] = 0
        (a, b), *_ = _run(mean, invstd, with_zero, running=False, soc="host")
        (c, d), *_ = _run(mean[[0, 2]], invstd[[0, 2]], counts[[0, 2]], running=False, soc="host")
        np.testing.assert_allclose(a, c, rtol=1e-6)
        np.testing.assert_allclose(b, d, rtol=1e-6)

    def test_zero_count_with_zero_invstd_is_nan(self):
        mean, invstd, counts = _stats(3, 4)
        counts[1], invstd[1] = 0, 0  # SyncBatchNorm writes zeros for an empty rank
        (mean_all, invstd_all), *_ = _run(mean, invstd, counts, running=False, soc="host")
        assert np.isfinite(mean_all).all() and np.isnan(invstd_all).all()

    def test_total_count_one_makes_the_running_variance_infinite(self):
        mean, invstd, _ = _stats(1, 3)
        (_, invstd_all), (rm, rv), _ = _run(mean, invstd, np.array([1], np.float32), soc="host")
        assert np.isfinite(invstd_all).all() and np.isfinite(rm).all() and np.isinf(rv).all()

    def test_non_integer_counts_are_used_as_given(self):
        mean, invstd, _ = _stats(2, 3)
        counts = np.array([2.5, 1.5], np.float32)
        (mean_all, _), *_ = _run(mean, invstd, counts, running=False, soc="host")
        np.testing.assert_allclose(mean_all, (mean[0] * 2.5 + mean[1] * 1.5) / 4, rtol=1e-6)

    def test_invstd_zero_gives_zero_invstd_all_and_negative_acts_as_its_magnitude(self):
        mean, invstd, counts = _stats(2, 3)
        zero = invstd.copy()
        zero[0] = 0
        (_, invstd_all), *_ = _run(mean, zero, counts, running=False, soc="host")
        assert (invstd_all == 0).all()
        (_, negative), *_ = _run(mean, -invstd, counts, running=False, soc="host")
        (_, positive), *_ = _run(mean, invstd, counts, running=False, soc="host")
        assert np.array_equal(negative, positive)

    def test_nan_and_inf_stay_in_their_channel(self):
        mean, invstd, counts = _stats(3, 4)
        mean[1, 0] = np.nan
        mean[2, 1] = np.inf
        (mean_all, invstd_all), (rm, rv), _ = _run(mean, invstd, counts, soc="host")
        assert np.isnan(mean_all[0]) and not np.isfinite(mean_all[1]) and np.isfinite(mean_all[2:]).all()
        assert np.isfinite(invstd_all[2:]).all() and np.isfinite(rm[2:]).all()

    def test_empty_mean_gives_zero_and_nan(self):
        (mean_all, invstd_all), (rm, rv), (rm0, _) = _run(*_stats(0, 3), soc="Ascend950")
        assert np.array_equal(mean_all, np.zeros(3)) and np.isnan(invstd_all).all() and np.array_equal(rm, rm0)


X = np.empty((2, 3), np.float32)
M, S, W = _stats(2, 3)


@pytest.mark.parametrize("kwargs, status, message", [
    (dict(mean=None), 161001, "[batch_norm_gather_stats_with_counts] mean must not be None (null pointer), got None"),
    (dict(counts=None, mean=M.astype(np.float64)), 161001,
     "[batch_norm_gather_stats_with_counts] counts must not be None (null pointer), got None"),
    (dict(mean=M.astype(np.float64)), 161002,
     "[batch_norm_gather_stats_with_counts] mean dtype must be one of float32, float16, bfloat16 on Ascend910B2, "
     "got float64"),
    (dict(mean=M.astype(ml_dtypes.bfloat16), soc="Ascend910"), 161002,
     "[batch_norm_gather_stats_with_counts] mean dtype must be one of float32, float16 on Ascend910, got bfloat16"),
    (dict(soc="Ascend310P3"), 561003,
     "[batch_norm_gather_stats_with_counts] soc must support aclnnBatchNormGatherStatsWithCounts (CANN has no "
     "kernel for Atlas inference), got Ascend310P3"),
    (dict(input=np.empty(3, np.float32)), 161002,
     "[batch_norm_gather_stats_with_counts] input must have rank 2 to 8, got rank 1 (shape (3,))"),
    (dict(mean=M[0]), 161002, "[batch_norm_gather_stats_with_counts] mean must be 2-D (D, C), got shape (3,)"),
    (dict(counts=W[:, None]), 161002,
     "[batch_norm_gather_stats_with_counts] counts must be 1-D (D,), got shape (2, 1)"),
    (dict(counts=W[:1]), 161002,
     "[batch_norm_gather_stats_with_counts] counts mean, invstd and counts must have the same first dim D, "
     "got 2, 2, 1"),
    (dict(input=np.empty((2, 4), np.float32)), 161002,
     "[batch_norm_gather_stats_with_counts] mean dim 1 must equal input's C=4, got 3"),
    (dict(running_mean=np.zeros(4, np.float32)), 161002,
     "[batch_norm_gather_stats_with_counts] runningMean shape must be (C,) = (3,), got (4,)"),
    (dict(running_var=None), 161002,
     "[batch_norm_gather_stats_with_counts] runningVar must be given when the other running statistic is, got None"),
    (dict(momentum="0.1"), 161002, "[batch_norm_gather_stats_with_counts] momentum must be a real number, got '0.1'"),
    (dict(momentum=1.5, soc="Ascend950"), 561002,
     "[batch_norm_gather_stats_with_counts] momentum must be in range [0, 1] (SyncBatchNormGatherStatsFused "
     "tiling), got 1.5"),
    (dict(eps=1e-50, soc="Ascend950"), 561002,  # positive as a double, 0 as the float the tiling reads
     "[batch_norm_gather_stats_with_counts] eps must be positive as a float32 (SyncBatchNormGatherStatsFused "
     "tiling), got 1e-50"),
    (dict(invstd=S.astype(np.float16), soc="Ascend950"), 561002,
     "[batch_norm_gather_stats_with_counts] invstd dtype must equal mean's (float32) on Ascend950, got float16"),
    (dict(strategy="fast"), 161002,
     "[batch_norm_gather_stats_with_counts] strategy must be one of empty, common, workspace, first_axis_common, "
     "first_axis_workspace, got 'fast'"),
])
def test_error_messages(kwargs, status, message):
    args = dict(input=X, mean=M, invstd=S, running_mean=np.zeros(3, np.float32), running_var=np.ones(3, np.float32),
                momentum=0.1, eps=1e-5, counts=W)
    args.update(kwargs)
    options = {k: args.pop(k) for k in ("soc", "strategy") if k in args}
    with pytest.raises(normkern.NormkernError) as info:
        normkern.batch_norm_gather_stats_with_counts(*args.values(), **options)
    assert (info.value.status, str(info.value)) == (status, message)


def test_aclnn_pair_uses_the_callers_workspace():
    mean, invstd, counts = _stats(300, 64)
    mean_all, invstd_all = np.full(64, np.nan, np.float32), np.full(64, np.nan, np.float32)
    rm, rv = np.zeros(64, np.float32), np.ones(64, np.float32)
    status, size, executor = aclnn.aclnnBatchNormGatherStatsWithCountsGetWorkspaceSize(
        X[:, :1].repeat(64, 1), mean, invstd, rm, rv, 0.1, 1e-5, counts, mean_all, invstd_all, soc="Ascend950")
    plan = executor.plan
    assert status == 0 and plan.strategy.value == "first_axis_common" and size == plan.workspace.total_bytes
    workspace = np.full(size, 0xFF, np.uint8)  # NaN everywhere
    assert aclnn.aclnnBatchNormGatherStatsWithCounts(workspace, size, executor) == 0
    user = workspace[16 * 1024 * 1024:].view(np.float32)
    blocks = plan.core_split.parts
    # the row after the block partials holds mean_all, as the kernel wrote it
    assert np.array_equal(bits(user[blocks * 64:blocks * 64 + 64]), bits(mean_all))
    sim = simulate(plan, mean, invstd, counts, np.zeros(64, np.float32), np.ones(64, np.float32), 0.1, 1e-5)
    assert np.array_equal(bits(invstd_all), bits(sim[1])) and np.array_equal(bits(rv), bits(sim[3]))
    assert aclnn.aclnnBatchNormGatherStatsWithCounts(workspace[:-4], size - 4, executor) == 161002


def test_aclnn_null_output_status():
    status, size, executor = aclnn.aclnnBatchNormGatherStatsWithCountsGetWorkspaceSize(
        X, M, S, None, None, 0.1, 1e-5, W, None, np.zeros(3, np.float32))
    assert (status, size, executor) == (161001, 0, None)
    assert aclnn.aclGetRecentErrMsg() == \
        "[batch_norm_gather_stats_with_counts] meanAll must not be None (null pointer), got None"


def test_read_only_running_statistics_are_refused_before_anything_is_written():
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    rv.flags.writeable = False
    out = (np.full(3, np.nan, np.float32), np.full(3, np.nan, np.float32))
    with pytest.raises(normkern.InvalidParameterError,
                       match=r"\[batch_norm_gather_stats_with_counts\] runningVar must be writeable, got a read-only"):
        normkern.batch_norm_gather_stats_with_counts(X, M, S, rm, rv, 0.1, 1e-5, W, out=out)
    assert np.array_equal(rm, np.zeros(3)) and np.isnan(out[0]).all()


def test_out_arrays_of_another_dtype_receive_the_rounded_result():
    out = (np.empty(3, np.float16), np.empty(3, np.float16))
    expected = normkern.batch_norm_gather_stats_with_counts(X, M, S, None, None, 0.1, 1e-5, W)
    got = normkern.batch_norm_gather_stats_with_counts(X, M, S, None, None, 0.1, 1e-5, W, out=out)
    assert got[0] is out[0] and np.array_equal(out[1], expected[1].astype(np.float16))
