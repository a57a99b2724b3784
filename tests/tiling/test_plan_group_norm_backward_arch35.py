"""The Ascend950 arch35 GroupNormGrad plan against CANN's host code.

Keys: the arch35 unit tests of ops-nn's ``norm/group_norm_grad/tests/ut/op_host/test_group_norm_grad_tiling.cpp``
(``GroupNormGradRegbase_tiling_0`` to ``_10``: UB 245760, 64 cores, each asserting GRAPH_SUCCESS and its
key). Fields: worked by hand from ``group_norm_grad_tiling_arch35.cpp`` (cited by function) for one case
of each stage-1 mode, and from ``group_norm_grad_empty_tiling_arch35.cpp`` for key 500.
"""

import pytest

import tiling
from tiling.group_norm_backward_arch35 import binary_params

SOC = "Ascend950"
MIB = 1 << 20


def _plan(n, c, hxw, g, dtype="float32", out_dtype=None, **kw):
    return tiling.plan_group_norm_backward(n, c, hxw, g, dtype, SOC, "arch35", out_dtype=out_dtype, **kw)


# (test name, N, C, H*W, G, dtype of every tensor, the key it asserts)
UNIT_TESTS = [
    ("GroupNormGradRegbase_tiling_0", 12, 64, 32 * 32, 32, "float32", 101),
    ("GroupNormGradRegbase_tiling_2", 1, 128, 64 * 64, 32, "bfloat16", 103),
    ("GroupNormGradRegbase_tiling_3", 1, 2130, 1664 * 1664, 71, "float16", 302),
    ("GroupNormGradRegbase_tiling_4", 12, 64, 32 * 32, 32, "float32", 101),
    ("GroupNormGradRegbase_tiling_5", 5, 128, 64 * 64, 32, "bfloat16", 103),
    ("GroupNormGradRegbase_tiling_6", 6, 2130, 1664 * 1664, 71, "float16", 302),
    ("GroupNormGradRegbase_tiling_7", 2, 120, 64 * 80, 4, "float32", 401),
    ("GroupNormGradRegbase_tiling_8", 2, 120, 128 * 80, 4, "float16", 402),
    ("GroupNormGradRegbase_tiling_9", 2, 120, 128 * 80, 4, "bfloat16", 403),
    ("GroupNormGradRegbase_tiling_10", 2, 120, 128 * 80, 3, "bfloat16", 403),
]


@pytest.mark.parametrize("name, n, c, hxw, g, dtype, key", UNIT_TESTS, ids=[t[0] for t in UNIT_TESTS])
def test_the_unit_tests_keys(name, n, c, hxw, g, dtype, key):
    plan = _plan(n, c, hxw, g, dtype)
    assert plan.tiling_key == key
    assert plan.source == "cann-ops-nn" and plan.mode == key // 100 * 100


def test_small_ng_mode_400_fields():
    """GroupNormGradRegbase_tiling_7 (N2 C120 HxW 5120 G4 float32), worked from the host code."""
    td = _plan(2, 120, 64 * 80, 4).tiling_data
    # BlockTiling: N*G = 8 <= 16: stage 0 over N*C = 240 channels, ceil(240/64) = 4 a core, 60 cores
    assert (td["stage0TaskNumPerCore"], td["stage0CoreUsed"], td["stage0TailCore"]) == (4, 60, 60)
    assert (td["taskNumPerCore"], td["stage1CoreUsed"], td["tailCore"]) == (1, 8, 8)
    # UbTiling: reserve 32*4*6 + 2*32 = 832, (245760 - 832) / 2 = 122464 over 5120*4*3 -> one channel
    assert (td["mode0UbCapGNum"], td["mode1UbCapCNum"]) == (0, 1)
    # CalBinaryParams: 5120 -> quotient 4096 (64 vectors: last 64, K 0); C/G 30 -> 32, 0 vectors
    assert [td[k] for k in ("binaryAddQuotient", "binaryAddK", "binaryAddLastNum")] == [4096, 0, 64]
    assert [td[k] for k in ("binaryCGQuotient", "binaryCGK", "binaryCGLastNum")] == [32, 0, 0]
    # Stage2Tiling: mode 400 reduces N = 2 rows; 61440 B / (3*4 + 4 + 4) = 3072 channels; 8 a core -> 15 cores
    assert [td[k] for k in ("stage2Mode", "reduceNCnt", "cFactor", "cBlockFactor", "cTailBlockFactor",
                            "stage2CoreUsed", "stage2BinaryAddQuotient")] == [1, 2, 3072, 8, 8, 15, 0]
    # GetWorkspaceSize: W = N*C = 240 floats a copy; clearing blocks max(ceil8(240/64), 512) = 512
    assert [td[k] for k in ("workSpaceSize", "clrBlockSize", "clrBlockNum", "clrTailBlockSize")] == [240, 512, 1, 240]
    plan = _plan(2, 120, 64 * 80, 4)
    assert plan.block_dim == 60  # max(stage 0 60, stage 1 8, clear 1, stage 2 15)
    assert plan.workspace.total_bytes == 16 * MIB + 2 * 240 * 4


def test_channel_full_load_mode_200_fields():
    """N4 C64 HxW 4096 G8 float32: N*G = 32 > 16; a group of 8*4096 floats does not fit, two channels do."""
    plan = _plan(4, 64, 4096, 8)
    td = plan.tiling_data
    assert plan.tiling_key == 201
    # reserve 8*4*4 + 64 = 192: (245760 - 192) / 2 = 122784 // (4096*4*3) = 2
    assert (td["mode0UbCapGNum"], td["mode1UbCapCNum"]) == (0, 2)
    assert (td["taskNumPerCore"], td["stage1CoreUsed"]) == (1, 32)
    assert [td[k] for k in ("binaryAddQuotient", "binaryAddK", "binaryAddLastNum")] == [2048, 0, 32]
    assert [td[k] for k in ("reduceNCnt", "workSpaceSize", "stage2CoreUsed", "cBlockFactor")] == [2, 128, 8, 8]
    assert td["stage0CoreUsed"] == 0 and plan.block_dim == 32
    assert [lv.name for lv in plan.tree.levels] == ["lanes", "batch_pairs", "rows"]


def test_recompute_mode_300_fields():
    """N2 C64 HxW 16384 G32 float32: one channel (196608 B) exceeds the UB share: HxW in loops."""
    plan = _plan(2, 64, 16384, 32)
    td = plan.tiling_data
    assert plan.tiling_key == 301
    # Mode2UbTiling: (245760 - 192 - 6144) / 2 = 119712 // 12 = 9976 -> 9952; loops of 4096 (< 9952 / 2)
    assert [td[k] for k in ("mode2OneLoopSize", "mode2MainLoopCnt", "mode2FoldLoopCnt", "mode2FoldTail",
                            "mode2UbCapEle", "mode2UbIterNum", "mode2UbTailNum")] == [4096, 2, 2, 4096, 8192, 2, 8192]
    # 16384 -> quotient 8192 = 128 vectors > 64: K = ctz(2) = 1, last 64
    assert [td[k] for k in ("binaryAddQuotient", "binaryAddK", "binaryAddLastNum")] == [8192, 1, 64]
    assert [td[k] for k in ("reduceNCnt", "cFactor", "stage2CoreUsed")] == [1, 3840, 8]
    assert plan.block_dim == 64


def test_one_batch_has_no_stage_2():
    plan = _plan(1, 128, 4096, 32, "bfloat16")
    assert plan.tiling_data["stage2CoreUsed"] == 0 and plan.tiling_data["reduceNCnt"] == 0
    assert plan.tiling_data["workSpaceSize"] == 128  # GetWorkspaceSize still sizes ceil(1/2) * C


@pytest.mark.parametrize("length, expected", [(1, (32, 0, 0)), (64, (32, 0, 0)), (65, (64, 0, 1)),
                                              (4096, (2048, 0, 32)), (4097, (4096, 0, 64)),
                                              (2 ** 20, (2 ** 19, 7, 64))])
def test_binary_params(length, expected):
    """CalBinaryParams by hand: the largest 64 * 2**k below the length, then its vector count."""
    assert binary_params(length, 64) == expected


def test_mixed_dtype_keys_and_refusals():
    assert _plan(2, 64, 1024, 32, "float16", "float32").tiling_key == 104
    assert _plan(2, 64, 1024, 32, "bfloat16", "float32").tiling_key == 105
    for dtype, out in (("float32", "float16"), ("float32", "bfloat16"), ("float16", "bfloat16")):
        with pytest.raises(tiling.TilingError, match="mean's dtype"):
            _plan(2, 64, 1024, 32, dtype, out)
    with pytest.raises(tiling.TilingError, match="8000"):
        _plan(2, 16002, 4, 2)  # C/G = 8001 (ParamsCheck)


def test_empty_tiling_key_500():
    plan = _plan(0, 120, 64, 4, "float16", "float32")
    td = plan.tiling_data
    assert plan.tiling_key == 500 and plan.block_dim == 64 and plan.workspace.total_bytes == 16 * MIB
    assert dict(td) == {"usedCoreNumDG": 1, "colsPerCoreDG": 120, "cols": 120, "ubSize": 245760,
                        "colsPerUBDG": 120, "coreUbBlockCount": 0, "tailUbCols": 120, "lastCoreBlockCount": 0,
                        "lastCoreTailUbCols": 120, "colsLastCoreDG": 120, "workspaceSize": 16 * MIB}
    wide = _plan(3, 16000, 0, 2).tiling_data  # over 8000 columns: every core, ceil(16000/64) = 250 each
    assert (wide["usedCoreNumDG"], wide["colsPerCoreDG"], wide["colsLastCoreDG"], wide["tailUbCols"]) == \
        (64, 250, 250, 250)
    none = _plan(2, 0, 64, 4)
    assert none.block_dim == 0 and none.tiling_data is None  # gamma empty: the op_api launches nothing


def test_the_950_default_and_only_the_950():
    """The 950 plans arch35 unless asked for the A2 templates (modeled); no other SoC has it."""
    default = tiling.plan_group_norm_backward(2, 64, 1024, 32, "float32", SOC)
    assert default.strategy.value == "arch35" and default.source == "cann-ops-nn" and default.tiling_key == 101
    assert default.tree.lane_order.value == "binary_add"
    a2 = tiling.plan_group_norm_backward(2, 64, 1024, 32, "float32", SOC, "cann")
    assert a2.source == "modeled" and a2.tiling_key is None
    assert ("cann", "Ascend950 runs its arch35 tiling; the A2 templates with the 950's figures only when asked "
            "for") in [(r.strategy, r.reason) for r in default.rejected]
    with pytest.raises(tiling.TilingError, match="Ascend950"):
        tiling.plan_group_norm_backward(2, 64, 1024, 32, "float32", "Ascend910B2", "arch35")
    assert tiling.plan_group_norm_backward(0, 64, 1024, 32, "float32", SOC).tiling_key == 500


def test_plan_text_json_and_picture_show_the_stages():
    plan = _plan(2, 120, 64 * 80, 4)
    text = plan.explain()
    assert "stage 0: N*C = 240 channel sums on 60 cores" in text and "stage 2 (mode 1)" in text
    assert tiling.GroupNormBackwardPlan.from_json(plan.to_json()) == plan
    empty = _plan(0, 120, 64, 4)
    assert tiling.GroupNormBackwardPlan.from_json(empty.to_json()) == empty
    assert "<svg" in plan.to_svg()
