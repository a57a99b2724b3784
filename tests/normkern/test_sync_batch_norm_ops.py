"""BatchNormElemt, BatchNormReduceBackward, BatchNormElemtBackward: kernel == simulator on every SoC that has
them, float64 references at every dtype and edge shape, and the aclnn status rows in the op_api order."""

import numpy as np
import pytest

import normkern
import tiling
from normkern import aclnn
from normkern.kernels.dtypes import bfloat16
from normkern.ops import batch_norm_backward_elemt as belemt
from normkern.ops import batch_norm_backward_reduce as breduce
from normkern.ops import batch_norm_elemt as elemt
from tests.tolerances import TOLERANCE, assert_close

from .conftest import DTYPES, TINY, make_input, make_spread_input

F32 = np.float32
SHAPES = [(2, 3), (4, 3, 5), (3, 4, 7, 9), (2, 3, 2, 3, 4), (1, 5, 6, 6), (6, 1, 7, 7), (5, 3, 1, 1),
          (4, 6, 300), (9, 2, 33, 17)]
#: Every SoC family each op has, one preset each (A3 shares A2's family), and the tiny SoC of conftest.
ELEMT_SOCS = ["Ascend910B2", "Ascend910", "host", TINY]
BACKWARD_SOCS = ["Ascend910B2", "Ascend910", "Ascend950", "host", TINY]


def _allowed(op, soc, dtype):
    return dtype in tiling.support(op, tiling.get_soc(soc)).dtypes


def _stats(x, c, stats_dtype, seed=1):
    rng = np.random.default_rng(seed)
    axes = (0, *range(2, x.ndim))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes) if x.size else np.zeros(c)
    invstd = 1 / np.sqrt(x64.var(axis=axes) + 1e-5) if x.size else np.ones(c)
    weight = rng.uniform(0.5, 2, c)
    return (mean.astype(stats_dtype), invstd.astype(stats_dtype), weight.astype(stats_dtype),
            rng.standard_normal(c).astype(stats_dtype))


def _soc_id(soc):
    return soc if isinstance(soc, str) else soc.name


@pytest.mark.parametrize("soc", ELEMT_SOCS, ids=_soc_id)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES + [(0, 3, 4), (3, 2, 0)])
def test_batch_norm_elemt(shape, dtype, soc):
    if not _allowed("batch_norm_elemt", soc, dtype):
        return
    x = make_input(shape, dtype, seed=sum(shape))
    mean, invstd, weight, bias = _stats(x, shape[1], DTYPES[dtype])
    out = normkern.batch_norm_elemt(x, weight, bias, mean, invstd, 1e-5, soc=soc)
    assert out.shape == x.shape and out.dtype == x.dtype
    plan = tiling.plan_batch_norm_elemt(shape, dtype, soc)
    assert plan.deterministic and plan.recompute_var == (_soc_id(soc) in ("Ascend910B2", "Ascend910"))
    assert np.array_equal(out.view(np.uint8), elemt.simulate(plan, x, weight, bias, mean, invstd, 1e-5).view(np.uint8))
    want = elemt.batch_norm_elemt_reference(x, weight, bias, mean, invstd)
    # the scale is the largest term: |x - mean| * invstd * weight plus |bias|
    scale = float(np.abs(want).max(initial=0)) + 1
    assert_close(out, want, scale=scale)


def test_batch_norm_elemt_none_weight_bias_and_float32_statistics_on_host():
    x = make_input((4, 3, 10), "bfloat16")
    mean, invstd, _, _ = _stats(x, 3, F32)
    out = normkern.batch_norm_elemt(x, None, None, mean, invstd, 1e-5, soc="host")
    assert out.dtype == x.dtype
    assert_close(out, elemt.batch_norm_elemt_reference(x, None, None, mean, invstd), scale=4)
    # The NPU op refuses float32 statistics beside bfloat16 data; the host, like PyTorch, takes them.
    with pytest.raises(normkern.InvalidParameterError, match=r"mean dtype must be the data's \(bfloat16\) on "
                       "Ascend910B2, got float32"):
        normkern.batch_norm_elemt(x, None, None, mean, invstd, 1e-5, soc="Ascend910B2")


def test_batch_norm_elemt_npu_scale_is_recomputed_from_the_variance():
    """The op_api recomputes var = 1/invstd^2 - eps: with eps beyond 1/invstd^2 the variance goes negative
    and, added to eps again, gives back invstd; the host scale is invstd itself (as torch.batch_norm_elemt)."""
    x = np.ones((2, 2, 3), F32)
    mean = np.zeros(2, F32)
    invstd = np.array([0.5, 3.0], F32)
    npu = normkern.batch_norm_elemt(x, None, None, mean, invstd, 1.0, soc="Ascend910B2")
    host = normkern.batch_norm_elemt(x, None, None, mean, invstd, 1.0, soc="host")
    assert np.array_equal(host[0, :, 0], invstd)
    expected = F32(1) / np.sqrt((F32(1) / (invstd * invstd) - F32(1)) + F32(1))
    assert np.array_equal(npu[0, :, 0], expected)


REDUCE_STRATEGIES = [None, "split_c", "split_r", "atomic", "planes"]


@pytest.mark.parametrize("soc", BACKWARD_SOCS, ids=_soc_id)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES + [(0, 3, 4), (3, 2, 0)])
@pytest.mark.parametrize("strategy", REDUCE_STRATEGIES)
def test_batch_norm_backward_reduce(shape, dtype, soc, strategy):
    if not _allowed("batch_norm_backward_reduce", soc, dtype):
        return
    x = make_input(shape, dtype, seed=sum(shape))
    dy = make_spread_input(shape, dtype, seed=len(shape))
    mean, invstd, weight, _ = _stats(x, shape[1], F32)
    try:
        outs = normkern.batch_norm_backward_reduce(dy, x, mean, invstd, weight, True, True, True, soc=soc,
                                                   strategy=strategy, deterministic=False, arrival_seed=3)
    except normkern.TilingError as exc:
        assert strategy is not None and "cannot run" in str(exc)
        return
    plan = tiling.plan_batch_norm_backward_reduce(shape, dtype, soc, strategy)
    assert plan.centered == (_soc_id(soc) in ("host", "tiny"))
    sim = breduce.simulate(plan, dy, x, mean, invstd, breduce.arrival_order(plan, 3))
    for got, want in zip(outs, sim, strict=True):
        assert got.dtype == F32 and np.array_equal(got.view(np.uint32), want.view(np.uint32)), plan
    ref = breduce.batch_norm_backward_reduce_reference(dy, x, mean, invstd)
    # sum_dy: each term's magnitude summed; sum_dy_xmu: CANN's sum(dy*x) - mean*sum(dy) cancels terms
    # as large as |dy| * |x| summed.
    dy64, x64 = dy.astype(np.float64), x.astype(np.float64)
    axes = (0, *range(2, x.ndim))
    scale_dy = float(np.abs(dy64).sum(axis=axes).max(initial=0))
    scale_xmu = float((np.abs(dy64) * (np.abs(x64) + np.abs(mean.astype(np.float64)).max())).sum(axis=axes)
                      .max(initial=0))
    for name, got, want, scale in zip(("sum_dy", "sum_dy_xmu", "grad_weight", "grad_bias"), outs, ref,
                                      (scale_dy, scale_xmu, scale_xmu * float(invstd.max()), scale_dy), strict=True):
        assert_close(got, want, scale=scale, dtype="float32", name=name)


def test_backward_reduce_masks_and_output_dtypes():
    x = make_input((4, 3, 5), "float16")
    dy = make_spread_input((4, 3, 5), "float16")
    mean, invstd, weight, _ = _stats(x, 3, np.float16)
    s, sx, gw, gb = normkern.batch_norm_backward_reduce(dy, x, mean.astype(F32), invstd.astype(F32), weight, False,
                                                        True, False, soc="host")
    assert s is None and sx is None and gb is None and gw.dtype == np.float16
    full = normkern.batch_norm_backward_reduce(dy, x, mean.astype(F32), invstd.astype(F32), weight, True, True,
                                               True, soc="host")
    assert np.array_equal(gw, full[2]) and full[0].dtype == F32 and full[3].dtype == np.float16


def test_backward_reduce_centered_host_plan_survives_a_large_mean():
    """CANN forms sum_dy_xmu as sum(dy*x) - mean*sum(dy), which cancels when |mean| is large against the
    spread of x; the host plan sums dy*(x - mean)."""
    rng = np.random.default_rng(0)
    x = (1000 + rng.standard_normal((64, 2, 100))).astype(F32)
    dy = rng.standard_normal(x.shape).astype(F32)
    mean = x.astype(np.float64).mean(axis=(0, 2)).astype(F32)
    invstd = np.ones(2, F32)
    want = breduce.batch_norm_backward_reduce_reference(dy, x, mean, invstd)[1]
    err = {soc: np.abs(normkern.batch_norm_backward_reduce(dy, x, mean, invstd, None, True, False, False,
                                                           soc=soc)[1] - want).max() / np.abs(want).max()
           for soc in ("host", "Ascend910B2")}
    assert err["host"] < 1e-5 < err["Ascend910B2"], err


@pytest.mark.parametrize("soc", BACKWARD_SOCS, ids=_soc_id)
@pytest.mark.parametrize("dtype, stats_dtype", [("float32", "float32"), ("float16", "float16"),
                                                ("bfloat16", "bfloat16"), ("float16", "float32"),
                                                ("bfloat16", "float32")])
@pytest.mark.parametrize("shape", SHAPES + [(0, 3, 4)])
@pytest.mark.parametrize("counter_dtype", ["int32", "float32"])
def test_batch_norm_backward_elemt(shape, dtype, stats_dtype, soc, counter_dtype):
    if not _allowed("batch_norm_backward_elemt", soc, dtype):
        return
    x = make_input(shape, dtype, seed=sum(shape))
    dy = make_spread_input(shape, dtype, seed=len(shape))
    mean, invstd, weight, _ = _stats(x, shape[1], DTYPES[stats_dtype])
    rng = np.random.default_rng(2)
    count = np.array([max(x.size // shape[1], 1), 7, 1], counter_dtype)
    sum_dy = (rng.standard_normal(shape[1]) * 10).astype(DTYPES[stats_dtype])
    sum_dy_xmu = (rng.standard_normal(shape[1]) * 10).astype(DTYPES[stats_dtype])
    args = (dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count)
    try:
        out = normkern.batch_norm_backward_elemt(*args, soc=soc)
    except normkern.NormkernError as exc:
        assert stats_dtype != dtype and ("Ascend950" in str(exc) or "float32" in str(exc)), exc
        return
    assert out.shape == x.shape and out.dtype == x.dtype
    plan = tiling.plan_batch_norm_backward_elemt(shape, dtype, soc, stats_dtype=stats_dtype, devices=3)
    assert np.array_equal(out.view(np.uint8), belemt.simulate(plan, *args).view(np.uint8))
    want = belemt.batch_norm_backward_elemt_reference(*args)
    inv = np.abs(invstd.astype(np.float64)).max()
    scale = (float(np.abs(dy.astype(np.float64)).max(initial=0)) + float(np.abs(x.astype(np.float64)).max(initial=0))
             * inv * inv * 10 + 10) * inv * float(weight.astype(np.float64).max())
    tolerance = max(TOLERANCE[dtype], TOLERANCE[stats_dtype] if stats_dtype == "float16" else 0)
    assert_close(out, want, scale=scale * tolerance / TOLERANCE[dtype])


def test_backward_elemt_counter_of_any_shape_and_none_weight():
    x = make_input((3, 2, 4), "float32")
    dy = make_spread_input((3, 2, 4), "float32")
    mean, invstd, _, _ = _stats(x, 2, F32)
    sums = (np.array([1.5, -2.0], F32), np.array([0.5, 3.0], F32))
    flat = normkern.batch_norm_backward_elemt(dy, x, mean, invstd, None, *sums, np.array([12, 3], np.int32))
    grid = normkern.batch_norm_backward_elemt(dy, x, mean, invstd, None, *sums, np.array([[12.0], [3.0]], F32))
    assert np.array_equal(flat, grid)
    assert_close(flat, belemt.batch_norm_backward_elemt_reference(dy, x, mean, invstd, None, *sums, [12, 3]),
                 scale=10)


def test_out_arrays_are_filled_in_place_and_strided_outputs_work():
    x = make_input((4, 3, 6), "float32")
    mean, invstd, weight, bias = _stats(x, 3, F32)
    out = np.empty((4, 3, 12), F32)[:, :, ::2]
    got = normkern.batch_norm_elemt(x, weight, bias, mean, invstd, 1e-5, out=out, soc="host")
    assert got is out
    assert np.array_equal(out, normkern.batch_norm_elemt(x, weight, bias, mean, invstd, 1e-5, soc="host"))
    targets = tuple(np.full(3, np.nan, F32) for _ in range(4))
    got = normkern.batch_norm_backward_reduce(x, x, mean, invstd, weight, True, True, True, soc="host", out=targets)
    assert all(g is t for g, t in zip(got, targets, strict=True)) and not np.isnan(targets[1]).any()


def test_empty_backward_reduce_outputs_are_zero():
    x = np.zeros((0, 3, 4), F32)
    c3 = np.ones(3, F32)
    for soc in ("Ascend950", "Ascend910B2", "host"):
        outs = normkern.batch_norm_backward_reduce(x, x, c3, c3, None, True, True, True, soc=soc)
        assert all(np.array_equal(o, np.zeros(3, F32)) for o in outs)
    status, size, executor = aclnn.aclnnBatchNormReduceBackwardGetWorkspaceSize(
        x, x, c3, c3, None, True, True, True, *(np.full(3, 7, F32) for _ in range(4)), soc="Ascend910B2")
    assert (status, size) == (0, 0)


def test_atomic_backward_reduce_replays_from_its_seed_and_refuses_determinism():
    x = make_spread_input((64, 2, 50), "float32")
    dy = make_spread_input((64, 2, 50), "float32", seed=5)
    mean, invstd, weight, _ = _stats(x, 2, F32)
    args = (dy, x, mean, invstd, weight, True, True, True)
    runs = {normkern.batch_norm_backward_reduce(*args, strategy="atomic", deterministic=False, arrival_seed=s)[1]
            .tobytes() for s in range(12)}
    again = normkern.batch_norm_backward_reduce(*args, strategy="atomic", deterministic=False, arrival_seed=4)[1]
    assert len(runs) > 1 and again.tobytes() in runs
    with pytest.raises(normkern.DeterminismError, match="cannot be used while determinism is on"):
        normkern.batch_norm_backward_reduce(*args, strategy="atomic", deterministic=True)


X = make_input((2, 3, 4), "float32")
C3 = np.ones(3, F32)
H3 = np.ones(3, np.float16)


@pytest.mark.parametrize("call, status, message", [
    # BatchNormElemt: the op_api maps a null pointer to PARAM_INVALID (the doc says 161001)
    (lambda: aclnn.aclnnBatchNormElemtGetWorkspaceSize(None, None, None, C3, C3, 1e-5, X), 161002,
     "[batch_norm_elemt] input must not be None (null pointer), got None"),
    (lambda: aclnn.aclnnBatchNormElemtGetWorkspaceSize(X, None, None, C3, C3, 1e-5, None), 161002,
     "[batch_norm_elemt] output must not be None (null pointer), got None"),
    (lambda: aclnn.aclnnBatchNormElemtGetWorkspaceSize(X.astype(np.float64), None, None, C3, C3, 1e-5, X), 161002,
     "[batch_norm_elemt] input dtype must be one of float32, float16, bfloat16 on Ascend910B2, got float64"),
    (lambda: aclnn.aclnnBatchNormElemtGetWorkspaceSize(X, None, None, H3, C3, 1e-5, X), 161002,
     "[batch_norm_elemt] invstd dtype must equal mean's (float16), got float32"),
    (lambda: aclnn.aclnnBatchNormElemtGetWorkspaceSize(X, None, None, C3, C3, 1e-5, X[:1]), 161002,
     "[batch_norm_elemt] output shape must equal input's (2, 3, 4), got (1, 3, 4)"),
    (lambda: aclnn.aclnnBatchNormElemtGetWorkspaceSize(X[:, :0], None, None, C3[:0], C3[:0], 1e-5, X[:, :0]),
     161002, "[batch_norm_elemt] input dim 1 (C) must be positive, got shape (2, 0, 4)"),
    (lambda: aclnn.aclnnBatchNormElemtGetWorkspaceSize(X, C3[:2], None, C3, C3, 1e-5, X.copy()), 161002,
     "[batch_norm_elemt] weight shape must be (C,) = (3,), got (2,)"),
    (lambda: aclnn.aclnnBatchNormElemtGetWorkspaceSize(X, None, None, C3, C3, 1e-5, X.copy(), soc="Ascend950"),
     561003, "[batch_norm_elemt] soc must support aclnnBatchNormElemt (CANN has no kernel for Ascend "
     "950PR/950DT), got Ascend950"),
    (lambda: aclnn.aclnnBatchNormElemtGetWorkspaceSize(X.astype(bfloat16()), None, None, C3, C3,
                                                       1e-5, X, soc="Ascend910"), 161002,
     "[batch_norm_elemt] input dtype must be one of float32, float16 on Ascend910, got bfloat16"),
    # BatchNormReduceBackward: null inputs, then null outputs the masks ask for (161001)
    (lambda: aclnn.aclnnBatchNormReduceBackwardGetWorkspaceSize(X, X, C3, None, None, True, True, True, C3, C3, C3,
                                                                C3), 161001,
     "[batch_norm_backward_reduce] invstd must not be None (null pointer), got None"),
    (lambda: aclnn.aclnnBatchNormReduceBackwardGetWorkspaceSize(X, X, C3, C3, None, False, True, True, None, None,
                                                                None, C3), 161001,
     "[batch_norm_backward_reduce] gradWeight must not be None (null pointer), got None"),
    (lambda: aclnn.aclnnBatchNormReduceBackwardGetWorkspaceSize(X, X.astype(np.float16), C3, C3, None, True, True,
                                                                True, C3, C3, C3, C3), 161002,
     "[batch_norm_backward_reduce] gradOut dtype must equal input's (float16), got float32"),
    (lambda: aclnn.aclnnBatchNormReduceBackwardGetWorkspaceSize(X, X, C3, C3, None, True, False, False, C3,
                                                                C3.astype(np.float64), None, None), 161002,
     "[batch_norm_backward_reduce] sumDyXmu dtype must be one of float32, float16, bfloat16 on Ascend910B2, "
     "got float64"),
    (lambda: aclnn.aclnnBatchNormReduceBackwardGetWorkspaceSize(X[0, 0], X[0, 0], C3, C3, None, True, True, True,
                                                                C3, C3, C3, C3), 161002,
     "[batch_norm_backward_reduce] gradOut must have rank 2 to 8, got rank 1 (shape (4,))"),
    (lambda: aclnn.aclnnBatchNormReduceBackwardGetWorkspaceSize(X, X, C3, C3, None, True, True, True, C3, C3,
                                                                C3[:2], C3), 161002,
     "[batch_norm_backward_reduce] gradWeight shape must be (C,) = (3,), got (2,)"),
    (lambda: aclnn.aclnnBatchNormReduceBackwardGetWorkspaceSize(X, X, C3, C3, None, True, "yes", True, C3, C3,
                                                                C3, C3), 161002,
     "[batch_norm_backward_reduce] weightG must be a bool, got 'yes'"),
    (lambda: aclnn.aclnnBatchNormReduceBackwardGetWorkspaceSize(X[:, :0], X[:, :0], C3[:0], C3[:0], None, True,
                                                                False, False, C3[:0], C3[:0], None, None), 161002,
     "[batch_norm_backward_reduce] input dim 1 (C) must be positive, got shape (2, 0, 4)"),
    (lambda: aclnn.aclnnBatchNormReduceBackwardGetWorkspaceSize(X, X[:1], C3, C3, None, True, True, True, C3, C3,
                                                                C3, C3), 161002,
     "[batch_norm_backward_reduce] gradOut shape must equal input's (1, 3, 4), got (2, 3, 4)"),
    # BatchNormElemtBackward
    (lambda: aclnn.aclnnBatchNormElemtBackwardGetWorkspaceSize(X[0, 0], X[0, 0], C3, C3, None, C3, C3, C3,
                                                               X[0, 0].copy()), 161002,
     "[batch_norm_backward_elemt] input must have rank 2 to 8, got rank 1 (shape (4,))"),
    (lambda: aclnn.aclnnBatchNormElemtBackwardGetWorkspaceSize(X[:, :0], X[:, :0], C3[:0], C3[:0], None, C3[:0],
                                                               C3[:0], C3, X[:, :0].copy()), 161002,
     "[batch_norm_backward_elemt] input dim 1 (C) must be positive, got shape (2, 0, 4)"),
    (lambda: aclnn.aclnnBatchNormElemtBackwardGetWorkspaceSize(X, X, C3, C3, None, C3, C3,
                                                               np.ones((1,) * 9, np.int32), X.copy()), 161002,
     "[batch_norm_backward_elemt] counter must have rank 0 to 8, got rank 9 (shape (1, 1, 1, 1, 1, 1, 1, 1, 1))"),
    (lambda: aclnn.aclnnBatchNormElemtBackwardGetWorkspaceSize(X, X, C3, C3, None, C3, C3, None, X.copy()), 161001,
     "[batch_norm_backward_elemt] counter must not be None (null pointer), got None"),
    (lambda: aclnn.aclnnBatchNormElemtBackwardGetWorkspaceSize(X, X, C3, C3, None, C3, C3,
                                                               np.ones(2, np.int64), X.copy()), 161002,
     "[batch_norm_backward_elemt] counter dtype must be one of int32, float16, float32, got int64"),
    (lambda: aclnn.aclnnBatchNormElemtBackwardGetWorkspaceSize(X, X, C3, C3, H3, C3, C3, C3, X.copy()), 161002,
     "[batch_norm_backward_elemt] weight dtype must equal mean's (float32), got float16"),
    (lambda: aclnn.aclnnBatchNormElemtBackwardGetWorkspaceSize(X, X, C3, C3, None, C3, C3, C3, X[:1].copy()),
     161002, "[batch_norm_backward_elemt] gradInput shape must equal input's (2, 3, 4), got (1, 3, 4)"),
    (lambda: aclnn.aclnnBatchNormElemtBackwardGetWorkspaceSize(X, X, C3, C3, None, C3[:1], C3, C3, X.copy()),
     161002, "[batch_norm_backward_elemt] sumDy shape must be (C,) = (3,), got (1,)"),
    # the arch35 tiling takes float32 statistics only beside float16 data (its unit test dtype_not_equal)
    (lambda: aclnn.aclnnBatchNormElemtBackwardGetWorkspaceSize(
        X.astype(bfloat16()), X.astype(bfloat16()), C3, C3, None, C3, C3, C3,
        X.astype(bfloat16()), soc="Ascend950"), 561002,
     "[batch_norm_backward_elemt] stats dtype must equal the input's (bfloat16) on Ascend950 unless the input is "
     "float16 (SyncBatchNormBackwardElemt tiling), got float32"),
])
def test_first_phase_statuses_in_cann_order(call, status, message):
    got, size, executor = call()
    assert (got, size, executor) == (status, 0, None)
    assert aclnn.aclGetRecentErrMsg() == message


def test_aclnn_two_phases_run_the_plan():
    x = make_input((3, 4, 5), "float16")
    dy = make_spread_input((3, 4, 5), "float16")
    mean, invstd, weight, bias = _stats(x, 4, np.float16)
    out = np.empty_like(x)
    status, size, executor = aclnn.aclnnBatchNormElemtGetWorkspaceSize(x, weight, bias, mean, invstd, 1e-5, out)
    assert status == 0 and size == executor.plan.workspace.total_bytes == 16 * 2 ** 20
    assert aclnn.aclnnBatchNormElemt(np.empty(size, np.uint8), size, executor) == 0
    assert np.array_equal(out, normkern.batch_norm_elemt(x, weight, bias, mean, invstd, 1e-5))
    outs = [np.empty(4, np.float16) for _ in range(4)]
    status, size, executor = aclnn.aclnnBatchNormReduceBackwardGetWorkspaceSize(
        dy, x, mean, invstd, weight, True, True, True, *outs, soc="Ascend950")
    assert status == 0 and aclnn.aclnnBatchNormReduceBackward(np.empty(size, np.uint8), size, executor) == 0
    want = normkern.batch_norm_backward_reduce(dy, x, mean, invstd, weight, True, True, True, soc="Ascend950")
    assert all(np.array_equal(o, w) for o, w in zip(outs, want, strict=True))
    grad = np.empty_like(x)
    count = np.array([15, 15], np.int32)
    status, size, executor = aclnn.aclnnBatchNormElemtBackwardGetWorkspaceSize(
        dy, x, mean, invstd, weight, outs[0], outs[1], count, grad, soc="Ascend950")
    assert status == 0 and executor.plan.tiling_key == 0
    assert aclnn.aclnnBatchNormElemtBackward(np.empty(size, np.uint8), size, executor) == 0
    assert np.array_equal(grad, normkern.batch_norm_backward_elemt(dy, x, mean, invstd, weight, outs[0], outs[1],
                                                                   count, soc="Ascend950"))
