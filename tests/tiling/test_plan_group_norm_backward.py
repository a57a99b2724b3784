"""GroupNormGrad A2 host tiling: the worked examples of the research notes, the code's uint32 rules, invariants."""

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiling import GroupNormBackwardStrategy as S
from tiling import Plan, TilingError, get_soc, plan_group_norm_backward
from tiling.group_norm_backward import ceil_u32, div_ceil_u32

#: GroupNormGradTilingData, as group_norm_grad_tiling.h declares it.
STRUCT = (
    "Tiling_key", "N", "C", "HXW", "G", "NXG", "C_G", "task_num_per_core", "task_num_per_tail_core", "tail_core",
    "mode1_ub_cap_C_num", "mode1_ub_iter_C_num", "mode1_ub_tail_C_num", "mode2_ub_capacity_ele",
    "mode2_ub_iteration_num", "mode2_ub_tail_num", "workSpaceSize", "stage2CoreUsed", "castEleNum", "tailCastNum",
    "coreBatchParts", "coreBatchPartsTailRepeat", "repeatTime4Stage2", "dx_is_require", "dgamma_is_require",
    "dbeta_is_require")

MiB16 = 16 * 1024 * 1024


def test_worked_example_mode3_workspace_path():
    # N=12, C=64, HxW=128*128, G=32, fp32: key 10, MODE_3, 48 cores x 8 tasks; chunk 16256, 2 chunks, tail 128;
    # stage 2: castEleNum 64, 1 stage-2 core, coreBatchParts 3; workspace 16 MiB + 2 * 6 * 64 * 4.
    plan = plan_group_norm_backward(12, 64, 128 * 128, 32, "float32", "Ascend910B2")
    td = plan.tiling_data
    assert (plan.tiling_key, plan.mode, plan.block_dim, plan.core_split.describe()) == (10, 3, 48, "48x8")
    assert (td["mode2_ub_capacity_ele"], td["mode2_ub_iteration_num"], td["mode2_ub_tail_num"]) == (16256, 2, 128)
    assert (td["castEleNum"], td["stage2CoreUsed"], td["coreBatchParts"]) == (64, 1, 3)
    assert plan.workspace.total_bytes == 16780288 == MiB16 + 2 * 384 * 4
    assert tuple(td) == STRUCT and plan.source == "cann-ops-nn"


def test_worked_example_mode2_n2_half():
    # N=2, C=320, G=32, HxW=4096, fp16: key 1 (N <= 2), MODE_2, 32 cores; mode1 cap 2, 5 iterations;
    # 5 stage-2 cores; workspace 16 MiB + 2 * 320 * 4.
    plan = plan_group_norm_backward(2, 320, 4096, 32, "float16", "Ascend910B2")
    td = plan.tiling_data
    assert (plan.tiling_key, plan.mode, plan.block_dim) == (1, 2, 32)
    assert (td["mode1_ub_cap_C_num"], td["mode1_ub_iter_C_num"], td["stage2CoreUsed"]) == (2, 5, 5)
    assert plan.workspace.total_bytes == MiB16 + 2560


def test_worked_example_mode0_bf16():
    # N=8, C=32, G=8, HxW=49, bf16: key 12, MODE_0, 32 cores, 51 groups in UB; workspace 16 MiB + 2 * 4 * 32 * 4.
    plan = plan_group_norm_backward(8, 32, 49, 8, "bfloat16", "Ascend910B2")
    assert (plan.tiling_key, plan.mode, plan.block_dim, plan.mode0_groups) == (12, 0, 32, 51)
    assert plan.workspace.total_bytes == MiB16 + 1024


def test_core_split_counts_the_bigger_cores_as_tail_core():
    # NxG = 49 on 48 cores: 2 tasks per core, 25 cores used, the first 24 ("tail_core") take 2, the last 1.
    plan = plan_group_norm_backward(49, 8, 16, 1, "float32", "Ascend910B2")
    td = plan.tiling_data
    assert (td["task_num_per_core"], td["task_num_per_tail_core"], td["tail_core"], plan.block_dim) == (2, 1, 24, 25)
    assert plan.core_split.ranges()[:2] == ((0, 2), (2, 2)) and plan.core_split.ranges()[-1] == (48, 1)


def test_modes_follow_the_capacities():
    assert plan_group_norm_backward(4, 8, 1, 2, "float32", "Ascend910B2").mode == 5
    assert plan_group_norm_backward(4, 8, 1024, 2, "float32", "Ascend910B2").mode == 0
    assert plan_group_norm_backward(4, 8, 16000, 8, "float32", "Ascend910B2").mode == 0     # C_G = 1: one group
    assert plan_group_norm_backward(4, 16, 10000, 8, "float32", "Ascend910B2").mode == 1    # one of two channels
    assert plan_group_norm_backward(4, 64, 4096, 2, "float32", "Ascend910B2").mode == 2
    assert plan_group_norm_backward(4, 8, 16300, 8, "float32", "Ascend910B2").mode == 3


def test_uint32_helpers_wrap_as_the_code():
    assert ceil_u32(0, 64) == 0            # ((0 - 1) / 64 + 1) * 64 wraps to 0 in uint32
    assert div_ceil_u32(5, 0) == 0 and ceil_u32(65, 64) == 128 and div_ceil_u32(2**32 + 3, 2) == 2


def test_keys_dtypes_and_strategies():
    for dtype, key in (("float32", 10), ("float16", 11), ("bfloat16", 12)):
        assert plan_group_norm_backward(3, 8, 64, 2, dtype, "Ascend910B2").tiling_key == key
    atomic = plan_group_norm_backward(3, 8, 64, 2, "float32", "Ascend910B2", "atomic")
    assert atomic.tiling_key == 0 and not atomic.deterministic and atomic.source == "modeled"
    assert plan_group_norm_backward(2, 8, 64, 2, "float32", "Ascend910B2", "atomic").deterministic
    default = plan_group_norm_backward(3, 8, 64, 2, "float32", "Ascend910B2")
    assert default.strategy is S.CANN and default.deterministic and "non-deterministic" not in str(default)
    assert str(atomic).endswith("non-deterministic")


def test_atlas_training_and_950_get_modeled_plans_with_their_figures():
    """Atlas training by default; the 950 when asked for (its default is the arch35 code)."""
    for soc, cores, system, strategy in (("Ascend950", 64, 16 << 20, "cann"), ("Ascend910", 32, 2 << 20, None)):
        plan = plan_group_norm_backward(8, 64, 196, 8, "float16", soc, strategy)
        assert plan.source == "modeled" and plan.tiling_key is None and plan.soc.name == soc
        assert plan.block_dim == min(cores, 8 * 8) and plan.workspace.system_bytes == system
        assert plan.tiling_data["NXG"] == 64 and plan.deterministic
    with pytest.raises(TilingError, match="dtype must be one of float32, float16 on Ascend910"):
        plan_group_norm_backward(8, 64, 196, 8, "bfloat16", "Ascend910")
    assert plan_group_norm_backward(8, 64, 196, 8, "bfloat16", "Ascend950", out_dtype="float32").out_dtype == \
        "float32"


def test_refusals():
    with pytest.raises(TilingError, match="channelPerGroup 8001 is over the operator's carrying capacity 8000"):
        plan_group_norm_backward(2, 8001, 4, 1, "float32", "host", "cann")
    assert plan_group_norm_backward(2, 8001, 4, 1, "float32", "host").strategy.value == "groups"  # no such limit
    one_core = dataclasses.replace(get_soc("host"), vector_cores=1)
    with pytest.raises(TilingError, match="castEleNum = Ceil\\(DivCeil\\(C, coreNumUsed / 2\\), 64\\) is 0"):
        plan_group_norm_backward(3, 8, 64, 2, "float32", one_core, "cann")
    assert plan_group_norm_backward(3, 8, 64, 2, "float16", one_core).block_dim == 1


@given(st.integers(1, 40), st.integers(1, 8), st.integers(1, 5000), st.integers(1, 4),
       st.sampled_from(["float32", "float16", "bfloat16"]), st.sampled_from(["Ascend910B2", "Ascend910B4", "host"]),
       st.sampled_from([None, "atomic"]))
def test_every_plan_is_consistent(n, groups, hxw, c_g, dtype, soc, strategy):
    if soc == "host" and strategy is None:  # the A2 code's host model (the host's own plan: test_group_norm_groups)
        strategy = "cann"
    plan = plan_group_norm_backward(n, groups * c_g, hxw, groups, dtype, soc, strategy)
    assert Plan.from_json(plan.to_json()) == plan
    td = plan.tiling_data
    assert plan.core_split.total == n * groups and plan.block_dim == plan.core_split.parts
    small_cores = plan.block_dim - td["tail_core"]
    assert td["task_num_per_core"] * td["tail_core"] + td["task_num_per_tail_core"] * small_cores == n * groups
    assert plan.deterministic == (strategy in (None, "cann") or n <= 2)
    if plan.mode == 3:
        assert (td["mode2_ub_iteration_num"] - 1) * td["mode2_ub_capacity_ele"] + td["mode2_ub_tail_num"] == hxw
    rows = (n + 1) // 2 if strategy in (None, "cann") and n > 2 else 0
    user = 2 * rows * plan.c * 4 if rows else (0 if dtype == "float32" else 2 * plan.c * 4)
    assert plan.workspace.user_bytes == user
