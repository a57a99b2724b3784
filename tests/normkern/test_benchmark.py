"""normkern bench: every strategy timed and checked, atomic plans replayed, a busy machine said."""

import json

import numpy as np
import pytest

import normkern
from normkern.benchmark import BenchReport, BenchRow, run_bench
from normkern.cli import main
from normkern.examples import example_inputs


def test_atomic_rows_count_the_distinct_results_of_their_arrival_orders():
    report = run_bench("batch_norm_stats", (64, 4, 400), "float16", strategies=[None, "atomic"], repeat=3,
                       arrival_orders=6)
    default, atomic = report.rows
    assert (default.strategy, atomic.strategy) == ("default", "atomic")
    assert default.deterministic and default.arrival_orders == 0 and default.distinct == 0
    assert not atomic.deterministic and atomic.arrival_orders == 6
    # the same replays by hand: each output's distinct bit patterns, the largest ULP distance from seed 0
    x = example_inputs("batch_norm_stats", (64, 4, 400), "float16", seed=0, eps=1e-5)["input"]
    runs = [normkern.batch_norm_stats(x, 1e-5, strategy="atomic", arrival_seed=s) for s in range(6)]
    distinct = max(len({r[k].tobytes() for r in runs}) for k in range(2))
    ulp = max(int(np.abs(r[k].view(np.int32).astype(np.int64) - runs[0][k].view(np.int32)).max())
              for r in runs for k in range(2))  # positive floats: bit patterns order as the values
    assert (atomic.distinct, atomic.max_ulp) == (distinct, ulp)
    assert distinct > 1  # 48 partials added in 6 orders do not all agree
    for row in report.rows:
        assert 0 < row.max_err < 1e-5 and row.median_ms > 0 and row.gbps > 0 and row.iqr_ms >= 0


def test_a_strategy_that_cannot_run_is_listed_with_its_reason():
    report = run_bench("fast_batch_norm_backward", (4, 8, 5000), "float32", strategies=["full_load"], repeat=3)
    (row,) = report.rows
    assert "full_load" in row.refused and row.median_ms == 0
    assert "Ascend910B2 full_load: cannot run: " in report.table()


def _report(before, after, iqr):
    return BenchReport(op="batch_norm_stats", shape=(2, 3), dtype="float32", options={}, threads=2, repeat=5,
                       triad_before_gbps=before, triad_after_gbps=after,
                       rows=[BenchRow(soc="host", strategy="default", median_ms=1.0, iqr_ms=iqr, gbps=1.0)])


def test_wide_rows_and_a_busy_machine_are_flagged():
    calm = _report(20.0, 19.0, 0.1)
    assert not calm.busy and calm.rows[0].trusted
    assert "(!)" not in calm.table() and "busy" not in calm.table()
    noisy = _report(20.0, 12.0, 0.4)
    assert noisy.busy and not noisy.rows[0].trusted
    table = noisy.table()
    assert "(!) interquartile range above 25% of the median: too wide to trust" in table
    assert "the machine looks busy (the triad read 20.0 GB/s before and 12.0 after)" in table
    assert json.loads(noisy.to_json())["busy"] is True
    assert noisy.plot_points() == [("host default", 1.0, 0.0)]


def test_the_command_prints_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "group_norm_backward", "--shape", "4,8,6,6", "--group", "2", "--soc", "Ascend910B2,host",
                 "--strategy", "default,atomic", "--repeat", "3", "--arrival-orders", "4", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("group_norm_backward 4x8x6x6 float32 group=2, ")
    assert "over 4 orders" in text
    data = json.loads(out.read_text())
    assert [(r["soc"], r["strategy"]) for r in data["rows"]] == [
        ("Ascend910B2", "default"), ("Ascend910B2", "atomic"), ("host", "default"), ("host", "atomic")]
    assert all(r["median_ms"] > 0 for r in data["rows"])


def test_plot_needs_the_plot_extra_or_draws(tmp_path, capsys):
    args = ["bench", "batch_norm_stats", "--shape", "4,8,3", "--repeat", "3", "--out", str(tmp_path / "b.json"),
            "--plot", str(tmp_path / "b.png")]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert main(args) == 2
        assert "--plot needs matplotlib (pip install -e '.[plot]')" in capsys.readouterr().err
    else:
        assert main(args) == 0 and (tmp_path / "b.png").stat().st_size > 0


@pytest.mark.parametrize("args", [["--repeat", "2"], ["--arrival-orders", "0"]])
def test_too_few_calls_are_refused(args, capsys):
    assert main(["bench", "batch_norm_stats", "--shape", "4,8,3", *args]) == 2
    assert "--repeat must be at least 3 and --arrival-orders at least 1" in capsys.readouterr().err
