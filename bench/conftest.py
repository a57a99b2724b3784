"""Benchmark harness: environment record, same-run memory bandwidth, a summary at the end.

Run with ``python -m pytest bench`` (the default test run does not collect bench/). Results go to
``bench/results/``: ``environment.json`` and one JSON per run with every row's figures.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import numba
import numpy as np
import pytest
from numba import njit, prange

import normkern
from normkern.kernels.lanes import LANES, accumulate, fold
from normkern.runtime import cache as _cache

RESULTS = Path(__file__).parent / "results"
ROWS: list[dict] = []
THREADS = int(os.environ.get("NORMKERN_BENCH_THREADS", "2"))
STREAM_BYTES = 256 * 2**20


@njit(parallel=True, cache=True)
def _stream_read(x, out):
    """STREAM-like read: every thread sums its contiguous share with the 64-lane loop."""
    parts = out.shape[0]
    share = x.shape[0] // parts
    for p in prange(parts):
        lanes = np.zeros(LANES, np.float32)
        accumulate(lanes, x[p * share:(p + 1) * share])
        out[p] = fold(lanes)


@njit(parallel=True, cache=True)
def _stream_triad(a, b, c, scalar):
    for i in prange(a.shape[0]):
        a[i] = b[i] + scalar * c[i]


def median_seconds(fn, rounds=15, warmup=2) -> tuple[float, float]:
    """(median, interquartile range) of ``rounds`` timed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    q1, med, q3 = np.percentile(times, [25, 50, 75])
    return float(med), float(q3 - q1)


def interleaved_medians(runs: dict, rounds: int = 15, passes: int = 2) -> dict[str, tuple[float, float]]:
    """Each callable's best (median, iqr) over ``passes`` interleaved passes: a machine whose speed
    drifts then slows every implementation in the same pass, and the ratios of a row stay honest."""
    times: dict[str, tuple[float, float]] = {}
    for _ in range(passes):
        for name, fn in runs.items():
            med, iqr = median_seconds(fn, rounds=rounds)
            if name not in times or med < times[name][0]:
                times[name] = (med, iqr)
    return times


def timing_columns(row: dict, times: dict, nbytes: int) -> None:
    """``<name>_ms``, ``<name>_iqr_ms`` and ``<name>_GBps`` (from the op's bytes model) of every timed callable."""
    for name, (med, iqr) in times.items():
        row[f"{name}_ms"] = round(med * 1e3, 3)
        row[f"{name}_iqr_ms"] = round(iqr * 1e3, 3)
        row[f"{name}_GBps"] = round(nbytes / med / 1e9, 1)


def time_against_triad(benchmark, stream, runs: dict, row: dict, nbytes: int, names, ceilings=()) -> dict:
    """Time ``runs`` interleaved with the STREAM triad of the same rounds, then fill ``row``: the timing
    columns, ``stream_triad_GBps``, and for each of ``names`` its triad fraction (3-tensor-pass bytes
    model) and its speed-up over ``torch`` where that ran; for each of ``ceilings`` (loops that model
    an op without its arithmetic, or without its exact order) that ran, the same two. Returns the
    (median, iqr) times.

    A triad of the op's own bytes runs in the same rounds: ``torch`` time over its time,
    ``torch_over_own_bytes_triad``, is the speed-up over PyTorch that a kernel moving only the bytes
    model's bytes at triad speed would have; a target above it is beyond this machine."""
    runs["stream_triad"] = stream.triad
    # the op's own traffic with the least arithmetic, in the op's cache state (a problem that stays
    # in L3 between calls is served from L3 here too): two arrays of a third of the bytes read, one written
    runs["own_bytes_triad"] = Stream(stream.threads, nbytes // 3).triad
    times = interleaved_medians(runs, rounds=11)
    benchmark.pedantic(runs[names[0]], rounds=5, warmup_rounds=1)
    triad = 3 * stream.array_bytes / times.pop("stream_triad")[0] / 1e9
    row["stream_triad_GBps"] = round(triad, 1)
    own = times.pop("own_bytes_triad")[0]
    row["own_bytes_triad_ms"] = round(own * 1e3, 3)
    if "torch" in times:
        row["torch_over_own_bytes_triad"] = round(times["torch"][0] / own, 2)
    timing_columns(row, times, nbytes)
    for name in (*names, *(c for c in ceilings if c in times)):
        row[f"{name}_triad_fraction"] = round(nbytes / times[name][0] / 1e9 / triad, 2)
        if "torch" in times:
            row[f"{name}_vs_torch"] = round(times["torch"][0] / times[name][0], 2)
    return times


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


@pytest.fixture(scope="session", autouse=True)
def bench_threads():
    numba.set_num_threads(THREADS)  # the ceilings' own parallel loops
    normkern.set_num_threads(THREADS)
    try:
        import torch

        torch.set_num_threads(THREADS)
    except ImportError:
        pass
    return THREADS


class Stream:
    """STREAM-like read and triad over arrays of ``array_bytes`` (256 MiB: DRAM), callable next to the
    kernels being compared."""

    def __init__(self, threads: int, array_bytes: int = STREAM_BYTES) -> None:
        self.threads, self.array_bytes = threads, array_bytes
        self.x = np.random.default_rng(0).random(max(array_bytes // 4, threads), dtype=np.float32)
        self.out = np.empty(threads, np.float32)
        self.a, self.c = np.empty_like(self.x), self.x[::-1].copy()

    def read(self) -> None:
        _stream_read(self.x, self.out)

    def triad(self) -> None:
        _stream_triad(self.a, self.x, self.c, np.float32(3.0))

    def measure(self) -> dict:
        read, _ = median_seconds(self.read)
        triad, _ = median_seconds(self.triad)
        return {"read_GBps": self.array_bytes / read / 1e9, "triad_GBps": 3 * self.array_bytes / triad / 1e9}


@pytest.fixture(scope="session")
def stream(bench_threads) -> Stream:
    return Stream(bench_threads)


@pytest.fixture(scope="session")
def environment(stream) -> dict:
    """Versions, CPU and a first bandwidth reading; each benchmark re-measures bandwidth beside itself."""
    import tiling
    from tiling.codec import to_data

    record = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
        "cpu": _cpu_model(), "threads": THREADS,
        "host_soc": to_data(tiling.host_soc()), **stream.measure(),
    }
    try:
        import torch

        record["torch"] = torch.__version__
    except ImportError:
        record["torch"] = None
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "environment.json").write_text(json.dumps(record, indent=2))
    return record


def record(row: dict) -> None:
    ROWS.append(row)


def pytest_collection_finish(session):
    """The bench's own cached loops compile the lanes helpers in: key their caches by them too."""
    _cache.key_by_helpers("bench")


def pytest_sessionfinish(session, exitstatus):
    if not ROWS:
        return
    RESULTS.mkdir(exist_ok=True)
    env_path = RESULTS / "environment.json"
    env = json.loads(env_path.read_text()) if env_path.exists() else {}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (RESULTS / f"run-{stamp}.json").write_text(json.dumps({"environment": env, "rows": ROWS}, indent=2))
    lines = ["", f"normkern bench ({env.get('threads')} threads, read {env.get('read_GBps', 0):.1f} GB/s, "
                 f"triad {env.get('triad_GBps', 0):.1f} GB/s)"]
    for row in ROWS:
        lines.append("  " + "  ".join(f"{k}={v}" for k, v in row.items()))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("\n".join(lines))
