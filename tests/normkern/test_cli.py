import json
import re
import subprocess
import sys

import tiling
from normkern.cli import main


def test_socs_lists_every_preset(capsys):
    assert main(["socs"]) == 0
    out = capsys.readouterr().out
    for name in tiling.soc_names():
        assert name in out
    assert "196352" in out


def test_plan_json_is_the_plan(capsys):
    assert main(["plan", "batch_norm_stats", "--shape", "32,64,56,56", "--dtype", "float32",
                 "--soc", "Ascend910B2", "--json"]) == 0
    plan = tiling.Plan.from_json(capsys.readouterr().out)
    assert plan == tiling.plan_batch_norm_stats((32, 64, 56, 56), "float32", "Ascend910B2")


def test_plan_table_and_errors(capsys):
    assert main(["plan", "batch_norm_stats", "--shape", "8,4,100", "--strategy", "atomic"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("batch_norm_stats[atomic] Ascend910B2")
    assert re.search(r"^deterministic +False +derived from the reduction tree$", out, re.M)
    assert main(["plan", "batch_norm_stats", "--shape", "5"]) == 2
    assert "input must have rank 2 to 8, got rank 1" in capsys.readouterr().err


def test_run_checks_against_reference_and_simulator():
    out = subprocess.run([sys.executable, "-m", "normkern", "run", "batch_norm_stats", "--shape", "4,8,100",
                          "--soc", "host", "--repeat", "2", "--check", "--json"],
                         capture_output=True, text=True, check=True).stdout
    report = json.loads(out)
    assert report["bitwise_equal_to_simulator"] is True and report["output1_max_err_rel_to_max"] < 1e-5


def test_gather_plan_on_the_950(capsys):
    assert main(["plan", "batch_norm_gather_stats_with_counts", "--shape", "8,2048", "--soc", "Ascend950"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("batch_norm_gather_stats_with_counts[common] Ascend950 key=101 cores=64")
    assert re.search(r"^tiling_data.ubFormer +835$", out, re.M)


def test_fast_batch_norm_backward_plan(capsys):
    assert main(["plan", "fast_batch_norm_backward", "--shape", "8,64,32,32", "--inference"]) == 0
    assert capsys.readouterr().out.startswith("fast_batch_norm_backward[full_load] Ascend910B2 key=10001 cores=32")


def test_run_fast_batch_norm_backward_on_the_a2_plan():
    out = subprocess.run([sys.executable, "-m", "normkern", "run", "fast_batch_norm_backward", "--shape", "16,30,40,40",
                          "--repeat", "1", "--check", "--json"], capture_output=True, text=True, check=True).stdout
    report = json.loads(out)
    assert report["plan"].startswith("fast_batch_norm_backward[split_load_cross_core] Ascend910B2 key=40012")
    assert report["bitwise_equal_to_simulator"] is True
    assert max(report[f"output{i}_max_err_rel_to_max"] for i in range(3)) < 1e-5


def test_run_gather_stats_includes_the_running_update():
    """The gather op updates running_mean/var in place: the report checks that first update too."""
    out = subprocess.run([sys.executable, "-m", "normkern", "run", "batch_norm_gather_stats_with_counts", "--shape",
                          "300,64", "--repeat", "3", "--check", "--json"], capture_output=True, text=True,
                         check=True).stdout
    report = json.loads(out)
    assert report["plan"].startswith("batch_norm_gather_stats_with_counts[")
    assert report["bitwise_equal_to_simulator"] is True
    assert max(report[f"output{i}_max_err_rel_to_max"] for i in range(4)) < 1e-5
