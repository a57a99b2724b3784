"""GroupNormBackward's arch35 plan (Ascend950): kernel == simulator bit for bit in every stage-1 mode and
stage-2 path, close to float64, and the orders the code prescribes worked by hand where they differ from
a plain sum."""

import numpy as np
import pytest

import normkern
import tiling
from normkern.ops.group_norm_backward import simulate, task_statistics, task_views
from tests.tiling.test_plan_group_norm_backward_arch35 import UNIT_TESTS

from .conftest import DTYPES, bits
from .test_group_norm_backward import assert_close_to_reference, make_problem

SOC = "Ascend950"
F32 = np.float32

#: (N, C, HxW, group, mode, stage-2 mode, why); the modes are the plan's, asserted below (N = 1 runs no stage 2:
#: stage2Mode keeps its member's initializer, 1)
CASES = [
    (4, 8, 1, 2, 100, 1, "HxW == 1: the channel's own product, no reduction (VFMode0DbetaDsOneHw)"),
    (4, 8, 36, 2, 100, 1, "HxW <= 64: one register per channel"),
    (3, 16, 300, 4, 100, 1, "HxW 300: binary add of 256 + 44, K 0"),
    (3, 1, 9000, 1, 100, 1, "HxW 9000: quotient 8192, binaryAddK 1 (register sums halved in 64-blocks)"),
    (2, 256, 100, 2, 200, 1, "channel full load, C_G 128 > 64: the group sums by binary add too"),
    (2, 400, 64, 2, 200, 1, "channel full load of 64-element channels"),
    (5, 4, 5000, 1, 200, 1, "channel full load, N 5: three workspace rows (the 4-row tree with a zero row)"),
    (2, 4, 20000, 2, 300, 1, "recompute: 4 main loops of 4096, one fold loop with a tail of 3616"),
    (8, 64, 5000, 1, 400, 1, "small N x G: stage 0's channel sums, eight rows (one a batch)"),
    (1, 1, 1100000, 1, 300, 1, "recompute, 256 main loops: the level-1 cache"),
    (1, 8, 36, 2, 100, 1, "N == 1: the task sums straight onto the zeroed outputs (stage2Mode_ stays 1)"),
    (18, 8, 10, 2, 100, 1, "nine rows: the 8-row tree past the quotient"),
    (37, 6, 10, 3, 100, 1, "19 rows: quotient 16, one paired group and a quotient-only one"),
    (70, 4, 4, 2, 100, 1, "35 rows: quotient 32, one paired group, halving over 4"),
    (3800, 8, 1, 2, 100, 2, "1900 rows: stage-2 mode 2 (row tiles folded, cache levels)"),
]


def run(n, c, hxw, group, dtype="float32", out_dtype=None, mask=(True, True, True), seed=0):
    dy, x, mean, rstd, gamma = make_problem(n, c, hxw, group, dtype, seed, out_dtype)
    got = normkern.group_norm_backward(dy, x, mean, rstd, gamma, n, c, hxw, group, mask, soc=SOC)
    plan = tiling.plan_group_norm_backward(n, c, hxw, group, dtype, SOC, out_dtype=out_dtype, output_mask=mask)
    dy3, x3 = task_views(plan, dy, x)
    sim = simulate(plan, dy3, x3, *task_statistics(plan, mean, rstd, gamma))
    want = (sim[0].reshape(dy.shape).astype(dy.dtype), sim[1].astype(mean.dtype), sim[2].astype(mean.dtype))
    return plan, (dy, x, mean, rstd, gamma), got, want


@pytest.mark.parametrize(("n", "c", "hxw", "group", "mode", "stage2", "why"), CASES, ids=[c[-1] for c in CASES])
def test_every_mode_and_stage2_path_is_its_simulator_and_close_to_float64(n, c, hxw, group, mode, stage2, why):
    plan, inputs, got, want = run(n, c, hxw, group)
    assert plan.strategy.value == "arch35" and plan.source == "cann-ops-nn" and plan.deterministic
    assert (plan.mode, plan.tiling_data["stage2Mode"]) == (mode, stage2), why
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(bits(a), bits(b)), str(plan)
    assert_close_to_reference(inputs, got, n, c, hxw, group)


@pytest.mark.parametrize(("dtype", "out_dtype"), [("float16", None), ("bfloat16", None), ("float16", "float32"),
                                                  ("bfloat16", "float32")])
@pytest.mark.parametrize("dims", [(3, 16, 300, 4), (8, 64, 5000, 1), (2, 2, 20000, 1), (1, 8, 36, 2)])
def test_half_dtypes_and_the_950_mixed_pairs(dtype, out_dtype, dims):
    """Keys 2-5: x, dy and dx in half, the statistics and the gradient sums in mean's dtype (cast at the end)."""
    plan, inputs, got, want = run(*dims, dtype, out_dtype)
    key = tiling.group_norm_backward_arch35.DTYPE_KEY[(dtype, out_dtype or dtype)]
    assert plan.tiling_key == plan.mode + key
    assert got[0].dtype == DTYPES[dtype] and got[1].dtype == got[2].dtype == DTYPES[out_dtype or dtype]
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(bits(a), bits(b)), str(plan)


@pytest.mark.parametrize("mask", [(True, False, False), (False, True, False), (False, False, True),
                                  (False, True, True)])
@pytest.mark.parametrize("dims", [(4, 8, 36, 2), (8, 64, 5000, 1)])
def test_output_masks_write_only_what_they_ask_for(mask, dims):
    plan, _, got, want = run(*dims, mask=mask)
    assert [plan.tiling_data[f] for f in ("dxIsRequire", "dgammaIsRequire", "dbetaIsRequire")] == list(mask)
    for m, a, b in zip(mask, got, want, strict=True):
        assert (a is None) if not m else np.array_equal(bits(a), bits(b))


def test_the_channel_register_is_a_pairwise_tree_not_a_running_sum():
    """HxW 64, N 1: grad_beta is one register's Reduce<SUM> of dy; lanes 0 and 32 meet first, so the 1 in
    lane 1 survives (a running sum in float32 loses it: 1e8 + 1 == 1e8)."""
    dy = np.zeros((1, 1, 64), F32)
    dy[0, 0, [0, 1, 32]] = (1e8, 1.0, -1e8)
    assert (F32(1e8) + F32(1.0)) + F32(-1e8) == 0.0
    _, _, gb = normkern.group_norm_backward(dy, np.ones_like(dy), np.zeros(1, F32), np.ones(1, F32), None, 1, 1, 64, 1,
                                            soc=SOC)
    assert gb[0] == 1.0


def test_three_workspace_rows_take_the_four_row_tree():
    """N 6, HxW 1: rows k = dy[2k] + dy[2k+1] = (1e8, 1, -1e8); reduceNMode1LessThan4 adds (r0 + r2) + (r1 + 0)."""
    dy = np.array([1e8, 0.0, 1.0, 0.0, -1e8, 0.0], F32).reshape(6, 1, 1)
    _, _, gb = normkern.group_norm_backward(dy, np.ones_like(dy), np.zeros(6, F32), np.ones(6, F32), None, 6, 1, 1, 1,
                                            soc=SOC)
    assert gb[0] == 1.0


def test_dx_is_x_c2_plus_dy_gamma_rstd_plus_c3():
    """One task, HxW 1, two channels: the sums, C2, C3 and dx as the kernel writes them, in float32 by hand."""
    x = np.array([0.5, 2.0], F32).reshape(1, 2, 1)
    dy = np.array([0.25, -1.5], F32).reshape(1, 2, 1)
    mean, rstd, gamma = F32(1.25), F32(0.75), np.array([1.5, 0.5], F32)
    dx, gg, gb = normkern.group_norm_backward(dy, x, np.array([mean]), np.array([rstd]), gamma, 1, 2, 1, 1, soc=SOC)
    ds, db = x[0, :, 0] * dy[0, :, 0], dy[0, :, 0]
    sum1 = (F32(0.0) + ds[0] * gamma[0]) + (F32(0.0) + ds[1] * gamma[1])   # one register: lanes 0 and 1
    sum2 = (F32(0.0) + db[0] * gamma[0]) + (F32(0.0) + db[1] * gamma[1])
    s = F32(1.0) / F32(2.0)
    c2 = (sum2 * mean + (F32(0.0) - sum1)) * rstd * rstd * rstd * s
    c3 = (F32(0.0) - c2) * mean + (F32(0.0) - sum2 * rstd * s)
    want = (x[0, :, 0] * c2 + dy[0, :, 0] * (gamma * rstd)) + c3
    assert np.array_equal(dx.reshape(-1), want)
    assert np.array_equal(gg, F32(0.0) + (ds + db * -mean) * rstd) and np.array_equal(gb, F32(0.0) + db)


def test_an_empty_input_zeroes_the_gradient_columns_through_the_aclnn_layer():
    """Key 500: the empty kernel zeroes gamma's C columns of grad_gamma and grad_beta (A2 leaves them)."""
    x = np.zeros((0, 6, 4), F32)
    gg, gb = np.full(6, np.nan, F32), np.full(6, np.nan, F32)
    status, size, executor = normkern.aclnn.aclnnGroupNormBackwardGetWorkspaceSize(
        x, x, np.zeros(0, F32), np.zeros(0, F32), np.ones(6, F32), 0, 6, 4, 2, (True, True, True), x.copy(), gg, gb,
        soc=SOC)
    assert status == 0 and executor.plan.tiling_key == 500 and size == 16 << 20
    assert normkern.aclnn.aclnnGroupNormBackward(np.zeros(size, np.uint8), size, executor, None) == 0
    assert np.array_equal(gg, np.zeros(6, F32)) and np.array_equal(gb, np.zeros(6, F32))


RUNNABLE_UNIT_TESTS = [t for t in UNIT_TESTS if t[1] * t[2] * t[3] <= 3_000_000]


@pytest.mark.parametrize("name, n, c, hxw, g, dtype, key", RUNNABLE_UNIT_TESTS, ids=[t[0] for t in RUNNABLE_UNIT_TESTS])
def test_the_ops_nn_unit_test_shapes_run_as_their_simulator(name, n, c, hxw, g, dtype, key):
    """The Regbase unit tests' problems that fit in a test's memory, run end to end on their own keys."""
    plan, inputs, got, want = run(n, c, hxw, g, dtype)
    assert plan.tiling_key == key
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(bits(a), bits(b)), name
    if dtype == "float32":
        assert_close_to_reference(inputs, got, n, c, hxw, g)
