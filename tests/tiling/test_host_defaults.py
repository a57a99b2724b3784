"""The value a TilingData field holds where CANN's host code never assigns it: its member's initializer.

Expected values are read by hand from hicann/ops-nn: ``group_norm_grad_tiling_arch35.h`` (``int64_t HxW_ = 1``,
``uint32_t stage2Mode_ = 1``), ``group_norm_grad_tiling.h`` (``TilingCalculationParameters``: ``tilingKey = -1``,
the three ``IsRequire = true``), ``batch_norm_grad_v3_base_tiling.h`` / ``_base_tiling.cpp`` (``Reset``:
``epsilon_ = DEFAULT_EPSILON`` 1e-5), ``batch_norm_grad_v3_splitload_tiling.cpp`` and ``_crosscore_tiling.cpp``
(``b0UbBlock = 1``), ``sync_batch_norm_gather_stats_fused_tiling.h`` (``ParamsSyncBatchNormGatherStatsFused``:
``nLength = 1``, ``cLength = 1``, ``momentum = 0.1f``, ``eps = 1e-5f``). Every other member starts at 0 or
is uninitialised (modeled as 0).
"""

import numpy as np
import pytest

import tiling
from tiling.batch_norm_gather_stats import TILING_DATA as GATHER_STRUCTS
from tiling.fast_batch_norm_backward import FullLoadTilingData, SplitLoadCrossCoreTilingData, SplitLoadTilingData
from tiling.group_norm_backward import GroupNormGradTilingData
from tiling.group_norm_backward_arch35 import GroupNormGradEmptyTilingData, GroupNormGradRegBaseTilingData
from tiling.tiling_data import tiling_data_class

F32_1E5 = float(np.float32(1e-5))  # the struct's float word
HAND = {
    GroupNormGradTilingData: {"Tiling_key": 2**32 - 1, "dx_is_require": 1, "dgamma_is_require": 1,
                              "dbeta_is_require": 1},
    GroupNormGradRegBaseTilingData: {"HXW": 1, "stage2Mode": 1},
    GroupNormGradEmptyTilingData: {},
    FullLoadTilingData: {"epsilon": F32_1E5},
    SplitLoadTilingData: {"b0UbBlock": 1, "epsilon": F32_1E5},
    SplitLoadCrossCoreTilingData: {"b0UbBlock": 1, "epsilon": F32_1E5},
    **{record: {"nLength": 1, "cLength": 1, "momentum": float(np.float32(0.1)), "eps": F32_1E5}
       for record in GATHER_STRUCTS.values()},
}


@pytest.mark.parametrize("record", list(HAND), ids=lambda r: r.struct)
def test_every_typed_struct_declares_its_headers_non_zero_initializers(record):
    assert dict(record.host_defaults) == HAND[record]
    initial = record.initial_words()
    assert list(initial) == list(record.__dataclass_fields__)
    assert {k: v for k, v in initial.items() if v} == HAND[record]


def test_a_default_must_name_a_field():
    with pytest.raises(ValueError, match="Demo has no field stage9Mode to give a host default"):
        tiling_data_class("Demo", "demo.h", fields=(("a", int),), host_defaults={"stage9Mode": 1})


# --- arch35 GroupNormGrad: N = 1 skips Stage2Tiling, so stage2Mode keeps stage2Mode_ = 1 -----------------
ZERO_STAGE2 = dict.fromkeys(
    ("cFactor", "cBlockFactor", "cTailBlockFactor", "stage2CoreUsed", "stage2BinaryAddK", "cNumMode2PerCore",
     "tailcNumMode2PerCore", "stage2BinaryAddQuotient", "reduceNCnt", "stage2LoopCnt", "stage2FactorN",
     "cFactorStage2Mode2", "cLoopMainBlock", "cTailMainBlock", "cLoopTailBlock", "cTailTailBlock",
     "nFactorStage2Mode2", "nLoop", "nMainFlodCount", "nTail", "cacheBufferCount", "resultCacheId"), 0)
ZERO_MODE2 = dict.fromkeys(("mode2UbCapEle", "mode2UbIterNum", "mode2UbTailNum", "mode2MainLoopCnt",
                            "mode2FoldLoopCnt", "mode2OneLoopSize", "mode2FoldTail"), 0)
MASKS = {"dxIsRequire": 1, "dgammaIsRequire": 1, "dbetaIsRequire": 1}

# Worked from group_norm_grad_tiling_arch35.cpp on the Ascend950 preset (64 cores, UB 245760, 32-byte
# blocks, vectorLen 64). (N, C, HxW, G, x dtype, mean dtype) -> key, block_dim, every field.
N1_CASES = {
    # N*G = 32 > 16: reserve 64*4*4 + 2*32 = 1088, usable (245760 - 1088) / 2 = 122336;
    # a group: 64*1024*4*3 + 64 > usable -> mode0 0; a channel: 1024*4*3 = 12288 -> mode1 9: mode 200.
    # Stage 1: taskNumPerCore = CeilAlign(32, 64)/64 = 1, 32 cores, no remainder: tail = 32.
    # CalBinaryParams(1024): 512, 8 vectors -> K 0, last 8; (64): 32, 0 vectors -> 0, 0.
    # Workspace W = CeilDiv(1, 2) * 2048 = 2048: CeilAlign(CeilDiv(2048, 64), 8) = 32 < 512 -> blocks of 512,
    # 4 of them, tail 512. block_dim = max(32, 4, 0).
    (1, 2048, 1024, 32, "float32", "float32"): (201, 32, {
        "N": 1, "C": 2048, "HXW": 1024, "G": 32, "clrBlockSize": 512, "clrTailBlockSize": 512, "clrBlockNum": 4,
        "taskNumPerCore": 1, "taskNumPerTailCore": 1, "tailCore": 32, "stage1CoreUsed": 32, "mode0UbCapGNum": 0,
        "mode1UbCapCNum": 9, **ZERO_MODE2, "workSpaceSize": 2048, **MASKS, "stage0TaskNumPerCore": 0,
        "stage0TaskNumPerTailCore": 0, "stage0TailCore": 0, "stage0CoreUsed": 0,
        "binaryAddQuotient": 512, "binaryAddK": 0, "binaryAddLastNum": 8,
        "binaryCGQuotient": 32, "binaryCGK": 0, "binaryCGLastNum": 0, "stage2Mode": 1, **ZERO_STAGE2}),
    # N*G = 113 > 16, float16 x with float32 mean (key digit 4): reserve CeilAlign(1, 8)*4*4 + 64 = 192,
    # usable 122784; a group: CeilAlign(96, 16)*2*3 + 64 = 640 -> 191; a channel: 96*2*3 = 576 -> 213: mode 100.
    # Stage 1: CeilAlign(113, 64)/64 = 2 a core, (113 - 1)/2 + 1 = 57 cores, 113 % 57 = 56: 56 cores of 2, rest 1.
    # CalBinaryParams(96): 64, 1 vector -> 0, 1; (1): 32 -> 0, 0. W = 113: blocks of 512, one, tail 113.
    (1, 113, 96, 113, "float16", "float32"): (104, 57, {
        "N": 1, "C": 113, "HXW": 96, "G": 113, "clrBlockSize": 512, "clrTailBlockSize": 113, "clrBlockNum": 1,
        "taskNumPerCore": 2, "taskNumPerTailCore": 1, "tailCore": 56, "stage1CoreUsed": 57, "mode0UbCapGNum": 191,
        "mode1UbCapCNum": 213, **ZERO_MODE2, "workSpaceSize": 113, **MASKS, "stage0TaskNumPerCore": 0,
        "stage0TaskNumPerTailCore": 0, "stage0TailCore": 0, "stage0CoreUsed": 0,
        "binaryAddQuotient": 64, "binaryAddK": 0, "binaryAddLastNum": 1,
        "binaryCGQuotient": 32, "binaryCGK": 0, "binaryCGLastNum": 0, "stage2Mode": 1, **ZERO_STAGE2}),
    # N*G = 4 <= 16: BlockTiling splits stage 0 too (N*C = 4 channels: 1 a core, 4 cores, no remainder) and
    # reserves CeilAlign(1, 8)*4*(4 + 2) + 64 = 256: usable 122752; a group: 16*2*3 + 64 = 160 -> 767;
    # a channel: 96 -> 1278: mode 100 (not 400, so stage 0 is not launched: block_dim = max(4, 1)).
    # CalBinaryParams(12): 32, 0 vectors -> 0, 0. W = 4: one block of 512, tail 4.
    (1, 4, 12, 4, "float16", "float32"): (104, 4, {
        "N": 1, "C": 4, "HXW": 12, "G": 4, "clrBlockSize": 512, "clrTailBlockSize": 4, "clrBlockNum": 1,
        "taskNumPerCore": 1, "taskNumPerTailCore": 1, "tailCore": 4, "stage1CoreUsed": 4, "mode0UbCapGNum": 767,
        "mode1UbCapCNum": 1278, **ZERO_MODE2, "workSpaceSize": 4, **MASKS, "stage0TaskNumPerCore": 1,
        "stage0TaskNumPerTailCore": 1, "stage0TailCore": 4, "stage0CoreUsed": 4,
        "binaryAddQuotient": 32, "binaryAddK": 0, "binaryAddLastNum": 0,
        "binaryCGQuotient": 32, "binaryCGK": 0, "binaryCGLastNum": 0, "stage2Mode": 1, **ZERO_STAGE2}),
}


@pytest.mark.parametrize("problem", list(N1_CASES), ids=lambda p: "x".join(map(str, p[:4])) + f"-{p[4]}")
def test_arch35_n1_skips_stage2_and_keeps_stage2_mode_1(problem):
    n, c, hxw, g, dtype, out_dtype = problem
    key, block_dim, fields = N1_CASES[problem]
    plan = tiling.plan_group_norm_backward(n, c, hxw, g, dtype, "Ascend950", out_dtype=out_dtype)
    assert (plan.tiling_key, plan.block_dim) == (key, block_dim)
    assert dict(plan.tiling_data) == fields
    assert "no stage 2" in plan.explain()


def test_arch35_stage2_mode_is_assigned_when_stage2_runs():
    """N > 1: Stage2Tiling writes 1 when a UB share holds a channel's column, else 2 (never the default)."""
    assert tiling.plan_group_norm_backward(2, 120, 5120, 4, "float32", "Ascend950").tiling_data["stage2Mode"] == 1
    assert tiling.plan_group_norm_backward(3800, 8, 1, 2, "float32", "Ascend950").tiling_data["stage2Mode"] == 2


def test_arch35_hxw_of_a_2d_input_is_the_products_seed():
    assert tiling.plan_group_norm_backward(4, 8, 1, 2, "float32", "Ascend950").tiling_data["HXW"] == 1
    assert tiling.plan_group_norm_backward(4, 8, 7, 2, "float32", "Ascend950").tiling_data["HXW"] == 7


# --- defaults the host code always overwrites: a plan holds the assigned value, never the default -------
def test_a2_group_norm_tiling_key_and_masks_are_always_assigned():
    td = tiling.plan_group_norm_backward(4, 64, 49, 8, "float32", "Ascend910B2",
                                         output_mask=(False, True, False)).tiling_data
    assert td["Tiling_key"] in (0, 1, 2, 3, 5)
    assert (td["dx_is_require"], td["dgamma_is_require"], td["dbeta_is_require"]) == (0, 1, 0)


def _fbnb(shape, eps, soc="Ascend910B2", **kw):
    return tiling.plan_fast_batch_norm_backward(shape, "float32", soc=soc, training=True, epsilon=eps, **kw)


# full load; split load splitting HW, then N; cross-core splitting HW, then N (A2, 48 cores)
FBNB_KEYS = [((2, 8, 4, 4), 30001), ((2, 96, 200, 200), 40001), ((12, 96, 30, 40), 40002),
             ((32, 16, 200, 200), 40011), ((50, 40, 30, 40), 40012)]


@pytest.mark.parametrize("shape, key", FBNB_KEYS, ids=[str(k) for _, k in FBNB_KEYS])
def test_batch_norm_grad_v3_epsilon_is_the_calls(shape, key):
    plan = _fbnb(shape, 1e-3)
    assert plan.tiling_key == key
    assert plan.tiling_data["epsilon"] == float(np.float32(1e-3))


@pytest.mark.parametrize("shape, key", FBNB_KEYS[1:], ids=[str(k) for _, k in FBNB_KEYS[1:]])
def test_split_load_b0_ub_block_is_1_splitting_hw_and_the_planes_a_pass_splitting_n(shape, key):
    """1 is both the initializer and what the split-HW path assigns; split N: bUbBlock // fusedB1Align."""
    plan = _fbnb(shape, 1e-5)
    td = plan.tiling_data
    assert plan.tiling_key == key
    b1_align = td["bAlign"] // td["b0Dim"]  # fp32 planes of 30*40 and 200*200 are already 8-aligned
    assert td["b0UbBlock"] == (1 if key % 10 == 1 else td["bUbBlock"] // b1_align)
    assert key % 10 == 1 or td["b0UbBlock"] == 10  # 12264 or 12272 // 1200


def test_gather_stats_lengths_and_attributes_are_the_calls():
    plan = tiling.plan_batch_norm_gather_stats_with_counts(3, 5, "float32", soc="Ascend950", momentum=0.0, eps=1e-3)
    td = plan.tiling_data
    assert (td["nLength"], td["cLength"], td["momentum"]) == (3, 5, 0.0)
    assert td["eps"] == pytest.approx(1e-3)
