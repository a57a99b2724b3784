"""Gather-stats plans: the 950 SyncBatchNormGatherStatsFused host tiling, reproduced, and its model."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiling import GatherStatsStrategy as G
from tiling import Plan, TilingError, plan_batch_norm_gather_stats_with_counts

MiB16 = 16 * 1024 * 1024


def test_common_template_hand_computed():
    # C split: blockFormer = ceil(2048/64) = 32, cFormerAlignM = 32, cBufferByteSize = 128.
    # maxUB = 245760 - 128*4 - 1024 = 244224; start 244224 // (32*8 + 36) = 836:
    #   836: 2*107008 + 3360 + 26880 = 244256 > 244224, so 835: 2*106880 + 3360 + 26880 = 244000 fits.
    plan = plan_batch_norm_gather_stats_with_counts(8, 2048, "float32", "Ascend950")
    assert plan.strategy is G.COMMON and plan.tiling_key == 101 and plan.source == "cann-ops-nn"
    td = plan.tiling_data
    assert (td["blockFormer"], td["blockNum"], td["blockTail"]) == (32, 64, 32)
    assert (td["ubFormer"], td["wholeBufferByteSize"], td["nBufferByteSize"], td["nBrcbBufferByteSize"]) == \
        (835, 106880, 3360, 26880)
    assert (td["ubLoop"], td["ubTail"], td["wholeBufferElemNums"]) == (1, 8, 835 * 32)
    assert plan.block_dim == 64 and plan.workspace.total_bytes == 64 * 4 + MiB16


def test_half_dtype_aligns_to_16_and_changes_the_key():
    plan = plan_batch_norm_gather_stats_with_counts(8, 256, "float16", "Ascend950")
    td = plan.tiling_data
    assert plan.tiling_key == 102 and (td["cFormerAlignV_"], td["cFormerAlignM_"]) == (8, 16)
    assert plan_batch_norm_gather_stats_with_counts(8, 256, "bfloat16", "Ascend950").tiling_key == 103


def test_many_devices_select_first_axis_common():
    # C=64 < N=300 and N > 255 rule out both channel-split templates.
    plan = plan_batch_norm_gather_stats_with_counts(300, 64, "float32", "Ascend950")
    assert plan.strategy is G.FIRST_AXIS_COMMON and plan.tiling_key == 301
    assert [r.strategy for r in plan.rejected] == ["empty", "common", "workspace"]
    td = plan.tiling_data
    # blockFormer = ceil(300/64) = 5, blockNum = 60, tail 5; cAlignM = 64.
    assert (td["blockFormer"], td["blockNum"], td["blockTail"], td["cAlignM"]) == (5, 60, 5, 64)
    assert plan.workspace.total_bytes == (60 + 2) * 64 * 4 + 4 * 64 + MiB16


def test_first_axis_workspace_when_c_is_large():
    plan = plan_batch_norm_gather_stats_with_counts(300, 250, "float32", "Ascend950")
    assert plan.strategy is G.FIRST_AXIS_COMMON
    wide = plan_batch_norm_gather_stats_with_counts(6000, 5008, "float32", "Ascend950")
    assert wide.strategy is G.FIRST_AXIS_WORKSPACE and wide.tiling_key == 401
    td = wide.tiling_data
    # cAlignV = 5008 (16-aligned); buffer = (245760 - 1024) // 3 // 4 // 16 * 16 = 20384 >= 5008.
    assert (td["cAlignV"], td["ubFormer"], td["ubLoop"], td["ubTail"]) == (5008, 5008, 1, 5008)
    assert wide.workspace.total_bytes == (td["blockNum"] + 2) * 5008 * 4 + MiB16


def test_workspace_template_for_very_many_channels():
    plan = plan_batch_norm_gather_stats_with_counts(4, 300000, "float32", "Ascend950")
    assert plan.strategy is G.WORKSPACE and plan.tiling_key == 201
    td = plan.tiling_data
    # blockFormer = ceil(300000/64) = 4688; buffer (245760-1024)//5//4//16*16 = 12224 >= 4688.
    assert (td["blockFormer"], td["blockTail"], td["ubFormerOfFormer"], td["ubLoopOfFormer"]) == (4688, 4656, 4688, 1)


def test_other_socs_are_modeled():
    plan = plan_batch_norm_gather_stats_with_counts(8, 2048, "float32", "Ascend910B2")
    assert plan.source == "modeled" and plan.tiling_key is None and plan.block_dim == 48
    assert plan.workspace.total_bytes == 48 * 4 + MiB16
    assert plan_batch_norm_gather_stats_with_counts(8, 2048, "float32", "host").workspace.system_bytes == 0


def test_forced_template_that_cannot_run():
    with pytest.raises(TilingError, match="strategy common cannot run this problem: C=64 < N=300 and N > 255"):
        plan_batch_norm_gather_stats_with_counts(300, 64, "float32", "Ascend950", "common")


@given(st.integers(0, 3000), st.integers(0, 6000), st.sampled_from(["float32", "float16", "bfloat16"]),
       st.sampled_from(["Ascend950", "Ascend910B2", "host"]),
       st.sampled_from([None, "common", "workspace", "first_axis_common", "first_axis_workspace"]))
def test_every_plan_is_consistent(n, c, dtype, soc, strategy):
    try:
        plan = plan_batch_norm_gather_stats_with_counts(n, c, dtype, soc, strategy)
    except TilingError:
        assert strategy is not None or n == 0 or c == 0
        return
    assert Plan.from_json(plan.to_json()) == plan
    if plan.strategy is G.EMPTY:
        return
    axis = n if plan.strategy in (G.FIRST_AXIS_COMMON, G.FIRST_AXIS_WORKSPACE) else c
    assert plan.core_split.total == axis and plan.core_split.parts <= plan.block_dim
    td = plan.tiling_data
    assert (td["blockNum"] - 1) * td["blockFormer"] + td["blockTail"] == axis
    assert plan.deterministic


def test_tiling_data_fields_follow_the_struct_order():
    """The structs of sync_batch_norm_gather_stats_fused_tiling.h, every word, momentum and eps last."""
    structs = {
        "common": ("nLength", "cLength", "cFormerAlignV_", "cFormerAlignM_", "cTailAlignV_", "cTailAlignM_",
                   "blockFormer", "blockNum", "blockTail", "ubFormer", "ubLoop", "ubTail", "wholeBufferByteSize",
                   "nBufferByteSize", "cBufferByteSize", "nBrcbBufferByteSize", "wholeBufferElemNums"),
        "workspace": ("nLength", "cLength", "blockFormer", "blockNum", "blockTail", "ubFormerOfFormer",
                      "ubTailOfFormer", "ubLoopOfFormer", "ubFormerOfTail", "ubTailOfTail", "ubLoopOfTail"),
        "first_axis_common": ("nLength", "cLength", "cAlignV", "cAlignM", "blockFormer", "blockNum", "blockTail",
                              "ubFormer", "ubLoopOfFormerBlock", "ubLoopOfTailBlock", "ubTailOfFormerBlock",
                              "ubTailOfTailBlock", "wholeBufferByteSize", "nBufferByteSize", "cBufferByteSize",
                              "nBrcbBufferByteSize", "wholeBufferElemNums"),
        "first_axis_workspace": ("nLength", "cLength", "cAlignV", "blockFormer", "blockNum", "blockTail", "ubFormer",
                                 "ubTail", "ubLoop"),
    }
    for (n, c), strategy in (((8, 2048), "common"), ((8, 2048), "workspace"), ((300, 64), "first_axis_common"),
                             ((300, 64), "first_axis_workspace")):
        plan = plan_batch_norm_gather_stats_with_counts(n, c, "float32", "Ascend950", strategy, momentum=0.25,
                                                        eps=1e-3)
        assert tuple(plan.tiling_data) == structs[strategy] + ("momentum", "eps")
        assert (plan.tiling_data["momentum"], plan.tiling_data["eps"]) == (0.25, float(np.float32(1e-3)))
