"""TilingData as the bytes a kernel receives and the int32 words the ops-nn unit tests print: the C layout
of each struct from its header, round trips, refusals, and the CLI's words, blob and diff."""

import pytest

import tiling
from normkern.cli import main
from tiling.group_norm_backward import GroupNormGradTilingData
from tiling.group_norm_backward_arch35 import GroupNormGradEmptyTilingData, GroupNormGradRegBaseTilingData

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
    with pytest.raises(ValueError, match="C member types are not reproduced"):
        tiling.plan_fast_batch_norm_backward((8, 64, 32, 32), "float32", "Ascend910B2").tiling_data.to_bytes()


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
