"""BatchNormGradV3 A2 host tiling: the worked examples of the research notes, and invariants."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tiling
from tiling import FastBatchNormBackwardStrategy as S
from tiling import Plan, TilingError, plan_fast_batch_norm_backward
from tiling.fast_batch_norm_backward import preprocess

#: BatchNormGradV3SplitLoadCrossCoreTilingData, as batch_norm_grad_v3_tiling.h declares it.
CROSS_CORE_STRUCT = (
    "b1Dim", "aDim", "b0Dim", "bAlign", "coreChannelNum", "coreChannelNumTail", "bUbBlock", "b0UbBlock", "bUbLoop",
    "bUbTailLoop", "bUbBlockTail", "b0UbBlockTail", "b0UbTailBlockTail", "needCoreNum", "groupCore", "groupBlockNum",
    "groupBlockNumTail", "morehalfChannel", "groupBlockNumHalf", "groupBlockNumHalfTail", "bUbLoopHalf",
    "b0UbBlockTailHalf", "bUbTailLoopHalf", "b0UbTailBlockTailHalf", "moreMultiChannel", "bUbLoopMulti",
    "b0UbBlockTailMulti", "coreNum", "epsilon")
FULL_LOAD_STRUCT = ("b1Dim", "aDim", "b0Dim", "bAlign", "coreChannelNum", "coreChannelNumTail", "cUbBlock",
                    "needCoreNum", "epsilon")
SPLIT_LOAD_STRUCT = ("b1Dim", "aDim", "b0Dim", "bAlign", "coreChannelNum", "coreChannelNumTail", "bUbBlock",
                     "b0UbBlock", "bUbLoop", "bUbBlockTail", "b0UbBlockTail", "needCoreNum", "epsilon")
STRUCTS = {S.FULL_LOAD: FULL_LOAD_STRUCT, S.SPLIT_LOAD: SPLIT_LOAD_STRUCT, S.SPLIT_LOAD_CROSS_CORE: CROSS_CORE_STRUCT}

MiB16 = 16 * 1024 * 1024


def test_worked_example_full_load():
    # bAlign = 8192 <= 12000; eachCoreChannel 2, blockDim 32; cUbBlock = (196352 - 1440) // 131216 = 1.
    plan = plan_fast_batch_norm_backward((8, 64, 32, 32), "float32", "Ascend910B2")
    assert (plan.strategy, plan.tiling_key, plan.block_dim) == (S.FULL_LOAD, 30001, 32)
    td = plan.tiling_data
    assert (td["coreChannelNum"], td["coreChannelNumTail"], td["cUbBlock"]) == (2, 2, 1)
    assert plan.workspace.total_bytes == MiB16 and plan.source == "cann-ops-nn"


def test_worked_example_split_load_over_n():
    # b1Align 56, bAlign 14336; bUbBlock (196352 - 96) // 16 = 12266 -> 12264 >= 112: split N, key 40002.
    plan = plan_fast_batch_norm_backward((256, 64, 7, 7), "float32", "Ascend910B2")
    td = plan.tiling_data
    assert (plan.strategy, plan.tiling_key, plan.block_dim) == (S.SPLIT_LOAD, 40002, 32)
    assert (td["bUbBlock"], td["b0UbBlock"], td["bUbLoop"], td["b0UbBlockTail"]) == (12264, 219, 2, 37)


def test_worked_example_cross_core():
    # bAlign 100352 >= 20000 and 256 % 48 != 0; 5 whole channels a core, 16 left over, split N (key 40012);
    # b0UbBlock 3; groupCore 3, groupBlockNum 11, tail 10; blockDim 48; workspace 16 MiB + 48*8*4*2.
    plan = plan_fast_batch_norm_backward((32, 256, 56, 56), "float16", "Ascend910B2")
    td = plan.tiling_data
    assert (plan.strategy, plan.tiling_key, plan.block_dim) == (S.SPLIT_LOAD_CROSS_CORE, 40012, 48)
    assert (td["coreChannelNum"], td["bUbBlock"], td["b0UbBlock"]) == (5, 12256, 3)
    assert (td["groupCore"], td["groupBlockNum"], td["groupBlockNumTail"], td["moreMultiChannel"]) == (3, 11, 10, 1)
    assert plan.workspace.total_bytes == MiB16 + 3072
    assert tuple(td) == CROSS_CORE_STRUCT and type(td).struct == "BatchNormGradV3SplitLoadCrossCoreTilingData"


def test_inference_keys_and_limit():
    # bAlign 115200, 64 % 48 != 0: cross core; bUbBlock 12264 < 2 * 14400 splits HW: 20001 + 10 + 0.
    plan = plan_fast_batch_norm_backward((8, 64, 120, 120), "float32", "Ascend910B2", training=False)
    assert (plan.strategy, plan.tiling_key, plan.tiling_data["bUbLoop"]) == (S.SPLIT_LOAD_CROSS_CORE, 20011, 2)
    small = plan_fast_batch_norm_backward((1, 64, 125, 125), "float32", "Ascend910B2", training=False)
    assert small.b_align == 15632 and small.strategy is S.FULL_LOAD and small.tiling_key == 10001


def test_preprocessing_rules():
    assert preprocess((2000, 4, 4, 8)) == ((1, 4, 2000 * 32), True)          # N > 1000, C > 1, HW <= 32
    assert preprocess((2000, 4, 4, 9)) == ((2000, 4, 36), False)
    assert preprocess((5, 3)) == ((5, 3, 1), False)                          # rank 2 viewed as (N, C, 1, 1)
    assert preprocess((2, 3, 4, 5, 6, 7)) == ((2, 3, 840), False)            # rank 6 viewed as 5-D
    folded = plan_fast_batch_norm_backward((8, 1, 10, 10), "float32", "Ascend910B2")
    assert (folded.b0, folded.a, folded.b1) == (1, 1, 800)                   # A == 1 folds B0 into B1


def test_channel_split_uses_float32_ceil():
    """eachCoreChannel = ceil(float(C) / cores) in float32, as the C++ computes it."""
    plan = plan_fast_batch_norm_backward((1, 2**24 + 1, 1, 1), "float32", "Ascend910B2", "split_load")
    assert (plan.tiling_data["coreChannelNum"], plan.tiling_data["needCoreNum"]) == (349526, 48)
    # C = 48 * 349526 + 1 rounds down to 48 * 349526 in float32: the host code then hands the last
    # core 349527 channels, one more than the others. We refuse that tiling rather than reproduce it.
    with pytest.raises(TilingError, match="float32 channel split gives a tail of 349527 for 349526 per core"):
        plan_fast_batch_norm_backward((1, 48 * 349526 + 1, 1, 1), "float32", "Ascend910B2", "split_load")


def test_unsupported_socs_and_dtypes():
    with pytest.raises(tiling.UnsupportedError, match=r"must support aclnnFastBatchNormBackward \(CANN has no "
                                                      r"kernel for Ascend 950PR/950DT\), got Ascend950"):
        plan_fast_batch_norm_backward((8, 64, 7, 7), "float32", "Ascend950")
    with pytest.raises(TilingError, match=r"\(float32, float16, float16\) are not a supported combination"):
        plan_fast_batch_norm_backward((8, 64, 7, 7), "float32", "Ascend910B2", weight_dtype="float16")
    mixed = plan_fast_batch_norm_backward((8, 64, 7, 7), "bfloat16", "Ascend910B2", weight_dtype="float32")
    assert mixed.weight_dtype == "float32"
    host = plan_fast_batch_norm_backward((8, 64, 7, 7), "float32", "host")
    assert host.source == "modeled" and host.tiling_key is None and host.workspace.system_bytes == 0


@given(st.lists(st.integers(1, 600), min_size=2, max_size=5).map(tuple),
       st.sampled_from(["float32", "float16", "bfloat16"]), st.booleans(),
       st.sampled_from(["Ascend910B2", "Ascend910B4", "host"]))
def test_every_plan_is_consistent(shape, dtype, training, soc):
    plan = plan_fast_batch_norm_backward(shape, dtype, soc, training=training)
    assert Plan.from_json(plan.to_json()) == plan
    assert 1 <= plan.block_dim <= plan.soc.vector_cores
    if plan.strategy is S.PLANES:  # the host's own: no CANN struct, whole channels a core
        assert plan.soc.name == "host" and plan.tiling_data is None and plan.core_split.total == plan.a
        return
    assert tuple(plan.tiling_data) == STRUCTS[plan.strategy]
    if plan.source == "cann-ops-nn":
        base = {True: (30001, 40001), False: (10001, 20001)}[training]
        allowed = {base[0]} | {base[1] + k for k in (0, 1, 10, 11)}
        assert plan.tiling_key in allowed
    td = plan.tiling_data
    if plan.strategy is not S.SPLIT_LOAD_CROSS_CORE:
        assert (td["needCoreNum"] - 1) * td["coreChannelNum"] + td["coreChannelNumTail"] == plan.a
    if plan.strategy is S.SPLIT_LOAD and td["b0UbBlock"] > 1:
        assert (td["bUbLoop"] - 1) * td["b0UbBlock"] + td["b0UbBlockTail"] == plan.b0
    elif plan.strategy is S.SPLIT_LOAD:
        assert (td["bUbLoop"] - 1) * td["bUbBlock"] + td["bUbBlockTail"] == plan.b1


def test_cross_core_jobs_follow_the_tiling_data():
    """(32, 256, 56, 56) fp16: 5 whole channels a core, then 16 channels over groups of 3 cores (11+11+10 planes)."""
    plan = plan_fast_batch_norm_backward((32, 256, 56, 56), "float16", "Ascend910B2")
    whole = [j for j in plan.jobs() if j.phase == 0]
    groups = [j for j in plan.jobs() if j.phase == 2]
    assert [(j.channel_start, j.channel_count) for j in whole[:2]] == [(0, 5), (5, 5)] and len(whole) == 48
    assert [(j.core, j.channel_start, j.block_start, j.block_count, j.group_first) for j in groups[:4]] == [
        (0, 240, 0, 11, 0), (1, 240, 11, 11, 0), (2, 240, 22, 10, 0), (3, 241, 0, 11, 3)]
    assert plan.planes_per_pass == 3 and plan.fold_len == 12256 and not plan.split_hw


def test_pairs_phase_idles_an_odd_last_core():
    import dataclasses

    from tiling import get_soc
    soc = dataclasses.replace(get_soc("Ascend910B2"), name="odd", arch="host", vector_cores=5)
    plan = plan_fast_batch_norm_backward((400, 8, 50), "float32", soc, "split_load_cross_core")
    pairs = [j for j in plan.jobs() if j.phase == 1]
    assert plan.tiling_data["morehalfChannel"] == 1 and [j.core for j in pairs] == [0, 1, 2, 3]


def test_a_broken_job_table_is_caught():
    import dataclasses

    plan = plan_fast_batch_norm_backward((32, 256, 56, 56), "float16", "Ascend910B2")
    bad = dict(plan.tiling_data, groupBlockNumTail=9)       # the last core of each group misses a plane
    with pytest.raises(ValueError, match="the groups cover 31 of 32 blocks"):
        dataclasses.replace(plan, tiling_data=bad)
    bad = dict(plan.tiling_data, coreChannelNum=4)          # whole 0..191, groups 192..207: 208.. by no core
    with pytest.raises(ValueError, match="channel 208 is covered 0 times"):
        dataclasses.replace(plan, tiling_data=bad)


@pytest.mark.parametrize("shape, planes", [((8, 512, 7, 7), True), ((32, 64, 32, 32), True),
                                           ((32, 64, 33, 33), False), ((32, 64, 56, 56), False)])
def test_host_model_takes_short_planes_one_a_pass(shape, planes, host_templates):
    """The templates' host model: planes of at most HOST_PLANE_PASS_MAX elements: split_load, one whole plane a pass
    (split HW into one chunk), each folded buffer a plane long; the A2 plan of the same shape packs planes into
    full-load passes."""
    from tiling.fast_batch_norm_backward import HOST_PLANE_PASS_MAX

    assert HOST_PLANE_PASS_MAX == 1024
    plan = plan_fast_batch_norm_backward(shape, "float32", "host")
    args = plan.kernel_args()
    assert (plan.strategy.value == "split_load" and args.split_hw == 1 and args.hw_blocks == 1
            and args.fold_len == plan.b1_align) == planes, plan
    if planes:
        assert plan.tree.level("ub_passes").fan_in == shape[0]
        assert plan_fast_batch_norm_backward(shape, "float32", "host", "full_load").strategy.value == "full_load"


def test_host_model_divides_at_most_host_ub_bytes(host_templates):
    import dataclasses

    from tiling import get_soc
    from tiling.fast_batch_norm_backward import HOST_UB_BYTES
    l2_sized = dataclasses.replace(get_soc("host"), name="host_1mib", vector_cores=2, ub_bytes=1 << 20,
                                   ub_raw_bytes=1 << 20)
    plan = plan_fast_batch_norm_backward((256, 256, 40, 40), "float16", l2_sized)
    # 128 channels a core (aligned to 16): bUbBlock = (128 KiB - 128 * 3 * 4) // 16 = 8096; b1Align 1600,
    # so 8096 // 1600 = 5 planes a pass, 52 passes over N = 256, the last of 1 plane
    assert HOST_UB_BYTES == 128 * 1024
    assert plan.strategy.value == "split_load" and plan.tiling_data["bUbBlock"] == 8096
    td = plan.tiling_data
    assert (td["b0UbBlock"], td["bUbLoop"], td["b0UbBlockTail"]) == (5, 52, 1)
    capped = dataclasses.replace(l2_sized, name="host_128kib", ub_bytes=HOST_UB_BYTES, ub_raw_bytes=HOST_UB_BYTES)
    assert plan_fast_batch_norm_backward((256, 256, 40, 40), "float16", capped).tiling_data == plan.tiling_data
    # A2 divides its whole UB (6 channels a core): (196352 - 16 * 3 * 4) // 16 = 12260 -> 12256
    a2 = plan_fast_batch_norm_backward((256, 256, 40, 40), "float16", "Ascend910B2")
    assert a2.tiling_data["bUbBlock"] == 12256
    # explain() names the UB the split divided, next to the SoC's own
    rows = {line.split()[0]: line.split()[1] for line in plan.explain().splitlines()[2:]}
    assert rows["ub_bytes"] == "131072" and "UB 1048576 B" in plan.explain()
    assert {line.split()[0]: line.split()[1] for line in a2.explain().splitlines()[2:]}["ub_bytes"] == "196352"
