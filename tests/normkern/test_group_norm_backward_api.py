"""GroupNormBackward at the boundary: one test per message in the op_api order, and the caller's workspace."""

import numpy as np
import pytest

import normkern
from normkern import aclnn

from .conftest import DTYPES, bits
from .test_group_norm_backward import SMALL, make_problem

F32, F64 = np.float32, np.float64
DY, X, MEAN, RSTD, GAMMA = make_problem(4, 6, 5, 2, "float32")
OUTS = (np.empty((4, 6, 5), F32), np.empty(6, F32), np.empty(6, F32))


def _args(**changes):
    names = ("gradOut", "input", "mean", "rstd", "gamma", "N", "C", "HxW", "group", "outputMask", "gradInput",
             "gradGammaOut", "gradBetaOut")
    values = dict(zip(names, (DY, X, MEAN, RSTD, GAMMA, 4, 6, 5, 2, (True, True, True), *OUTS), strict=True))
    values.update(changes)
    return [values[n] for n in names]


P = "[group_norm_backward] "
CASES = [
    (dict(rstd=None), 161001, P + "rstd must not be None (null pointer), got None"),
    (dict(outputMask=None, gradOut=None), 161001, P + "gradOut must not be None (null pointer), got None"),
    (dict(outputMask=None), 161002, P + "outputMask must not be None (null pointer), got None"),
    (dict(outputMask=(True, True)), 161002,
     P + "outputMask must be 3 bools (gradInput, gradGammaOut, gradBetaOut), got (True, True)"),
    (dict(gradBetaOut=None, gradOut=DY.astype(F64)), 161002,
     P + "gradBetaOut must not be None when its outputMask entry is true (the op_api returns 161002 here), got None"),
    (dict(gradOut=DY.astype(F64)), 161002, P + "gradOut dtype must be one of float32, float16, bfloat16 on "
     "Ascend910B2, got float64"),
    (dict(mean=MEAN.astype(np.float16)), 161002, P + "mean dtype must be float32 (as gradOut), got float16"),
    (dict(gradGammaOut=np.empty(6, np.float16)), 161002, P + "gradGammaOut dtype must be float32 (as gradOut), "
     "got float16"),
    (dict(group=0), 161002, P + "group must be greater than 0, got 0"),
    (dict(group=4), 161002, P + "group must divide C=6, got 4"),
    (dict(group=1.5), 161002, P + "group must be an int, got 1.5"),
    (dict(HxW=6), 161002, P + "gradOut must have N*C*HxW = 144 elements, got shape (4, 6, 5)"),
    (dict(mean=MEAN[:3]), 161002, P + "mean must have N*group = 8 elements, got shape (3, 2)"),
    (dict(gamma=GAMMA[:5]), 161002, P + "gamma must have C = 6 elements, got shape (5,)"),
    (dict(gradInput=np.empty((4, 30), F32)), 161002, P + "gradInput shape must be (4, 6, 5), got (4, 30)"),
    (dict(gradBetaOut=np.empty((6, 1), F32)), 161002, P + "gradBetaOut shape must be (6,), got (6, 1)"),
]


@pytest.mark.parametrize("changes, status, message", CASES, ids=[c[2][len(P):60] for c in CASES])
def test_first_phase_statuses_and_messages(changes, status, message):
    got, size, executor = aclnn.aclnnGroupNormBackwardGetWorkspaceSize(*_args(**changes))
    assert (got, size, executor) == (status, 0, None)
    assert aclnn.aclGetRecentErrMsg() == message


@pytest.mark.usefixtures("host_templates")  # the A2 code's host model
def test_a2_limits_apply_only_on_a2():
    x = np.zeros((1, 8001, 1), F32)
    stats = np.zeros((1, 1), F32)
    status, _, _ = aclnn.aclnnGroupNormBackwardGetWorkspaceSize(x, x, stats, stats, None, 1, 8001, 1, 1,
                                                                (False, False, False), None, None, None)
    assert status == 161002 and aclnn.aclGetRecentErrMsg() == (P + "group must leave C/group <= 8000 on Ascend910B2 "
                                                                   "(C=8001), got 1")
    status, _, _ = aclnn.aclnnGroupNormBackwardGetWorkspaceSize(x, x, stats, stats, None, 1, 8001, 1, 1,
                                                                (False, False, False), None, None, None, soc="host")
    assert status == 561002 and "carrying capacity 8000" in aclnn.aclGetRecentErrMsg()   # the tiling's own limit
    big = np.zeros((1, 240001, 1), F32)
    status, _, _ = aclnn.aclnnGroupNormBackwardGetWorkspaceSize(big, big, np.zeros((1, 240001), F32),
                                                                np.zeros((1, 240001), F32), None, 1, 240001, 1,
                                                                240001, (False, False, False), None, None, None)
    assert status == 161002 and aclnn.aclGetRecentErrMsg() == P + "C must not exceed 240000 on Ascend910B2, got 240001"


def test_atlas_inference_has_no_kernel():
    got, _, _ = aclnn.aclnnGroupNormBackwardGetWorkspaceSize(*_args(), soc="Ascend310P3")
    assert got == 561003
    assert "soc must support aclnnGroupNormBackward (CANN has no kernel for Atlas inference)" in \
        aclnn.aclGetRecentErrMsg()


@pytest.mark.parametrize(("soc", "dtype", "stats", "status", "text"), [
    ("Ascend910", "bfloat16", "bfloat16", 161002, "dtype must be one of float32, float16 on Ascend910"),
    ("Ascend910", "float16", "float32", 161002, "mean dtype must be float16 (as gradOut), got float32"),
    ("Ascend950", "float32", "float16", 161002, "mean dtype must be one of float32 beside a float32 gradOut, got "
                                                "float16"),
    ("Ascend950", "bfloat16", "float32", 0, ""),
    ("Ascend950", "float16", "float32", 0, ""),
    ("Ascend910", "float16", "float16", 0, ""),
])
def test_the_product_dtype_rules_of_atlas_training_and_950(soc, dtype, stats, status, text):
    """Atlas training: no bfloat16, mean in the data's dtype; 950: the pairs (f32, f32), (f16, f16), (f16, f32),
    (bf16, bf16), (bf16, f32) of the seed's table."""
    dy, x, mean, rstd, gamma = make_problem(3, 4, 6, 2, dtype)
    cast = DTYPES[stats]
    got, _, _ = aclnn.aclnnGroupNormBackwardGetWorkspaceSize(
        dy, x, mean.astype(np.float32).astype(cast), rstd.astype(np.float32).astype(cast),
        gamma.astype(np.float32).astype(cast), 3, 4, 6, 2, (True, True, True), np.empty_like(x),
        np.empty(4, cast), np.empty(4, cast), soc=soc)
    message = aclnn.aclGetRecentErrMsg() or ""
    assert got == status, message
    assert text in message


def test_empty_input_succeeds_after_the_checks_with_no_workspace():
    empty = np.zeros((0, 6, 5), F32)
    stats = np.zeros((0, 2), F32)
    status, size, executor = aclnn.aclnnGroupNormBackwardGetWorkspaceSize(
        empty, empty, stats, stats, None, 0, 6, 5, 2, (True, True, True), np.empty_like(empty), np.full(6, 7, F32),
        np.full(6, 7, F32))
    assert (status, size) == (0, 0) and aclnn.aclnnGroupNormBackward(None, 0, executor) == 0
    bad = aclnn.aclnnGroupNormBackwardGetWorkspaceSize(empty, empty, stats, stats, None, 0, 6, 5, 4, None, None,
                                                       None, None)
    assert bad[0] == 161002     # unlike FastBatchNormBackward, the checks come first


@pytest.mark.usefixtures("host_templates")
def test_partial_rows_go_to_the_callers_workspace():
    dy, x, mean, rstd, gamma = make_problem(5, 4, 16, 2, "float32")
    outs = (np.empty_like(x), np.full(4, np.nan, F32), np.full(4, np.nan, F32))
    status, size, executor = aclnn.aclnnGroupNormBackwardGetWorkspaceSize(dy, x, mean, rstd, gamma, 5, 4, 16, 2,
                                                                          (True, True, True), *outs, soc=SMALL)
    plan = executor.plan
    assert status == 0 and plan.pair_rows == 3 and size == 4096 + 2 * 3 * 4 * 4
    workspace = np.full(size + 8, 0xAB, np.uint8)
    assert aclnn.aclnnGroupNormBackward(workspace, size, executor) == 0
    assert (workspace[:4096] == 0xAB).all() and (workspace[size:] == 0xAB).all()
    rows = workspace[4096:size].view(F32).reshape(2, 3, 4)      # dgamma rows, dbeta rows: batches (0,1), (2,3), (4)
    dy64, x64 = dy.astype(F64).reshape(5, 2, 2, 16), x.astype(F64).reshape(5, 2, 2, 16)
    x_hat = (x64 - mean.astype(F64).reshape(5, 2, 1, 1)) * rstd.astype(F64).reshape(5, 2, 1, 1)
    per_batch = np.stack([(dy64 * x_hat).sum(-1), dy64.sum(-1)]).reshape(2, 5, 4)
    pairs = np.stack([per_batch[:, 0] + per_batch[:, 1], per_batch[:, 2] + per_batch[:, 3], per_batch[:, 4]], axis=1)
    np.testing.assert_allclose(rows, pairs, rtol=1e-5, atol=1e-5)
    expected = normkern.group_norm_backward(dy, x, mean, rstd, gamma, 5, 4, 16, 2, soc=SMALL)
    assert all(np.array_equal(bits(a), bits(b)) for a, b in zip(outs, expected, strict=True))


def test_too_small_workspace_is_refused_without_writing():
    outs = (np.full(X.shape, np.nan, F32), np.full(6, np.nan, F32), np.full(6, np.nan, F32))
    _, size, executor = aclnn.aclnnGroupNormBackwardGetWorkspaceSize(*_args(gradInput=outs[0], gradGammaOut=outs[1],
                                                                            gradBetaOut=outs[2]))
    assert aclnn.aclnnGroupNormBackward(np.zeros(size - 4, np.uint8), size - 4, executor) == 161002
    assert all(np.isnan(o).all() for o in outs)


def test_pythonic_errors_raise_with_the_status():
    with pytest.raises(normkern.InvalidParameterError) as info:
        normkern.group_norm_backward(DY, X, MEAN, RSTD, GAMMA, 4, 6, 5, 4)
    assert info.value.status == 161002 and str(info.value) == P + "group must divide C=6, got 4"
    with pytest.raises(normkern.InvalidParameterError, match="arrival_seed must be a non-negative int or None"):
        normkern.group_norm_backward(DY, X, MEAN, RSTD, GAMMA, 4, 6, 5, 2, arrival_seed=-2)
    with pytest.raises(normkern.InvalidParameterError, match="strategy must be one of empty, cann, atomic"):
        normkern.group_norm_backward(DY, X, MEAN, RSTD, GAMMA, 4, 6, 5, 2, strategy="fast")
