"""``normkern bench``: an op's strategies on one problem, timed, checked against float64 and, for plans
with atomic levels, replayed over arrival orders.

``run_bench(op, shape, ...)`` runs, for each SoC and strategy asked (default: every strategy of the
op), one untimed call (it compiles or loads the kernels), ``repeat`` timed calls (median and
interquartile range), the error of the first call's outputs against the float64 reference, and, for
a non-deterministic plan, ``arrival_orders`` calls with seeded arrival orders: how many distinct
results each output took and their largest distance in ULP from the first. A STREAM-like triad (NumPy,
one thread) runs before and after: when the two disagree, the machine was busy and the timings are
suspect; a row whose interquartile range is a large part of its median is flagged too.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field

import numpy as np

import tiling

from . import registry, runtime
from .determinism import _rel, _ulp
from .errors import InvalidParameterError, NormkernError
from .progress import Lines, progress
from .runtime import settings

#: A row is not to be trusted when its interquartile range exceeds this fraction of its median.
SPREAD_LIMIT = 0.25
#: The machine looks busy when the triads before and after differ by more than this fraction.
TRIAD_LIMIT = 0.25
_TRIAD_BYTES = 64 << 20


def triad_gbps(rounds: int = 5) -> float:
    """A STREAM-like triad ``a = b + 3 c`` over float32 arrays of 64 MiB (NumPy, one thread): GB/s of the
    median round, counting the three arrays once each."""
    n = _TRIAD_BYTES // 4
    a, b, c = np.empty(n, np.float32), np.ones(n, np.float32), np.full(n, 2.0, np.float32)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        np.multiply(c, np.float32(3.0), out=a)
        np.add(a, b, out=a)
        times.append(time.perf_counter() - start)
    return 3 * _TRIAD_BYTES / float(np.median(times)) / 1e9


@dataclass
class BenchRow:
    """One SoC and strategy: its timings, error and (atomic plans) spread over arrival orders; ``refused``
    says why a strategy could not run this problem (the other fields are then empty)."""

    soc: str
    strategy: str
    plan: str = ""
    deterministic: bool = True
    median_ms: float = 0.0
    iqr_ms: float = 0.0
    gbps: float = 0.0
    max_err: float = 0.0
    arrival_orders: int = 0
    distinct: int = 0
    max_ulp: int = 0
    refused: str = ""

    @property
    def trusted(self) -> bool:
        """The interquartile range is at most ``SPREAD_LIMIT`` of the median."""
        return not self.median_ms or self.iqr_ms <= SPREAD_LIMIT * self.median_ms


@dataclass
class BenchReport:
    op: str
    shape: tuple[int, ...]
    dtype: str
    options: dict
    threads: int
    repeat: int
    triad_before_gbps: float
    triad_after_gbps: float
    rows: list[BenchRow] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        """The triads before and after disagree by more than ``TRIAD_LIMIT``."""
        low, high = sorted((self.triad_before_gbps, self.triad_after_gbps))
        return high > 0 and (high - low) > TRIAD_LIMIT * high

    def table(self) -> str:
        """The rows as a text table, with the warnings under it."""
        head = ("soc", "strategy", "median ms", "IQR", "GB/s", "err vs f64", "atomic: distinct / max ULP", "")
        lines = [head]
        for row in self.rows:
            if row.refused:
                continue
            atomic = f"{row.distinct} / {row.max_ulp} over {row.arrival_orders} orders" if row.arrival_orders \
                else "deterministic"
            lines.append((row.soc, row.strategy, f"{row.median_ms:.3f}", f"{row.iqr_ms / row.median_ms:.0%}",
                          f"{row.gbps:.1f}", f"{row.max_err:.1e}", atomic, "" if row.trusted else "(!)"))
        widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
        out = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines]
        out.insert(1, "  ".join("-" * w for w in widths[:-1]))
        shape = "x".join(map(str, self.shape))
        options = "".join(f" {k}={v}" for k, v in self.options.items())
        out.insert(0, f"{self.op} {shape} {self.dtype}{options}, {self.threads} threads, median of {self.repeat} "
                      f"calls; triad {self.triad_before_gbps:.1f} GB/s before, {self.triad_after_gbps:.1f} after")
        out += [f"{row.soc} {row.strategy}: cannot run: {row.refused}" for row in self.rows if row.refused]
        if any(not row.trusted for row in self.rows):
            out.append(f"(!) interquartile range above {SPREAD_LIMIT:.0%} of the median: too wide to trust")
        if self.busy:
            out.append(f"warning: the machine looks busy (the triad read {self.triad_before_gbps:.1f} GB/s before "
                       f"and {self.triad_after_gbps:.1f} after): these timings are suspect")
        return "\n".join(out)

    def to_json(self, indent: int | None = 2) -> str:
        payload = asdict(self)
        payload["busy"] = self.busy
        for row, data in zip(self.rows, payload["rows"], strict=True):
            data["trusted"] = row.trusted
        return json.dumps(payload, indent=indent)

    def plot_points(self) -> list[tuple[str, float, float]]:
        """``(label, median ms, error)`` of every row that ran: what ``plot`` draws."""
        return [(f"{row.soc} {row.strategy}", row.median_ms, row.max_err) for row in self.rows if not row.refused]


def _fresh(kw: dict, updated: tuple[str, ...]) -> dict:
    """``kw`` with a copy of each input the op updates in place (the others are only read: copying them
    too would put a fresh allocation's page faults and cache misses around every timed call)."""
    return {k: (v.copy() if k in updated and isinstance(v, np.ndarray) else v) for k, v in kw.items()}


def max_error(outputs, reference) -> float:
    """The largest error of any output against its float64 reference, relative to the reference's max
    (``determinism``'s measure, output by output)."""
    return max((_rel(np.asarray(got), np.asarray(want)) for got, want in zip(outputs, reference, strict=True)
                if got is not None and want is not None), default=0.0)


def run_bench(op: str, shape, dtype: str = "float32", *, socs=(None,), strategies=None, repeat: int = 15,
              arrival_orders: int = 20, seed: int = 0, eps: float = 1e-5, options: dict | None = None,
              show_progress: bool = False) -> BenchReport:
    """Time, check and (atomic plans) replay ``op`` on seeded random inputs of ``shape``, for each of
    ``socs`` (None: the default SoC) and ``strategies`` (names, None for the default; default: every
    strategy of the op but ``empty``). A strategy a SoC cannot run for this problem is a row with the
    reason in ``refused``."""
    from .examples import example_inputs

    record = registry.get(op, "bench")
    if strategies is None:
        strategies = [s.value for s in record.strategies if s.value != "empty"]
    options = dict(options or {})
    pristine = example_inputs(record.name, tuple(shape), dtype, seed=seed, eps=eps, **options)
    reference = record.reference(pristine)
    nbytes = record.bytes_moved(pristine)
    report = BenchReport(op=record.name, shape=tuple(shape), dtype=dtype, options=options,
                         threads=runtime.get_num_threads(), repeat=repeat, triad_before_gbps=triad_gbps(),
                         triad_after_gbps=0.0)
    configurations = [(soc, strategy) for soc in socs for strategy in strategies]
    with progress(len(configurations), unit="strategy") if show_progress else Lines() as bar:
        for soc, strategy in configurations:
            spec = settings.resolve_soc(soc, record.name)
            name = strategy or "default"
            row = BenchRow(soc=spec.name, strategy=name)
            report.rows.append(row)
            bar.set_description_str(f"{spec.name} {name}: planning and compiling")
            try:
                plan = record.plan(_fresh(pristine, record.updated), spec, strategy)
                first = record.call(_fresh(pristine, record.updated), soc=spec, strategy=strategy, arrival_seed=0)
            except (NormkernError, tiling.TilingError) as error:
                row.refused = str(error).splitlines()[0]
                bar.update()
                continue
            row.plan, row.deterministic = str(plan), bool(plan.deterministic)
            row.max_err = max_error(first, reference)
            bar.set_description_str(f"{spec.name} {name}: {repeat} timed calls")
            times = []
            for _ in range(repeat):
                args = _fresh(pristine, record.updated)
                start = time.perf_counter()
                record.function(**args, soc=spec, strategy=strategy, arrival_seed=0)
                times.append(time.perf_counter() - start)
            q1, median, q3 = np.percentile(times, [25, 50, 75])
            row.median_ms, row.iqr_ms = float(median * 1e3), float((q3 - q1) * 1e3)
            row.gbps = float(nbytes / median / 1e9)
            if not plan.deterministic:
                bar.set_description_str(f"{spec.name} {name}: {arrival_orders} arrival orders")
                seen = [set() for _ in first]
                for order in range(arrival_orders):
                    outputs = record.call(_fresh(pristine, record.updated), soc=spec, strategy=strategy,
                                          arrival_seed=order)
                    for k, (got, base) in enumerate(zip(outputs, first, strict=True)):
                        if got is None:
                            continue
                        seen[k].add(hashlib.blake2b(np.ascontiguousarray(got).tobytes(), digest_size=16).digest())
                        row.max_ulp = max(row.max_ulp, _ulp(np.asarray(got), np.asarray(base)))
                row.arrival_orders = arrival_orders
                row.distinct = max(len(s) for s in seen)
            bar.update()
    report.triad_after_gbps = triad_gbps()
    return report


def plot(report: BenchReport, path: str) -> None:
    """Time against error, one point per strategy and SoC (matplotlib, the ``plot`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InvalidParameterError(report.op, "--plot", "needs matplotlib (pip install -e '.[plot]')",
                                    repr(path)) from None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, ms, err in report.plot_points():
        ax.scatter([ms], [max(err, 1e-12)])
        ax.annotate(label, (ms, max(err, 1e-12)), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("median time (ms)")
    ax.set_ylabel("max error vs float64 (relative to max)")
    ax.set_title(f"{report.op} {'x'.join(map(str, report.shape))} {report.dtype}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
