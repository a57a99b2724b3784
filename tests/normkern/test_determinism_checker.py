"""check_determinism and `normkern determinism`: deterministic plans, plans that differ, atomic spreads."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest

import normkern
from normkern import check_determinism
from normkern.examples import example_inputs


def test_a_deterministic_plan_gives_one_result_at_every_thread_count():
    report = check_determinism("fast_batch_norm_backward", example_inputs("fast_batch_norm_backward", (16, 30, 40, 40)),
                               runs=3, threads=(1, 2))
    assert report.deterministic and str(report) == "deterministic: 6 runs, 2 thread counts, 1 distinct result"
    assert all(o.identical and o.distinct == 1 and o.max_ulp == 0 for o in report.outputs.values())
    assert all(max(o.errors) < 1e-5 for o in report.outputs.values())   # against the float64 reference


def test_two_socs_give_different_bits_because_the_plan_defines_the_order():
    report = check_determinism("batch_norm_stats", example_inputs("batch_norm_stats", (64, 4, 4000)), runs=2,
                               socs=["Ascend910B2", "host"])
    assert report.deterministic and [c.soc for c in report.configurations] == ["Ascend910B2", "host"]
    assert report.across_plans["mean"].distinct == 2 or report.across_plans["invstd"].distinct == 2
    assert "the plan defines the order" in str(report)


def test_atomic_group_norm_differs_between_arrival_orders_within_a_bounded_spread():
    kw = example_inputs("group_norm_backward", (40, 8, 8, 8), group=2)
    report = check_determinism("group_norm_backward", kw, runs=12, threads=(1, 2), strategies=["atomic"],
                               arrival_orders=12)
    assert not report.deterministic
    gamma = report.outputs["grad_gamma"]
    assert 1 < gamma.distinct <= 12 and 0 < gamma.max_ulp < 1000 and gamma.max_rel < 1e-5
    assert report.outputs["grad_input"].identical          # dx does not see the arrival order
    assert str(report).startswith(f"non-deterministic: {max(o.distinct for o in report.outputs.values())} distinct")
    assert "over 12 arrival orders" in str(report)
    same = check_determinism("group_norm_backward", kw, runs=4, strategies=["atomic"], arrival_orders=[7])
    assert same.deterministic          # one seeded arrival order replays exactly


def test_the_default_group_norm_plan_is_deterministic_for_n_above_two():
    report = check_determinism("group_norm_backward", example_inputs("group_norm_backward", (9, 8, 64), group=4),
                               runs=4)
    assert report.deterministic and report.configurations[0].strategy == "cann"


def test_in_place_outputs_start_from_the_same_values_every_run():
    kw = example_inputs("batch_norm_gather_stats_with_counts", (64, 256))
    before = kw["running_mean"].copy()
    report = check_determinism("batch_norm_gather_stats_with_counts", kw, runs=3, socs=["Ascend950"])
    assert report.deterministic and report.outputs["running_mean"].distinct == 1
    assert np.array_equal(kw["running_mean"], before)


def test_report_json_and_bad_arguments():
    report = check_determinism("batch_norm_stats", example_inputs("batch_norm_stats", (4, 3, 100)), runs=2,
                               threads=(1,))
    data = json.loads(report.to_json())
    assert data["deterministic"] is True and data["configurations"][0]["outputs"]["mean"]["distinct"] == 1
    with pytest.raises(normkern.InvalidParameterError, match=r"check_determinism\] op must be one of "
                                                         "batch_norm, batch_norm_backward_elemt, "):
        check_determinism("layer_norm", {}, runs=1)
    with pytest.raises(normkern.InvalidParameterError, match="runs must be a positive int"):
        check_determinism("batch_norm_stats", {}, runs=0)


def test_cli_determinism_json():
    out = subprocess.run([sys.executable, "-m", "normkern", "determinism", "group_norm_backward", "--shape", "6,4,30",
                          "--group", "2", "--runs", "2", "--strategy", "default,atomic", "--arrival-orders", "2",
                          "--json"], capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    assert [c["strategy"] for c in data["configurations"]] == ["cann", "atomic"]
    assert data["configurations"][0]["deterministic"] is True


@pytest.mark.parametrize("op", normkern.registry.names())
def test_a_bad_input_gets_the_ops_own_error_before_the_reference_sees_it(op):
    kw = example_inputs(op, (6, 4) if normkern.registry.get(op).shape_ranks == (2, 2) else (3, 4, 5))
    kw["input"] = np.ones(5, np.float32)
    with pytest.raises(normkern.InvalidParameterError) as direct:
        getattr(normkern, op)(**kw)
    assert direct.value.status == 161002 and direct.value.op == op
    with pytest.raises(normkern.InvalidParameterError, match=re.escape(str(direct.value))):
        check_determinism(op, kw, runs=1)


def test_a_one_dimensional_stats_input_is_the_ops_rank_error():
    with pytest.raises(normkern.InvalidParameterError, match=re.escape(
            "[batch_norm_stats] input must have rank 2 to 8, got rank 1 (shape (5,))")):
        check_determinism("batch_norm_stats", {"input": np.ones(5, np.float32), "eps": 1e-5})
