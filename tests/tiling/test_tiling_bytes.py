"""TilingData as the bytes a kernel receives and the int32 words the ops-nn unit tests print: the C layout
of each struct from its header, round trips, refusals, and the CLI's words, blob and diff."""

import numpy as np
import pytest

import tiling
from normkern.cli import main
from tiling.batch_norm_gather_stats import TILING_DATA
from tiling.group_norm_backward import GroupNormGradTilingData
from tiling.group_norm_backward_arch35 import GroupNormGradEmptyTilingData, GroupNormGradRegBaseTilingData
from tiling.tiling_data import c_struct, tiling_data_class

from .test_plan_group_norm_backward_arch35 import UNIT_TESTS

SOC = "Ascend950"
#: The ops-nn Regbase unit tests' problems, a plan of each arch35 mode and stage-2 path, and A2 ones.
GN_PLANS = [
    *(tiling.plan_group_norm_backward(n, c, hxw, g, dtype, SOC) for _, n, c, hxw, g, dtype, _ in UNIT_TESTS),
    *(tiling.plan_group_norm_backward(*dims, "float32", SOC) for dims in (
        (4, 8, 1, 2), (2, 4, 20000, 2), (1, 1, 1100000, 1), (8, 64, 5000, 1), (37, 6, 10, 3), (3800, 8, 1, 2),
        (0, 16000, 4, 2))),
    *(tiling.plan_group_norm_backward(*dims, "Ascend910B2") for dims in (
        (12, 64, 16384, 32, "float32"), (2, 320, 4096, 32, "float16"), (8, 32, 49, 8, "bfloat16"))),
]


def offsets(cls):
    fields, size = cls.c_layout()
    return {name: offset for name, _, offset in fields}, size


def test_the_regbase_layout_is_its_three_structs_naturally_aligned_and_padded_to_8():
    """group_norm_grad_tiling.h: GroupNormGradBaseParams (6 int64, 15 uint32, 3 int32, 4 uint32: 136 bytes),
    GroupNormGradReduceParams (int64, 2 uint32, int64, 2 uint32: 32), GroupNormGradKernel2Params (8 uint32, 14
    int64, an int32: 148, padded to 152)."""
    at, size = offsets(GroupNormGradRegBaseTilingData)
    assert size == 320
    assert (at["N"], at["clrTailBlockSize"], at["clrBlockNum"], at["workSpaceSize"], at["dxIsRequire"]) == \
        (0, 40, 48, 104, 108)
    assert (at["stage0CoreUsed"], at["binaryAddQuotient"], at["binaryAddK"], at["binaryCGQuotient"]) == \
        (132, 136, 144, 152)
    assert (at["stage2Mode"], at["stage2BinaryAddQuotient"], at["cacheBufferCount"], at["resultCacheId"]) == \
        (168, 200, 304, 312)


def test_the_empty_tiling_words_worked_by_hand():
    """Key 500 of C = 120 on the 950: uint32 usedCoreNumDG = 1 and 4 bytes of padding, then the uint64 fields
    (two words each, low then high) with the uint32 ubSize padded to the next 8."""
    td = tiling.plan_group_norm_backward(0, 120, 64, 4, "float32", SOC).tiling_data
    assert td.words_text() == "1 0 120 0 120 0 245760 0 120 0 0 0 120 0 0 0 120 0 120 0 16777216 0"
    assert offsets(GroupNormGradEmptyTilingData)[1] == 88


def test_the_a2_struct_is_26_uint64_words_pairs():
    td = tiling.plan_group_norm_backward(12, 64, 128 * 128, 32, "float32", "Ascend910B2").tiling_data
    words = td.to_words()
    assert len(words) == 52 and words[1::2] == [0] * 26
    assert words[0::2] == [td[name] for name in GroupNormGradTilingData.__dataclass_fields__]


@pytest.mark.parametrize("plan", GN_PLANS, ids=[str(p) for p in GN_PLANS])
def test_every_group_norm_plan_round_trips_through_words_and_bytes(plan):
    td = plan.tiling_data
    cls = type(td)
    assert cls.from_words_text(td.words_text()) == td
    assert cls.from_bytes(td.to_bytes()) == td
    assert len(td.to_bytes()) == cls.c_layout()[1] and len(td.to_bytes()) % 8 == 0


def test_a_word_past_int32_prints_negative_and_reads_back_in_either_form():
    td = GroupNormGradEmptyTilingData.from_words({**tiling.plan_group_norm_backward(
        0, 120, 64, 4, "float32", SOC).tiling_data, "workspaceSize": 2**32 - 1})
    assert td.to_words()[-2] == -1
    assert GroupNormGradEmptyTilingData.from_words_text(td.words_text().replace("-1", str(2**32 - 1))) == td


def test_blobs_of_the_wrong_size_and_values_out_of_range_are_refused_naming_the_field():
    td = tiling.plan_group_norm_backward(2, 120, 64 * 80, 4, "float32", SOC).tiling_data
    cls = type(td)
    with pytest.raises(ValueError, match=r"is 320 bytes, got 12: it ends inside or before C \(int64_t at byte 8\)"):
        cls.from_bytes(td.to_bytes()[:12])
    with pytest.raises(ValueError, match="got 328: 8 bytes past the struct's end"):
        cls.from_bytes(td.to_bytes() + bytes(8))
    with pytest.raises(ValueError, match=r"GroupNormGradRegBaseTilingData.tailCore = -1 does not fit its C type "
                                         r"uint32_t \[0, 4294967295\]"):
        cls.from_words({**td, "tailCore": -1}).to_bytes()
    with pytest.raises(ValueError, match="words must be integers"):
        cls.from_words_text("1 2 x")
    with pytest.raises(ValueError, match="word 1 = 4294967296 is not a 32-bit word"):
        cls.from_words_text("0 4294967296")
    untyped = tiling_data_class("Untyped", "none.h", fields=(("a", int),))
    with pytest.raises(ValueError, match="C member types are not reproduced"):
        untyped(a=1).to_bytes()


ARGS = ["plan", "group_norm_backward", "--shape", "2,120,64,80", "--group", "4", "--soc", SOC]


def test_the_cli_prints_the_words_and_diffs_an_altered_string(capsys, tmp_path):
    assert main([*ARGS, "--tiling-words"]) == 0
    words = capsys.readouterr().out.strip()
    assert words.startswith("2 0 120 0 5120 0 4 0")           # N, C, HXW, G: int64, low word first
    assert main([*ARGS, "--against", words, "--key", "401"]) == 0
    assert "all 58 fields agree" in capsys.readouterr().out
    altered = words.split()
    altered[4] = "5121"                                         # HXW's low word
    assert main([*ARGS, "--against", " ".join(altered), "--block-dim", "7"]) == 1
    out = capsys.readouterr().out
    assert "2 of 58 fields differ" in out and "HXW" in out and "(block_dim)" in out and "tailCore" not in out
    blob = tmp_path / "td.bin"
    assert main([*ARGS, "--tiling-bytes", str(blob)]) == 0
    assert blob.stat().st_size == 320
    assert main([*ARGS, "--against", str(blob)]) == 0
    text = tmp_path / "words.txt"
    text.write_text(" ".join(altered) + "\n")
    assert main([*ARGS, "--against", str(text)]) == 1


#: The A2 cases of ops-nn's norm/batch_norm_grad_v3/tests/ut/op_host/test_batch_norm_grad_v3_tiling.cpp
#: (float32 NCHW, epsilon 1e-5, compile info CORE_NUM 40, UB_SIZE 196608): name, shape, training, the key
#: it asserts and the string it expects of to_string<int32_t>, copied from the test.
#: (Inference and training print the same words for the split-load and cross-core shapes.)
_SPLIT_LOAD = "1200 0 40 0 50 0 60000 0 1 0 1 0 12280 0 10 0 5 0 0 0 10 0 40 0 925353388 0 "
_CROSS_CORE = ("1200 0 2 0 50 0 60000 0 0 0 0 0 12288 0 10 0 1 0 1 0 0 0 3 0 2 0 34 0 17 0 3 0 2 0 0 0 0 0 0 0 0 0 0 0 "
               "0 0 0 0 0 0 5 0 10 0 40 0 925353388 0 ")
BNGV3_A2_UNIT_TESTS = [
    ("910b_infer_full_load", (5, 2, 3, 4), False, 10001, "12 0 2 0 5 0 80 0 1 0 1 0 183 0 2 0 925353388 0 "),
    ("910b_infer_split_load", (50, 40, 30, 40), False, 20002, _SPLIT_LOAD),
    ("910b_infer_split_load_cross_core", (50, 2, 30, 40), False, 20012, _CROSS_CORE),
    ("910b_train_full_load", (5, 2, 3, 4), True, 30001, "12 0 2 0 5 0 80 0 1 0 1 0 137 0 2 0 925353388 0 "),
    ("910b_train_split_load", (50, 40, 30, 40), True, 40002, _SPLIT_LOAD),
    ("910b_train_split_load_corss_core", (50, 2, 30, 40), True, 40012, _CROSS_CORE),
]
UT_A2 = tiling.unit_test_soc("Ascend910B4", core_num=40, ub_size=196608)


@pytest.mark.parametrize("case", BNGV3_A2_UNIT_TESTS, ids=[case[0] for case in BNGV3_A2_UNIT_TESTS])
def test_the_batch_norm_grad_v3_unit_tests_strings_decode_to_the_plan_and_encode_back(case):
    """The plan on the unit test's platform is the struct the test printed: its words are the test's string
    (less the trailing space every word carries), and the string decodes to the plan's fields."""
    _, shape, training, key, words = case
    plan = tiling.plan_fast_batch_norm_backward(shape, "float32", UT_A2, training=training)
    assert plan.tiling_key == key
    assert plan.tiling_data.words_text() == words.rstrip()
    assert type(plan.tiling_data).from_words_text(words) == plan.tiling_data
    assert len(plan.tiling_data.to_bytes()) == 4 * len(words.split())


def test_a_device_preset_differs_from_the_unit_test_platform_only_where_its_ub_reserve_shows(capsys):
    """Ascend910B4 as a device divides 196352 bytes of UB (GetCoreMemSize withholds 256): the split-load
    block is 16 floats shorter than the unit test's, and the CLI diff names that field alone."""
    words = BNGV3_A2_UNIT_TESTS[4][4]
    args = ["plan", "fast_batch_norm_backward", "--shape", "50,40,30,40", "--soc", "Ascend910B4",
            "--against", words, "--key", "40002"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "1 of 14 fields differ" in out and "bUbBlock" in out and "12264" in out and "12280" in out
    assert main([*args, "--core-num", "40", "--ub-size", "196608"]) == 0
    assert "all 14 fields agree" in capsys.readouterr().out
    assert main([*args[:-4], "--ub-size", "196608", "--tiling-words"]) == 0
    assert capsys.readouterr().out.strip() == words.rstrip()


def test_the_unit_test_platform_is_refused_for_the_host_and_checked():
    with pytest.raises(ValueError, match="host is not an NPU"):
        tiling.unit_test_soc("host", 4)
    with pytest.raises(ValueError, match="vector_cores must be a positive int, got 0"):
        tiling.unit_test_soc("Ascend910B2", 0)
    assert main(["plan", "fast_batch_norm_backward", "--shape", "5,2,3,4", "--soc", "host", "--core-num", "4"]) == 2


#: Ascend950 cases of the same unit test, whose templates the project does not plan: they check the layout
#: rules on CANN's own prints (nested structs, a trailing float and its padding word). Each: the struct's
#: members as batch_norm_grad_v3_tiling.h declares them, the test's string, fields read off the shape by hand.
_BASE = c_struct("int64_t r1Dim; int64_t aDim; int64_t r0Dim; int64_t rAlign; int64_t blockNum; "
                 "int64_t tailBlockNum; int64_t formerBlockDim; int64_t tailBlockDim")
_BINARY_ADD = c_struct("int64_t binaryAddQuotient; int64_t binaryAddk; int64_t binaryAddLastNum")
BNGV3_ARCH35_UNIT_TESTS = [
    ("full_load_fp32 (RARFullLoad, key 10000000)",
     (("BatchNormGradV3BaseTilingData", ("baseTilingData", _BASE)),
      ("BatchNormGradV3BinaryAddTilingData", ("binaryAddTilingData", _BINARY_ADD)),
      *c_struct("int64_t formerUbDim; int64_t ubLoopOfFormerBlock; int64_t ubTailOfFormerBlock; "
                "int64_t ubLoopOfTailBlock; int64_t ubTailOfTailBlock")),
     "4 0 2048 0 225 0 904 0 64 0 0 0 32 0 33 0 512 0 0 0 8 0 16 0 2 0 16 0 3 0 1 0 ",
     {"r1Dim": 4, "aDim": 2048, "r0Dim": 225, "blockNum": 64, "binaryAddQuotient": 512, "ubTailOfTailBlock": 1}),
    ("ra_recompute (RARecompute, key 40000000; NHWC 8x1x136x2880)",
     (("BatchNormGradV3BaseTilingData", ("baseTilingData", _BASE)),
      ("BatchNormGradV3BinaryAddTilingData", ("binaryAddTilingData", _BINARY_ADD)),
      *c_struct("int64_t blockDim; int64_t mainBlockFactor; int64_t tailBlockFactor; int64_t mainBlockCount; "
                "int64_t tailBlockCount; int64_t aLoopFactor; int64_t aLoopFactorAligned; int64_t rLoopFactor; "
                "int64_t rLoopTimes; int64_t rLoopTail; int64_t binaryFoldPoint; int64_t binaryBlockCount; "
                "int64_t binaryTailBlock; int64_t cacheBufferCount; float reciprocal")),
     "1088 0 2880 0 1 0 0 0 64 0 0 0 45 0 46 0 0 0 0 0 0 0 64 0 45 0 0 0 64 0 0 0 64 0 64 0 64 0 17 0 0 0 16 "
     "0 17 0 0 0 5 0 980480241 0 ",
     {"r1Dim": 8 * 136, "aDim": 2880, "reciprocal": float(np.float32(1 / 1088))}),
    ("infer_ba (InferChannelLast, key 900000)",
     c_struct("int64_t totalTiles; int64_t tilesPerCore; int64_t usedCoreNums; int64_t totalALen; int64_t aOuter; "
              "int64_t bOuter; int64_t tileBlockALen; int64_t tileBlockATail; int64_t tileBlockAPaddingNum; "
              "int64_t tileBlockBLen; int64_t tileBlockBTail; float epsilon"),
     "1 0 1 0 1 0 4 0 1 0 1 0 128 0 4 0 124 0 30 0 30 0 925353388 0 ",
     {"totalALen": 4, "tileBlockBLen": 30, "epsilon": float(np.float32(1e-5))}),
]


@pytest.mark.parametrize("case", BNGV3_ARCH35_UNIT_TESTS, ids=[case[0].split()[0] for case in BNGV3_ARCH35_UNIT_TESTS])
def test_cann_prints_decode_under_the_layout_rules_and_encode_back(case):
    _, members, words, expected = case
    cls = tiling_data_class("Printed", "batch_norm_grad_v3_tiling.h", members)
    td = cls.from_words_text(words)
    assert {name: td[name] for name in expected} == expected
    assert td.words_text() == words.rstrip()
    assert cls.c_layout()[1] == 4 * len(words.split())        # a trailing float leaves one padding word


def test_the_gather_stats_words_worked_by_hand():
    """Key 101 of D = 8, C = 2048 (the hand-computed plan of test_plan_gather_stats): 17 int64_t fields, two
    words each, then momentum 0.1 and eps 1e-5 as float bits: 144 bytes, no padding."""
    td = tiling.plan_batch_norm_gather_stats_with_counts(8, 2048, "float32", "Ascend950").tiling_data
    words = ("8 0 2048 0 32 0 32 0 32 0 32 0 32 0 64 0 32 0 835 0 1 0 8 0 106880 0 3360 0 128 0 26880 0 26720 0 "
             "1036831949 925353388")
    assert td.words_text() == words and type(td).from_words_text(words) == td
    sizes = {strategy: cls.c_layout()[1] for strategy, cls in TILING_DATA.items()}
    assert list(sizes.values()) == [144, 96, 144, 80]


@pytest.mark.parametrize("plan", [
    tiling.plan_batch_norm_gather_stats_with_counts(300, 64, "float32", "Ascend950"),
    tiling.plan_batch_norm_gather_stats_with_counts(8, 300000, "float16", "Ascend950"),
    tiling.plan_batch_norm_gather_stats_with_counts(300, 6000, "float32", "Ascend950"),
    tiling.plan_fast_batch_norm_backward((32, 256, 56, 56), "float16", "Ascend910B2"),
    tiling.plan_fast_batch_norm_backward((256, 64, 7, 7), "float32", "Ascend910B2"),
], ids=lambda plan: plan.strategy.value)
def test_every_other_template_round_trips(plan):
    td = plan.tiling_data
    assert type(td).from_words_text(td.words_text()) == td and type(td).from_bytes(td.to_bytes()) == td
