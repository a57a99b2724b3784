"""Plans of the SyncBatchNorm family: the elementwise split (BatchNormElemt, BatchNormElemtBackward) and the
row reduction of BatchNormReduceBackward, over the problem space; the arch35 unit-test cases."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tiling
from tiling import ElementwiseStrategy as E
from tiling import Plan, TilingError, get_soc

SOCS = ("Ascend910B2", "Ascend910B4", "Ascend950", "Ascend910", "Ascend310P3", "host")
shapes = (st.lists(st.integers(0, 300), min_size=2, max_size=5)
          .filter(lambda s: s[1] > 0 and np.prod(s, dtype=np.int64) <= 2_000_000).map(tuple))
dtypes = st.sampled_from(("float32", "float16", "bfloat16"))


def _supported(op, soc, dtype):
    entry = tiling.support(op, get_soc(soc))
    return entry.runs and dtype in entry.dtypes


@settings(max_examples=150, deadline=None)
@given(shapes, dtypes, st.sampled_from(SOCS), st.sampled_from(("batch_norm_elemt", "batch_norm_backward_elemt")))
def test_every_elementwise_plan_covers_each_element_once(shape, dtype, soc, op):
    planner = tiling.plan_batch_norm_elemt if op == "batch_norm_elemt" else tiling.plan_batch_norm_backward_elemt
    if not _supported(op, soc, dtype):
        with pytest.raises(TilingError):
            planner(shape, dtype, soc)
        return
    plan = planner(shape, dtype, soc)
    assert Plan.from_json(plan.to_json()) == plan
    assert plan.deterministic and plan.source == "modeled"
    assert plan.block_dim <= get_soc(soc).vector_cores
    if plan.strategy is E.EMPTY:
        assert plan.elems == 0 and plan.workspace.total_bytes == 0
        return
    if plan.strategy is E.CHANNELS:  # normkern's own, the host's first: whole channels a core, every plane once
        assert get_soc(soc).arch == tiling.HOST and plan.workspace.user_bytes == 0
        planes = np.zeros((shape[0], plan.c), np.int64)
        for start, count in plan.core_split.ranges():
            planes[:, start:start + count] += 1
        assert (planes == 1).all()
        return
    assert get_soc(soc).arch != tiling.HOST
    hits = np.zeros(plan.elems, np.int64)
    for core, (start, count) in enumerate(plan.core_split.ranges()):
        split = plan.block_split if core < plan.core_split.parts - 1 else plan.tail_block_split
        for offset, length in split.ranges():
            assert length <= plan.ub_former
            hits[start + offset:start + offset + length] += 1
        assert split.total == count
    assert (hits == 1).all()
    assert plan.ub_bytes_used <= plan.soc.ub_bytes
    assert plan.workspace.total_bytes == plan.soc.system_workspace_bytes
    # every core but the last takes blockFormer elements, a multiple of one 256-byte float32 register
    if plan.block_dim > 1:
        assert plan.block_former % 64 == 0
    assert plan.block_dim == -(-plan.elems // plan.block_former)


@settings(max_examples=100, deadline=None)
@given(shapes, dtypes, st.sampled_from(SOCS), st.sampled_from((None, "split_c", "split_r", "atomic")))
def test_every_reduce_backward_plan_is_a_row_reduction(shape, dtype, soc, strategy):
    op = "batch_norm_backward_reduce"
    if not _supported(op, soc, dtype):
        with pytest.raises(TilingError):
            tiling.plan_batch_norm_backward_reduce(shape, dtype, soc, strategy)
        return
    try:
        plan = tiling.plan_batch_norm_backward_reduce(shape, dtype, soc, strategy)
    except TilingError as exc:
        assert strategy is not None and "cannot run" in str(exc)
        return
    assert Plan.from_json(plan.to_json()) == plan
    assert plan.centered == (soc == "host")
    stats = tiling.plan_batch_norm_stats(shape, "float32", "host")  # the same layout rules, other UB bytes
    assert plan.hxw == stats.hxw and plan.n == stats.n
    assert plan.deterministic == (plan.strategy.value != "atomic" or plan.block_dim <= 2)
    if plan.strategy.value in ("split_r", "atomic"):
        assert plan.workspace.region("dy_partials").shape == (plan.block_dim, plan.c)
        assert plan.workspace.region("dyx_partials").shape == (plan.block_dim, plan.c)


def test_reduce_backward_ub_holds_dy_x_casts_and_the_product():
    f32 = tiling.plan_batch_norm_backward_reduce((8, 4, 56, 56), "float32", "Ascend910B2")
    f16 = tiling.plan_batch_norm_backward_reduce((8, 4, 56, 56), "float16", "Ascend910B2")
    assert f32.bytes_per_elem == 12 and f16.bytes_per_elem == 2 * 2 + 3 * 4
    assert f32.ub_block_elems == (196352 - 1024) // 12 // 64 * 64


@pytest.mark.parametrize("shape, dtype, mean_dtype", [
    ((2048,), "float16", "float16"), ((1000,), "bfloat16", "bfloat16"), ((4096,), "float32", "float32"),
    ((1024,), "float16", "float32"),
])
def test_arch35_unit_cases_take_the_elementwise_key(shape, dtype, mean_dtype):
    """test_sync_batch_norm_backward_elemt_tiling.cpp (Ascend950, 64 cores): these succeed with key 0. The
    unit test feeds the kernel's own 1-D view; here the same elements as (N, C=1)."""
    plan = tiling.plan_batch_norm_backward_elemt((shape[0], 1), dtype, "Ascend950", stats_dtype=mean_dtype)
    assert plan.tiling_key == 0 and plan.elems == shape[0]


def test_arch35_unit_case_dtype_not_equal_fails():
    with pytest.raises(TilingError, match="stats dtype must be the input's"):
        tiling.plan_batch_norm_backward_elemt((1024, 1), "float32", "Ascend950", stats_dtype="float16")


def test_elemt_split_by_hand():
    plan = tiling.plan_batch_norm_elemt((32, 64, 56, 56), "float32", "Ascend910B2")
    elems = 32 * 64 * 56 * 56
    block_former = -(-elems // 48 // 64) * 64 if elems % (48 * 64) else elems // 48
    assert plan.block_former == block_former == 133824 and plan.block_dim == 48
    # UB: x and y double-buffered (16 bytes) + two float32 temporaries = 24 bytes per element
    assert plan.bytes_per_elem == 24 and plan.ub_former == (196352 - 1024) // 24 // 64 * 64
    assert plan.recompute_var and tiling.plan_batch_norm_elemt((2, 3), "float32", "host").recompute_var is False
