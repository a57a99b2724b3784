"""The two-phase aclnn calls: status codes in CANN's check order, and the caller's workspace."""

import numpy as np
import pytest

from normkern import aclnn
from normkern.ops.batch_norm_stats import simulate

from .conftest import TINY, bits, make_input

F32 = np.float32
SYS = TINY.system_workspace_bytes


def _outputs(c=3):
    return np.full(c, np.nan, F32), np.full(c, np.nan, F32)


@pytest.mark.parametrize("args, status, message", [
    ((None, 1e-5, None, None), 161001, "[batch_norm_stats] input must not be None (null pointer), got None"),
    # a null output is reported before the input's bad dtype, as CheckNotNull runs first
    ((make_input((2, 3), "float32").astype(np.float64), 1e-5, None, np.zeros(3, F32)), 161001,
     "[batch_norm_stats] mean must not be None (null pointer), got None"),
    # the dtype check comes before the shape check
    ((np.zeros(5, np.float64), 1e-5, np.zeros(3, F32), np.zeros(3, F32)), 161002,
     "[batch_norm_stats] input dtype must be one of float32, float16 on Ascend910B2, got float64"),
    ((np.zeros(5, F32), 1e-5, np.zeros(3, F32), np.zeros(3, F32)), 161002,
     "[batch_norm_stats] input must have rank 2 to 8, got rank 1 (shape (5,))"),
    ((np.zeros((2, 3), F32), 1e-5, np.zeros(3, np.float16), np.zeros(2, F32)), 161002,
     "[batch_norm_stats] mean dtype must be float32, got float16"),
])
def test_first_phase_statuses_in_cann_order(args, status, message):
    got, size, executor = aclnn.aclnnBatchNormStatsGetWorkspaceSize(*args)
    assert (got, size, executor) == (status, 0, None)
    assert aclnn.aclGetRecentErrMsg() == message
    assert aclnn.aclGetRecentErrMsg() is None


@pytest.mark.usefixtures("host_templates")  # TINY is a host-arch SoC; its rows strategies have the workspace
def test_partials_really_go_to_the_callers_workspace():
    x = make_input((40, 3, 100), "float32")
    mean, invstd = _outputs()
    status, size, executor = aclnn.aclnnBatchNormStatsGetWorkspaceSize(x, 1e-5, mean, invstd, soc=TINY)
    plan = executor.plan
    # two float32 regions of (5 cores, 3 channels), each 60 B rounded up to 64 B
    assert status == 0 and plan.strategy.value == "split_r" and size == plan.workspace.total_bytes == SYS + 128
    workspace = np.full(size + 8, 0xAB, np.uint8)
    assert aclnn.aclnnBatchNormStats(workspace, size, executor) == aclnn.ACLNN_SUCCESS
    assert (workspace[:SYS] == 0xAB).all() and (workspace[size:] == 0xAB).all()
    user = workspace[SYS:size].view(F32)
    sums = user[:plan.block_dim * 3].reshape(plan.block_dim, 3)
    total = np.zeros(3, F32)
    for core in range(plan.block_dim):  # the pass-1 partials of each core, added in core order
        total += sums[core]
    assert np.array_equal(bits(total / F32(4000)), bits(mean))
    sim_mean, sim_invstd = simulate(plan, x, 1e-5)
    assert np.array_equal(bits(mean), bits(sim_mean)) and np.array_equal(bits(invstd), bits(sim_invstd))


@pytest.mark.usefixtures("host_templates")
def test_nan_filled_workspace_changes_nothing():
    x = make_input((40, 3, 100), "float16")
    runs = []
    for fill in (0x00, 0xFF):  # 0xFFFFFFFF is a NaN float32
        mean, invstd = _outputs()
        _, size, executor = aclnn.aclnnBatchNormStatsGetWorkspaceSize(x, 1e-5, mean, invstd, soc=TINY)
        assert aclnn.aclnnBatchNormStats(np.full(size, fill, np.uint8), size, executor) == 0
        runs.append((mean, invstd))
    assert np.array_equal(bits(runs[0][0]), bits(runs[1][0])) and not np.isnan(runs[1][1]).any()


@pytest.mark.parametrize("make_call, status, message", [
    (lambda ex, size: (np.zeros(size - 4, np.uint8), size - 4, ex), 161002,
     "[batch_norm_stats] workspaceSize must be at least the 4224 bytes the first phase returned, got 4220"),
    (lambda ex, size: (np.zeros(size - 4, np.uint8), size, ex), 161002,
     "[batch_norm_stats] workspace must hold workspaceSize=4224 bytes, got 4220 bytes"),
    (lambda ex, size: (None, size, ex), 161001,
     "[batch_norm_stats] workspace must not be None when 4224 bytes are required, got None"),
    (lambda ex, size: (np.zeros(size, np.float32), size, ex), 161002,
     "[batch_norm_stats] workspace must be a writeable contiguous 1-D uint8 numpy array, got float32 array of "
     "shape (4224,)"),
    (lambda ex, size: (np.zeros(size + 1, np.uint8)[1:], size, ex), 161002,
     "[batch_norm_stats] workspace must start at a 4-byte aligned address"),
    (lambda ex, size: (np.zeros(size, np.uint8), size, None), 161001,
     "[batch_norm_stats] executor must not be None (null pointer), got None"),
])
@pytest.mark.usefixtures("host_templates")
def test_second_phase_refuses_bad_workspaces_without_writing(make_call, status, message):
    x = make_input((40, 3, 100), "float32")
    mean, invstd = _outputs()
    _, size, executor = aclnn.aclnnBatchNormStatsGetWorkspaceSize(x, 1e-5, mean, invstd, soc=TINY)
    assert aclnn.aclnnBatchNormStats(*make_call(executor, size)) == status
    assert aclnn.aclGetRecentErrMsg().startswith(message)
    assert np.isnan(mean).all() and np.isnan(invstd).all()


def test_empty_input_runs_with_no_workspace():
    mean, invstd = _outputs()
    status, size, executor = aclnn.aclnnBatchNormStatsGetWorkspaceSize(np.zeros((0, 3, 5), F32), 1e-5, mean, invstd)
    assert (status, size) == (0, 0)
    assert aclnn.aclnnBatchNormStats(None, 0, executor) == 0
    assert np.array_equal(mean, np.zeros(3)) and np.isnan(invstd).all()


def test_default_a2_workspace_includes_the_16mib_system_region():
    x = make_input((256, 4, 7, 7), "float32")
    mean, invstd = _outputs(4)
    status, size, executor = aclnn.aclnnBatchNormStatsGetWorkspaceSize(x, 1e-5, mean, invstd)
    assert status == 0 and size == 16 * 1024 * 1024 + 2 * 48 * 4 * 4
    assert aclnn.aclnnBatchNormStats(np.empty(size, np.uint8), size, executor) == 0
    assert not np.isnan(mean).any()
