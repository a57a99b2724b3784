import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from numba.core.dispatcher import Dispatcher

import normkern
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
    assert capsys.readouterr().err == ("normkern: error: [batch_norm_stats] --shape must be the input's shape "
                                       "(e.g. 32,64,56,56), got '5'\n")


def test_run_checks_against_reference_and_simulator():
    out = subprocess.run([sys.executable, "-m", "normkern", "run", "batch_norm_stats", "--shape", "4,8,100",
                          "--soc", "host", "--repeat", "2", "--check", "--json"],
                         capture_output=True, text=True, check=True).stdout
    report = json.loads(out)
    assert report["bitwise_equal_to_simulator"] is True and report["invstd_max_err_rel_to_max"] < 1e-5


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
    assert max(report[f"{name}_max_err_rel_to_max"] for name in ("grad_input", "grad_weight", "grad_bias")) < 1e-5


def test_run_gather_stats_includes_the_running_update():
    """The gather op updates running_mean/var in place: the report checks that first update too."""
    out = subprocess.run([sys.executable, "-m", "normkern", "run", "batch_norm_gather_stats_with_counts", "--shape",
                          "300,64", "--repeat", "3", "--check", "--json"], capture_output=True, text=True,
                         check=True).stdout
    report = json.loads(out)
    assert report["plan"].startswith("batch_norm_gather_stats_with_counts[")
    assert report["bitwise_equal_to_simulator"] is True
    assert max(report[f"{name}_max_err_rel_to_max"]
               for name in ("mean_all", "invstd_all", "running_mean", "running_var")) < 1e-5


@pytest.mark.parametrize("argv, message", [
    ("run batch_norm_stats --shape 4,8,3,3 --soc Ascend310P3",
     "[batch_norm_stats] soc must support aclnnBatchNormStats (CANN has no kernel for Atlas inference), got "
     "Ascend310P3"),
    ("plan batch_norm_stats --shape 4,8,3,3 --soc Ascend310P3",
     "[batch_norm_stats] soc must support aclnnBatchNormStats (CANN has no kernel for Atlas inference), got "
     "Ascend310P3"),
    ("run batch_norm_gather_stats_with_counts --shape 4,8,3,3",
     "[batch_norm_gather_stats_with_counts] --shape must be D,C, the shape of the per-device mean, got '4,8,3,3'"),
    ("plan batch_norm_stats --shape 4,8,-3",
     "[batch_norm_stats] --shape must be comma-separated non-negative ints, got '4,8,-3'"),
    ("run batch_norm_stats --shape 4,8,3 --repeat 0", "[batch_norm_stats] --repeat must be at least 1, got 0"),
    ("plan batch_norm_stats --shape 4,8,3,3 --dtype bfloat16",
     "[batch_norm_stats] dtype must be one of float32, float16 on Ascend910B2, got bfloat16"),
    ("run batch_norm_stats --shape 4,8,3,3 --dtype bfloat16",
     "[batch_norm_stats] input dtype must be one of float32, float16 on Ascend910B2, got bfloat16"),
    ("plan group_norm_backward --shape 4,8,3 --soc Ascend310P3",
     "[group_norm_backward] soc must support aclnnGroupNormBackward (CANN has no kernel for Atlas inference), got "
     "Ascend310P3"),
    ("plan batch_norm_stats --shape 4,8 --group 2", "[batch_norm_stats] --group applies only to group_norm_backward"),
    ("determinism batch_norm_stats --shape 4,8 --threads 1,x",
     "[batch_norm_stats] --threads must be comma-separated ints, got '1,x'"),
])
def test_bad_calls_print_one_error_line_and_exit_2(argv, message):
    """What the plan refuses, the run refuses too (one support table), each as one line naming the op."""
    result = subprocess.run([sys.executable, "-m", "normkern", *argv.split()], capture_output=True, text=True)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"normkern: error: {message}\n")


def test_run_names_every_output(capsys):
    assert main(["run", "group_norm_backward", "--shape", "2,4,3", "--group", "2", "--soc", "host", "--repeat", "1",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [k for k in report if k.endswith("_max_err_rel_to_max")] == [
        "grad_input_max_err_rel_to_max", "grad_gamma_max_err_rel_to_max", "grad_beta_max_err_rel_to_max"]


def test_help_version_and_json_listings(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out == f"normkern {normkern.__version__}\n"
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    helptext = capsys.readouterr().out
    words = " ".join(helptext.split())  # argparse wraps lines at the terminal's width
    assert "``" not in helptext and "default Ascend910B2" in words and "split_c, split_r, atomic" in words
    assert main(["socs", "--json"]) == 0
    socs = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in socs] == list(tiling.soc_names()) and socs[0]["ub_bytes"] == 196352
    assert main(["ops", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"op": "batch_norm_stats", "family": "DAV_2201", "dtypes": ["float32", "float16"], "tiling": "modeled",
            "note": "the A2/A3 kernel is closed TBE", "mixed": False} in rows


@pytest.mark.parametrize("op, soc, head", [
    ("batch_norm_elemt", "Ascend910B2", "batch_norm_elemt[elementwise] Ascend910B2 cores=48"),
    ("batch_norm_backward_reduce", "Ascend950", "batch_norm_backward_reduce[split_c] Ascend950 cores=64"),
    ("batch_norm_backward_elemt", "Ascend950", "batch_norm_backward_elemt[elementwise] Ascend950 key=0 cores=64"),
])
def test_the_sync_batch_norm_ops_plan_run_and_check_determinism(capsys, op, soc, head):
    assert main(["plan", op, "--shape", "32,64,56,56", "--soc", soc]) == 0
    assert capsys.readouterr().out.startswith(head)
    assert main(["run", op, "--shape", "3,5,7,9", "--soc", soc, "--repeat", "1", "--check", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bitwise_equal_to_simulator"] is True
    errors = [v for k, v in report.items() if k.endswith("_max_err_rel_to_max")]
    assert errors and max(errors) < 1e-5
    assert main(["determinism", op, "--shape", "3,5,7,9", "--soc", soc, "--runs", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["deterministic"] is True


#: The plan pictures docs/design.md shows, and the commands that draw them.
DOC_PICTURES = {
    "batch_norm_stats_split_c.svg": ["plan", "batch_norm_stats", "--shape", "32,64,56,56"],
    "fast_batch_norm_backward_cross_core.svg": ["plan", "fast_batch_norm_backward", "--shape", "32,256,56,56",
                                                "--dtype", "float16"],
}


@pytest.mark.parametrize(("args", "head"), [
    (["batch_norm_stats", "--shape", "32,64,56,56"], "batch_norm_stats [split_c] on Ascend910B2"),
    (["fast_batch_norm_backward", "--shape", "32,256,56,56", "--dtype", "float16"],
     "fast_batch_norm_backward [split_load_cross_core] on Ascend910B2"),
    (["group_norm_backward", "--shape", "8,256,56,56", "--group", "32", "--strategy", "atomic"],
     "group_norm_backward [atomic] on Ascend910B2"),
    (["group_norm_backward", "--shape", "8,64,14,14", "--group", "8", "--soc", "host"],
     "group_norm_backward [groups] on host"),
    (["group_norm_backward", "--shape", "8,64,14,14", "--group", "8", "--soc", "host", "--strategy", "cann"],
     "group_norm_backward [cann] on host"),
])
def test_plan_draws_its_picture(tmp_path, capsys, args, head):
    path = tmp_path / "plan.svg"
    assert main(["plan", *args, "--svg", str(path)]) == 0
    assert f"wrote the plan's picture to {path}" in capsys.readouterr().err
    root = ET.fromstring(path.read_text())
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert texts[0].startswith(head + " (")
    shares = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("class") == "share"]
    assert shares
    if "atomic" in args:  # the first group's arrival order of seed 0, as `run` replays it
        order = normkern.ops.group_norm_backward.api.arrival_order(
            tiling.plan_group_norm_backward(8, 256, 3136, 32, "float32", tiling.DEFAULT_SOC, "atomic"), 0)[0]
        assert f"arrival e.g. {', '.join(map(str, order))}" in texts


@pytest.mark.parametrize("soc", ["Ascend950", "Ascend910"])
def test_group_norm_backward_plans_on_atlas_training_and_950(soc, capsys):
    assert main(["plan", "group_norm_backward", "--shape", "8,64,14,14", "--group", "8", "--soc", soc]) == 0
    out = capsys.readouterr().out
    if soc == "Ascend950":  # its own arch35 code: the key of mode 100 with float32
        assert out.startswith("group_norm_backward[arch35] Ascend950 key=101 cores=64 ")
        assert re.search(r"^source +cann-ops-nn ", out, re.M) and re.search(r"^stages +.*stage 2 \(mode 1\)", out, re.M)
    else:
        assert out.startswith(f"group_norm_backward[cann] {soc} cores=")
        assert re.search(r"^source +modeled ", out, re.M)


def test_plan_svg_to_a_path_that_cannot_be_written_is_one_error_line(tmp_path, capsys):
    assert main(["plan", "batch_norm_stats", "--shape", "4,8,3", "--svg", str(tmp_path / "no" / "a.svg")]) == 2
    assert "[batch_norm_stats] --svg cannot write" in capsys.readouterr().err


@pytest.mark.parametrize("name", DOC_PICTURES)
def test_the_docs_pictures_are_what_their_commands_draw(tmp_path, name):
    assert main([*DOC_PICTURES[name], "--svg", str(tmp_path / name)]) == 0
    committed = Path(__file__).resolve().parents[2] / "docs" / "images" / name
    assert committed.read_text() == (tmp_path / name).read_text(), f"redraw {name} (docs/design.md says how)"


def test_warmup_reports_each_kernel_call_and_refuses_unknown_ops(capsys):
    assert main(["warmup", "--ops", "batch_norm_stats", "--dtypes", "float32", "--socs", "host"]) == 0
    out = capsys.readouterr().out.splitlines()
    strategies = ("split_c", "split_r", "atomic", "channels")  # [1/10] and [6/10]: empty, no kernel
    assert [line.split(":")[0] for line in out[:-1]] == [
        f"[{first + k}/10] batch_norm_stats float32 host {name} {shape}"
        for first, shape in ((2, "4x8x6x6"), (7, "4x8x8x8")) for k, name in enumerate(strategies)]
    assert all(re.fullmatch(r".*: \d+\.\d\d s", line) for line in out[:-1])
    assert out[-1].startswith("warmed 8 kernel calls in ")
    assert main(["warmup", "--ops", "layer_norm"]) == 2
    assert "[warmup] op must be one of" in capsys.readouterr().err


def test_warmup_runs_every_body_of_every_op(monkeypatch, capsys):
    """Each op's warm-up calls (``OpRecord.warmup``) reach every per-core body (and every kernel of a
    one-thread op) of its kernel module, on the host's plans and on A2's (FastBatchNormBackward's training
    sweeps of the half dtypes with float16). The API calls them by module attribute, so a recording stand-in
    set there sees each call."""
    called = set()

    def recording(key, kernel):
        def record(*args):
            called.add(key)
            return kernel(*args)
        return record

    kernels = set()
    for name, module in list(sys.modules.items()):
        if name.startswith("normkern.ops.") and name.endswith(".kernel"):
            for attr, value in list(vars(module).items()):
                if isinstance(value, Dispatcher) and value.py_func.__module__ == name and (
                        value.targetoptions.get("nogil") or attr == "gather_stats"):
                    kernels.add((name, attr))
                    monkeypatch.setattr(module, attr, recording((name, attr), value))
    assert len(kernels) >= 11
    assert main(["warmup", "--dtypes", "float32", "--socs", f"host,{tiling.DEFAULT_SOC}"]) == 0
    assert "training=False" in capsys.readouterr().out
    assert main(["warmup", "--ops", "fast_batch_norm_backward", "--dtypes", "float16", "--socs",
                 f"host,{tiling.DEFAULT_SOC}"]) == 0
    assert kernels - called == set()


def test_run_says_its_first_call_compiles(capsys):
    assert main(["run", "batch_norm_stats", "--shape", "4,3,5", "--soc", "host", "--repeat", "1", "--json"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("[batch_norm_stats] first call: compiling its kernels, or loading them")
    assert re.fullmatch(r"\[batch_norm_stats\] first call done in \d+\.\d\d s", err[1])
