"""FastBatchNormBackward at the boundary: one test per message, the aclnn check order and workspace."""

import numpy as np
import pytest

import normkern
from normkern import aclnn

from .conftest import bits
from .test_fast_batch_norm_backward import EPS, SMALL, make_problem

F32, F64 = np.float32, np.float64
DY, X, W, RM, RV, SM, SI = make_problem((4, 3, 5), "float32")
OUTS = (np.empty((4, 3, 5), F32), np.empty(3, F32), np.empty(3, F32))
MASK = (True, True, True)


def _args(**changes):
    """aclnn argument list (gradOut .. gradBias) with some replaced."""
    names = ("gradOut", "input", "weight", "runningMean", "runningVar", "saveMean", "saveInvstd", "training", "eps",
             "outputMask", "version", "gradInput", "gradWeight", "gradBias")
    values = dict(zip(names, (DY, X, W, RM, RV, SM, SI, True, EPS, MASK, 0, *OUTS), strict=True))
    values.update(changes)
    return [values[n] for n in names]


P = "[fast_batch_norm_backward] "
CASES = [
    (dict(gradOut=None), 161001, P + "gradOut must not be None (null pointer), got None"),
    (dict(input=None, outputMask=None), 161001, P + "input must not be None (null pointer), got None"),
    (dict(gradOut=[[1.0]]), 161002, P + "gradOut must be a numpy.ndarray, got list"),
    (dict(outputMask=None), 161001, P + "outputMask must not be None (null pointer), got None"),
    (dict(outputMask=()), 161001, P + "outputMask must have at least 1 entry (size < 1 is a null array), got size 0"),
    (dict(outputMask=(True, True)), 161002,
     P + "outputMask must be 3 bools (gradInput, gradWeight, gradBias), got (True, True)"),
    (dict(gradWeight=None, gradOut=DY.astype(F64)), 161001, P + "gradWeight must not be None (null pointer), got None"),
    (dict(gradOut=DY.astype(F64)), 161002, P + "gradOut dtype must be one of float32, float16, bfloat16, got float64"),
    (dict(input=X.astype(np.float16)), 161002, P + "input dtype must equal gradOut's (float32), got float16"),
    (dict(gradBias=np.empty(3, F64)), 161002,
     P + "gradBias dtype must be one of float32, float16, bfloat16, got float64"),
    (dict(saveInvstd=SI.astype(F64), weight=W[:2]), 161002,
     P + "saveInvstd dtype must be one of float32, float16, bfloat16, got float64"),
    (dict(input=X[0], gradOut=DY[0]), 161002, P + "gradInput shape must equal gradOut's (3, 5), got (4, 3, 5)"),
    (dict(input=X.reshape(60), gradOut=DY.reshape(60)), 161002,
     P + "input must have rank 2 to 8, got rank 1 (shape (60,))"),
    (dict(gradOut=DY[:, :, :4]), 161002, P + "gradOut shape must equal input's (4, 3, 5), got (4, 3, 4)"),
    (dict(weight=W[:2]), 161002, P + "weight shape must be (C,) = (3,), got (2,)"),
    (dict(runningVar=RV[None]), 161002, P + "runningVar shape must be (C,) = (3,), got (1, 3)"),
    (dict(saveMean=SM[:2]), 161002, P + "saveMean shape must be (C,) = (3,), got (2,)"),
    (dict(gradWeight=np.empty(4, F32)), 161002, P + "gradWeight shape must be (C,) = (3,), got (4,)"),
    (dict(training=1), 161002, P + "training must be a bool, got 1"),
    (dict(eps="tiny"), 161002, P + "eps must be a real number, got 'tiny'"),
    (dict(version=True), 161002, P + "version must be an int (CANN ignores its value), got True"),
]


@pytest.mark.parametrize("changes, status, message", CASES, ids=[c[2][len(P):60] for c in CASES])
def test_first_phase_statuses_and_messages(changes, status, message):
    got, size, executor = aclnn.aclnnFastBatchNormBackwardGetWorkspaceSize(*_args(**changes))
    assert (got, size, executor) == (status, 0, None)
    assert aclnn.aclGetRecentErrMsg() == message


def test_unsupported_soc_has_no_kernel():
    got, _, _ = aclnn.aclnnFastBatchNormBackwardGetWorkspaceSize(*_args(), soc="Ascend950")
    assert got == 561003
    assert aclnn.aclGetRecentErrMsg() == (P + "soc must support aclnnFastBatchNormBackward (CANN has no kernel for "
                                          "Ascend 950PR/950DT), got Ascend950")


def test_tiling_refusal_is_an_inner_tiling_error():
    """C = 48k + 1 above 2**24: the float32 channel split would hand the last core one channel too many."""
    x = np.zeros((1, 48 * 349526 + 1, 1, 1), np.float16)
    got, _, _ = aclnn.aclnnFastBatchNormBackwardGetWorkspaceSize(x, x, None, None, None, None, None, True, EPS,
                                                                (False, False, False), 0, None, None, None)
    assert got == 561002 and "tail of 349527 for 349526 per core" in aclnn.aclGetRecentErrMsg()


def test_empty_input_succeeds_before_the_shape_and_mask_checks():
    """CANN's op_api returns before any check; normkern checks dtypes and attributes first (a wrong-typed empty
    call is refused as a full one), then takes the same early exit (a null mask is not looked at)."""
    empty = np.zeros((0, 3, 5), np.float32)
    status, size, executor = aclnn.aclnnFastBatchNormBackwardGetWorkspaceSize(
        empty, empty, None, None, None, None, None, True, EPS, None, 0, None, None, None)
    assert (status, size) == (0, 0) and executor.plan.strategy.value == "empty"
    assert aclnn.aclnnFastBatchNormBackward(None, 0, executor) == 0
    status, _, _ = aclnn.aclnnFastBatchNormBackwardGetWorkspaceSize(
        empty.astype(F64), empty, None, None, None, None, None, True, EPS, None, 0, None, None, None)
    assert status == 161002


def test_pythonic_errors_raise_with_the_status():
    with pytest.raises(normkern.InvalidParameterError) as info:
        normkern.fast_batch_norm_backward(DY, X, W[:2], RM, RV, SM, SI, True, EPS)
    assert info.value.status == 161002 and str(info.value) == P + "weight shape must be (C,) = (3,), got (2,)"
    with pytest.raises(normkern.InvalidParameterError, match=r"out must be a \(grad_input, grad_weight, grad_bias\)"):
        normkern.fast_batch_norm_backward(DY, X, W, RM, RV, SM, SI, True, EPS, out=OUTS[:2])
    with pytest.raises(normkern.InvalidParameterError, match="strategy must be one of empty, planes, full_load"):
        normkern.fast_batch_norm_backward(DY, X, W, RM, RV, SM, SI, True, EPS, strategy="fast")


def test_read_only_grad_input_is_refused_and_nothing_is_written():
    gi = np.full(X.shape, np.nan, F32)
    gi.flags.writeable = False
    gw = np.full(3, np.nan, F32)
    status, _, _ = aclnn.aclnnFastBatchNormBackwardGetWorkspaceSize(*_args(gradInput=gi, gradWeight=gw))
    assert status == 161002 and aclnn.aclGetRecentErrMsg() == P + "gradInput must be writeable, got a read-only array"
    assert np.isnan(gw).all()


@pytest.mark.usefixtures("host_templates")  # SMALL is a host-arch SoC
def test_cross_core_partials_go_to_the_callers_workspace():
    dy, x, w, rm, rv, sm, si = make_problem((4, 7, 5000), "float32")
    outs = (np.empty(x.shape, F32), np.full(7, np.nan, F32), np.full(7, np.nan, F32))
    status, size, executor = aclnn.aclnnFastBatchNormBackwardGetWorkspaceSize(
        dy, x, w, rm, rv, sm, si, True, EPS, MASK, 0, *outs, soc=SMALL)
    plan = executor.plan
    assert status == 0 and plan.strategy.value == "split_load_cross_core"
    sys_bytes = plan.workspace.system_bytes
    assert size == sys_bytes + 2 * 5 * 8 * 4
    workspace = np.full(size + 16, 0xAB, np.uint8)
    assert aclnn.aclnnFastBatchNormBackward(workspace, size, executor) == 0
    assert (workspace[:sys_bytes] == 0xAB).all() and (workspace[size:] == 0xAB).all()
    slots = workspace[sys_bytes:size].view(F32).reshape(2, 5, 8)[:, :, 0]  # dbias, dweight slot of each core
    for job in plan.jobs():
        if job.group_size > 1 and job.core == job.group_first:
            total = F32(0.0)
            for member in range(job.group_first, job.group_first + job.group_size):
                total = total + slots[0, member]
            assert bits(np.array([total])) == bits(outs[2][job.channel_start:job.channel_start + 1])
    expected = normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, si, True, EPS, soc=SMALL)
    assert all(np.array_equal(bits(a), bits(b)) for a, b in zip(outs, expected, strict=True))


def test_too_small_workspace_is_refused_without_writing():
    dy, x, w, rm, rv, sm, si = make_problem((4, 7, 5000), "float32")
    outs = (np.full(x.shape, np.nan, F32), np.full(7, np.nan, F32), np.full(7, np.nan, F32))
    _, size, executor = aclnn.aclnnFastBatchNormBackwardGetWorkspaceSize(
        dy, x, w, rm, rv, sm, si, True, EPS, MASK, 0, *outs, soc=SMALL)
    assert aclnn.aclnnFastBatchNormBackward(np.zeros(size - 4, np.uint8), size - 4, executor) == 161002
    assert all(np.isnan(o).all() for o in outs)


def test_default_a2_workspace_is_16_mib():
    status, size, executor = aclnn.aclnnFastBatchNormBackwardGetWorkspaceSize(*_args())
    assert status == 0 and size == 16 * 1024 * 1024 and executor.plan.tiling_key == 30001
    assert aclnn.aclnnFastBatchNormBackward(np.empty(size, np.uint8), size, executor) == 0
    ref = normkern.fast_batch_norm_backward(DY, X, W, RM, RV, SM, SI, True, EPS)
    assert all(np.array_equal(bits(a), bits(b)) for a, b in zip(OUTS, ref, strict=True))
