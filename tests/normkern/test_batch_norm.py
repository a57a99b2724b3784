"""BatchNorm (the forward in one op): kernel == simulator bit for bit, the same bits on every split, staging
and thread count, close to float64 and to PyTorch's ``native_batch_norm``, and the op_api's rules."""

import dataclasses

import numpy as np
import pytest

import normkern
import tiling
from normkern import aclnn
from normkern.ops.batch_norm import batch_norm_reference, simulate
from tests.tolerances import assert_close

from .conftest import DTYPES, make_input, make_spread_input

HOST = tiling.get_soc("host")
#: Chunks of 16384: streams of one chunk, a chunk and a tail, several chunks; planes of 49, 64 and 3000; float32
#: planes of whole lane steps (64, 16384, 6400: one cut by a chunk's end) summed where they lie.
SHAPES = [(8, 3, 7, 7), (2, 5, 64), (6, 2, 3000), (2, 3), (1, 4, 16384), (3, 2, 11000), (2, 3, 2, 3, 5),
          (3, 2, 6400)]


def _same(a, b) -> bool:
    return np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


def _inputs(shape, dtype, seed=0, spread=False, stats_dtype="float32"):
    x = (make_spread_input if spread else make_input)(shape, dtype, seed)
    rng = np.random.default_rng(seed + 1)
    c = shape[1]
    kind = DTYPES[stats_dtype]
    return (x, (1 + 0.2 * rng.standard_normal(c)).astype(kind), (0.3 * rng.standard_normal(c)).astype(kind),
            (0.5 * rng.standard_normal(c)).astype(kind), rng.uniform(0.5, 2.0, c).astype(kind))


def _run(x, w, b, rm, rv, training, soc="host", **kw):
    rm, rv = rm.copy(), rv.copy()
    y, mean, invstd = normkern.batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5, soc=soc, **kw)
    return y, mean, invstd, rm, rv


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_kernel_equals_simulator_and_stays_near_float64(dtype, training):
    for shape in SHAPES:
        for spread in (False, True):
            x, w, b, rm, rv = _inputs(shape, dtype, spread=spread)
            got = _run(x, w, b, rm, rv, training)
            plan = tiling.plan_batch_norm(shape, dtype, "host", training=training)
            want = simulate(plan, x, w, b, rm, rv, 0.1, 1e-5)
            assert all(_same(g, s) for g, s in zip(got, want, strict=True)), (shape, spread)
            assert got[0].dtype == x.dtype and got[1].dtype == got[2].dtype == np.float32
            if spread:
                continue
            ref = batch_norm_reference(x, w, b, rm, rv, training, 0.1, 1e-5)
            assert_close(got[0], ref[0], name="output")
            assert_close(got[1], ref[1], scale=np.abs(x.astype(np.float64)).max(), dtype="float32", name="mean")
            for name, g, r in zip(("invstd", "running_mean", "running_var"), got[2:], ref[2:], strict=True):
                assert_close(g, r, dtype="float32", name=name)


def test_the_bits_are_the_same_on_every_split_staging_and_thread_count(threads):
    """Cores own whole channels and a chunk's order is fixed by the plan: 1, 2 or 8 cores, a stream staged
    whole or a chunk at a time (a host of 64 KiB of L2), one or two threads: one answer."""
    x, w, b, rm, rv = _inputs((3, 9, 11000), "float32", spread=True)
    socs = [dataclasses.replace(HOST, vector_cores=k) for k in (1, 2, 8)]
    socs.append(dataclasses.replace(HOST, name="small L2", ub_bytes=64 << 10, ub_raw_bytes=64 << 10))
    assert not tiling.plan_batch_norm(x.shape, soc=socs[-1]).staged and tiling.plan_batch_norm(x.shape, soc=HOST).staged
    want = _run(x, w, b, rm, rv, True)
    for soc in socs:
        for count in sorted({1, normkern.get_num_threads()}):
            threads(count)
            assert all(_same(g, s) for g, s in zip(_run(x, w, b, rm, rv, True, soc=soc), want, strict=True))


@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_close_to_pytorch_native_batch_norm(training):
    torch = pytest.importorskip("torch")
    x, w, b, rm, rv = _inputs((4, 6, 9, 9), "float32")
    got = _run(x, w, b, rm, rv, training)
    t_rm, t_rv = torch.from_numpy(rm.copy()), torch.from_numpy(rv.copy())
    y, mean, invstd = torch.native_batch_norm(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), t_rm,
                                              t_rv, training, 0.1, 1e-5)
    np.testing.assert_allclose(got[0], y.numpy(), rtol=1e-5, atol=1e-5)
    if training:  # PyTorch's eval statistics are empty tensors
        np.testing.assert_allclose(got[1], mean.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[2], invstd.numpy(), rtol=1e-5)
    np.testing.assert_allclose(got[3], t_rm.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[4], t_rv.numpy(), rtol=1e-5)


def test_missing_tensors_half_statistics_and_out():
    x, w, b, rm, rv = _inputs((4, 3, 5, 5), "bfloat16", stats_dtype="bfloat16")
    y, mean, invstd, rm2, rv2 = _run(x, w, b, rm, rv, True)
    assert rm2.dtype == rm.dtype and not _same(rm2, rm)
    ref = batch_norm_reference(x, w, b, rm, rv, True, 0.1, 1e-5)
    assert_close(rm2, ref[3], name="running_mean") and assert_close(rv2, ref[4], name="running_var")
    # None: weight 1, bias 0; a running statistic that is None is not updated, the other is
    x32 = make_input((4, 3, 5), "float32")
    running = np.zeros(3, np.float32)
    y, mean, invstd = normkern.batch_norm(x32, None, None, running, None, True, 0.5, 1e-5, soc="host")
    ref = batch_norm_reference(x32, None, None, np.zeros(3), None, True, 0.5, 1e-5)
    assert_close(y, ref[0]) and assert_close(running, ref[3], name="running_mean")
    # eval without running statistics: mean 0, variance 1
    y, mean, invstd = normkern.batch_norm(x32, None, None, None, None, False, 0.1, 1e-5, soc="host")
    assert np.array_equal(mean, np.zeros(3, np.float32)) and np.allclose(y, x32 / np.sqrt(1 + 1e-5))
    outs = (np.empty_like(x32), np.empty(3, np.float32), np.empty(3, np.float32))
    got = normkern.batch_norm(x32, None, None, None, None, True, 0.1, 1e-5, soc="host", out=outs)
    assert all(g is o for g, o in zip(got, outs, strict=True))
    strided = np.empty((4, 3, 10), np.float32)[:, :, ::2]
    got = normkern.batch_norm(x32, None, None, None, None, True, 0.1, 1e-5, soc="host",
                              out=(strided, np.empty(3, np.float32), np.empty(3, np.float32)))
    assert got[0] is strided and _same(np.ascontiguousarray(strided), outs[0])


def test_one_value_per_channel_and_empty_inputs():
    x = np.array([[1.0, 2.0, 3.0]], np.float32)
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    y, mean, invstd = normkern.batch_norm(x, None, None, rm, rv, True, 0.1, 1e-5, soc="host")
    assert np.array_equal(mean, x[0]) and np.all(np.isnan(rv))  # 0 / 0, as PyTorch's native_batch_norm
    empty = np.empty((0, 3, 4), np.float32)
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    y, mean, invstd = normkern.batch_norm(empty, None, None, rm, rv, True, 0.1, 1e-5, soc="host")
    assert y.shape == empty.shape and np.array_equal(mean, np.zeros(3)) and np.all(np.isnan(invstd))
    assert np.array_equal(rm, np.zeros(3)) and np.array_equal(rv, np.ones(3))
    # the op_api returns at once for an empty input: on an NPU SoC too, before the dtype checks
    status, size, executor = aclnn.aclnnBatchNormGetWorkspaceSize(
        np.empty((0, 3), np.float64), None, None, None, None, True, 0.1, 1e-5, np.empty((0, 3)),
        np.ones(3, np.float32), np.zeros(3, np.float32), soc="Ascend910B2")
    assert status == 0 and size == 0
    assert aclnn.aclnnBatchNorm(None, 0, executor) == 0


def test_errors_name_the_rule_and_write_nothing():
    x, w, b, rm, rv = _inputs((4, 3, 5), "float32")
    with pytest.raises(normkern.TilingError, match=r"\[batch_norm\] BatchNormV3 .* not planned") as info:
        normkern.batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5, soc="Ascend910B2")
    assert info.value.status == 561002
    before = rm.copy()
    cases = [
        (dict(weight=np.ones(4, np.float32)), r"weight shape must be \(C,\) = \(3,\)"),
        (dict(running_mean=rm.astype(np.float64)), "runningMean dtype must be one of"),
        (dict(training=1), "training must be a bool"),
        (dict(momentum="0.1"), "momentum must be a real number"),
        (dict(input=x[0, 0]), "input must have rank 2 to 8"),
    ]
    for change, message in cases:
        call = {**dict(input=x, weight=w, bias=b, running_mean=rm, running_var=rv, training=True, momentum=0.1,
                       eps=1e-5), **change}
        with pytest.raises(normkern.InvalidParameterError, match=message):
            normkern.batch_norm(**call, soc="host")
        assert np.array_equal(rm, before)
    status, _, _ = aclnn.aclnnBatchNormGetWorkspaceSize(x, w, b, rm, rv, True, 0.1, 1e-5, np.empty_like(x), None,
                                                        np.empty(3, np.float32), soc="host")
    assert status == 161001  # saveMean is required in training
    status, _, executor = aclnn.aclnnBatchNormGetWorkspaceSize(x, w, b, rm, rv, False, 0.1, 1e-5, np.empty_like(x),
                                                               None, None, soc="host")
    assert status == 0 and np.array_equal(rm, before)  # evaluation needs no saved statistics


def test_aclnn_two_phases_and_determinism():
    x, w, b, rm, rv = _inputs((4, 3, 50), "float16", stats_dtype="float16")
    out, save_mean, save_invstd = np.empty_like(x), np.empty(3, np.float16), np.empty(3, np.float32)
    want = _run(x, w, b, rm, rv, True)
    status, size, executor = aclnn.aclnnBatchNormGetWorkspaceSize(x, w, b, rm, rv, True, 0.1, 1e-5, out, save_mean,
                                                                  save_invstd, soc="host")
    assert status == 0 and size == 0 and executor.plan.strategy is tiling.BatchNormStrategy.CHANNELS
    assert aclnn.aclnnBatchNorm(None, 0, executor) == 0
    assert _same(out, want[0]) and _same(save_invstd, want[2]) and _same(save_mean, want[1].astype(np.float16))
    assert _same(rm, want[3]) and _same(rv, want[4])
    report = normkern.check_determinism("batch_norm", dict(input=x, weight=w, bias=b, running_mean=rm, running_var=rv,
                                                           training=True, momentum=0.1, eps=1e-5),
                                        runs=3, socs=["host"])
    assert report.deterministic
