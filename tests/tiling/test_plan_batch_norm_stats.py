"""BatchNormStats plans: invariants over the problem space, hand-computed plans, golden JSON."""

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tiling
from tiling import BatchNormStatsStrategy as S
from tiling import Plan, TilingError, get_soc, plan_batch_norm_stats

SOCS = ("Ascend910B2", "Ascend910B4", "Ascend950", "Ascend910", "host")

shapes = (st.lists(st.integers(0, 300), min_size=2, max_size=5)
          .filter(lambda s: s[1] > 0 and np.prod(s, dtype=np.int64) <= 2_000_000).map(tuple))


def _times_read(plan) -> np.ndarray:
    """How often each element of one channel is read by one pass of the plan."""
    hits = np.zeros(plan.reduction_len, np.int64)
    for r in range(plan.rows_per_channel):
        n, seg = divmod(r, plan.segs_per_plane)
        length = plan.seg_elems if seg < plan.segs_per_plane - 1 else plan.tail_seg_elems
        start = n * plan.hxw + seg * plan.seg_elems
        hits[start:start + length] += 1
    return hits


@settings(max_examples=150, deadline=None)
@given(shapes, st.sampled_from(("float32", "float16", "bfloat16")), st.sampled_from(SOCS),
       st.sampled_from((None, "split_c", "split_r", "atomic", "channels")))
def test_every_plan_is_consistent(shape, dtype, soc, strategy):
    if dtype not in tiling.support("batch_norm_stats", get_soc(soc)).dtypes:
        with pytest.raises(TilingError, match=f"dtype must be one of .* on {soc}, got {dtype}"):
            plan_batch_norm_stats(shape, dtype, soc, strategy)
        return
    try:
        plan = plan_batch_norm_stats(shape, dtype, soc, strategy)
    except TilingError as exc:
        assert strategy is not None and "cannot run" in str(exc)
        return
    assert Plan.from_json(plan.to_json()) == plan
    assert plan.block_dim <= get_soc(soc).vector_cores
    if plan.strategy is S.EMPTY:
        assert plan.reduction_len == 0 and plan.workspace.total_bytes == 0
        return
    if plan.strategy is S.CHANNELS:  # normkern's own, the host's first: BatchNorm's training statistics
        assert get_soc(soc).arch == tiling.HOST and plan.workspace.user_bytes == 0
        assert plan.core_split.total == plan.c and plan.chunks_per_channel == -(-plan.reduction_len // 16384)
        assert plan.tree == tiling.plan_batch_norm(shape, dtype, soc).tree
        return
    assert get_soc(soc).arch != tiling.HOST or strategy is not None
    assert (_times_read(plan) == 1).all()
    assert plan.ub_bytes_used <= plan.soc.ub_bytes
    units = plan.c if plan.strategy is S.SPLIT_C else plan.rows_per_channel
    assert sum(count for _, count in plan.core_split.ranges()) == units
    if plan.strategy is not S.SPLIT_C:
        assert plan.workspace.user_bytes >= 2 * plan.block_dim * plan.c * 4
    assert plan.deterministic == (plan.strategy is not S.ATOMIC or plan.block_dim <= 2)
    args = plan.kernel_args()
    assert args.core_count.sum() == units and args.count == plan.reduction_len


def test_auto_choice_follows_the_rules():
    assert plan_batch_norm_stats((32, 64, 56, 56), "float32").strategy is S.SPLIT_C
    small_c = plan_batch_norm_stats((256, 4, 28, 28), "float32")
    assert small_c.strategy is S.SPLIT_R
    assert [r.strategy for r in small_c.rejected] == ["empty", "split_c"]
    assert "C=4 < 48 cores" in small_c.rejected[1].reason and not small_c.rejected[1].hard
    assert plan_batch_norm_stats((1, 4, 10), "float32").strategy is S.SPLIT_C
    assert plan_batch_norm_stats((0, 4, 10), "float32").strategy is S.EMPTY


def test_hand_computed_a2_plan():
    # (196352 - 1024) // 8 = 24416 -> 24384 (multiple of 64); 24384 // 3136 = 7 planes per block.
    plan = plan_batch_norm_stats((32, 64, 56, 56), "float32", "Ascend910B2")
    assert (plan.ub_block_elems, plan.row_pitch, plan.rows_per_block) == (24384, 3136, 7)
    assert plan.block_split.ranges() == ((0, 7), (7, 7), (14, 7), (21, 7), (28, 4))
    assert plan.core_split.describe() == "16x2+32x1" and plan.block_dim == 48
    assert plan.workspace.total_bytes == 16 * 1024 * 1024
    assert str(plan) == ("batch_norm_stats[split_c] Ascend910B2 cores=48 (16x2+32x1) ub=7x3136 float32 "
                         "tree=lanes64:pairwise/blocks5:sequential ws=16MiB+0B")


def test_hand_computed_half_plan_with_split_planes():
    # fp16: (196352 - 1024) // 10 = 19532 -> 19520; a 200*200 plane needs ceil(40000/19520) = 3 rows.
    plan = plan_batch_norm_stats((8, 2, 200, 200), "float16", "Ascend910B2")
    assert plan.strategy is S.SPLIT_R
    assert (plan.ub_block_elems, plan.segs_per_plane, plan.seg_elems, plan.tail_seg_elems) == (19520, 3, 19520, 960)
    assert plan.rows_per_channel == 24 and plan.core_split.describe() == "24x1"
    # two float32 regions of (24 cores, 2 channels): 192 bytes each, 32-byte aligned.
    assert [(r.name, r.offset, r.nbytes) for r in plan.workspace.regions] == [
        ("sum_partials", 0, 192), ("sqdev_partials", 192, 192)]
    assert plan.workspace.total_bytes == 16 * 1024 * 1024 + 384


def test_forced_strategies():
    plan = plan_batch_norm_stats((256, 4, 28, 28), "float32", strategy="split_c")
    assert plan.strategy is S.SPLIT_C and plan.rejected == () and plan.block_dim == 4
    atomic = plan_batch_norm_stats((256, 4, 28, 28), "float32", strategy=S.ATOMIC)
    assert not atomic.deterministic and "non-deterministic" in str(atomic)
    with pytest.raises(TilingError, match=r"strategy split_r cannot run this problem: the reduction axis is a "
                                          r"single row"):
        plan_batch_norm_stats((1, 4, 10), "float32", strategy="split_r")
    with pytest.raises(TilingError,
                       match="strategy must be one of empty, split_c, split_r, atomic, channels, got 'fast'"):
        plan_batch_norm_stats((1, 4, 10), "float32", strategy="fast")


@pytest.mark.parametrize("shape, message", [
    ((5,), "rank 2 to 8, got rank 1"), ((2, 0, 3), "dim 1 \\(C\\) must be positive"),
    ((2, -1), "non-negative"), ((1,) * 9, "rank 2 to 8, got rank 9")])
def test_planner_rejects_bad_problems(shape, message):
    with pytest.raises(TilingError, match=message):
        plan_batch_norm_stats(shape, "float32")


def test_invariants_are_checked_on_construction():
    plan = plan_batch_norm_stats((32, 64, 56, 56), "float32")
    with pytest.raises(ValueError, match="UB block needs"):
        dataclasses.replace(plan, rows_per_block=100)
    with pytest.raises(ValueError, match="cover HxW exactly"):
        dataclasses.replace(plan, tail_seg_elems=3000)
    with pytest.raises(ValueError, match="more than block_dim"):
        dataclasses.replace(plan, block_dim=47)
    with pytest.raises(ValueError, match="core split covers"):
        dataclasses.replace(plan, core_split=tiling.Split.even(63, 48), block_dim=48)


def test_json_has_a_schema_version():
    text = plan_batch_norm_stats((4, 4, 8), "float32").to_json()
    payload = json.loads(text)
    assert payload["schema_version"] == tiling.SCHEMA_VERSION and payload["op"] == "batch_norm_stats"
    payload["schema_version"] = 99
    with pytest.raises(ValueError, match="schema version 99"):
        Plan.from_json(json.dumps(payload))


def test_kernel_args_round_trip_through_json():
    plan = plan_batch_norm_stats((256, 4, 28, 28), "bfloat16", "host")
    again = Plan.from_json(plan.to_json()).kernel_args()
    for name, value in plan.kernel_args()._asdict().items():
        assert np.array_equal(value, getattr(again, name)), name


def test_planners_take_numpy_dtypes_as_well_as_names():
    import ml_dtypes

    assert plan_batch_norm_stats((2, 3, 4), np.float16) == plan_batch_norm_stats((2, 3, 4), "float16")
    gather = tiling.plan_batch_norm_gather_stats_with_counts(2, 3, ml_dtypes.bfloat16, "Ascend950")
    assert gather.dtype == "bfloat16"
    fastbn = tiling.plan_fast_batch_norm_backward((2, 3, 4, 4), ml_dtypes.bfloat16, weight_dtype=np.float32)
    assert (fastbn.dtype, fastbn.weight_dtype) == ("bfloat16", "float32")
