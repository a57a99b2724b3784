"""Typed TilingData: one frozen record per CANN struct, every word in struct order, separate from what
the planner derives."""

import dataclasses

import pytest

import tiling
from tiling import Plan
from tiling.fast_batch_norm_backward import FullLoadTilingData


def test_a_plan_carries_its_template_struct_frozen():
    plan = tiling.plan_fast_batch_norm_backward((8, 64, 7, 7), "float32", "Ascend910B2", epsilon=1e-3)
    td = plan.tiling_data
    assert type(td) is FullLoadTilingData and type(td).struct == "BatchNormGradV3FullLoadTilingData"
    assert type(td).header.endswith("batch_norm_grad_v3_tiling.h")
    assert list(td)[-1] == "epsilon" and td["epsilon"] == td.epsilon == pytest.approx(1e-3, rel=1e-7)
    with pytest.raises(dataclasses.FrozenInstanceError):
        td.cUbBlock = 1
    with pytest.raises(KeyError):
        td["_offset"]


def test_json_gives_back_the_same_record():
    for plan in (tiling.plan_fast_batch_norm_backward((32, 30, 40, 40), "float16"),
                 tiling.plan_group_norm_backward(12, 64, 128 * 128, 32),
                 tiling.plan_batch_norm_gather_stats_with_counts(300, 64, "float32", "Ascend950")):
        again = Plan.from_json(plan.to_json())
        assert again == plan and type(again.tiling_data) is type(plan.tiling_data)


def test_words_must_be_the_struct_in_order():
    words = dict(tiling.plan_fast_batch_norm_backward((8, 64, 7, 7)).tiling_data)
    with pytest.raises(ValueError, match="BatchNormGradV3FullLoadTilingData words must be b1Dim, aDim"):
        FullLoadTilingData.from_words(dict(reversed(list(words.items()))))
    with pytest.raises(ValueError, match="must be"):
        FullLoadTilingData.from_words(words | {"_offset": 1})


def test_the_epsilon_word_is_the_calls_eps_as_float32():
    a = tiling.plan_fast_batch_norm_backward((8, 64, 7, 7), epsilon=1e-5)
    b = tiling.plan_fast_batch_norm_backward((8, 64, 7, 7), epsilon=0.1)
    assert a.tiling_data.epsilon == 9.999999747378752e-06 and b.tiling_data.epsilon == 0.10000000149011612
    assert a.kernel_args().count == b.kernel_args().count and a.block_dim == b.block_dim
