"""Prove or disprove that a computation is deterministic, and measure the spread when it is not.

``check_determinism(op, inputs)`` runs ``normkern.<op>(**inputs)`` repeatedly, for every requested
SoC plan and strategy, at every thread count, and (for plans with atomic levels) over arrival
orders; it compares every output bit for bit and reports, per output, whether the runs of each plan
were identical, how many distinct results appeared, the largest difference in ULP and relative
terms, and each distinct result's error against the op's float64 reference. Different plans are
compared with each other too: their bits differ because a plan defines the order of every addition.
"""

from __future__ import annotations

import inspect
import json
import sys
from dataclasses import asdict, dataclass, field

import numpy as np

from . import registry, runtime
from .errors import InvalidParameterError
from .runtime import settings
from .runtime.checks import is_int


def _ordered(values: np.ndarray) -> np.ndarray:
    """Bit patterns as integers in the order of the floats they encode (so differences count ULP)."""
    flat = np.ascontiguousarray(values).reshape(-1)
    if flat.dtype.itemsize == 4:
        bits, magnitude = flat.view(np.int32).astype(np.int64), 0x7FFFFFFF
    else:
        bits, magnitude = flat.view(np.int16).astype(np.int64), 0x7FFF
    return np.where(bits < 0, -(bits & magnitude), bits)


def _ulp(a: np.ndarray, b: np.ndarray) -> int:
    nan_a, nan_b = np.isnan(a.astype(np.float32)).reshape(-1), np.isnan(b.astype(np.float32)).reshape(-1)
    if (nan_a != nan_b).any():
        return 2**31
    diff = np.abs(_ordered(a) - _ordered(b))[~nan_a]
    return int(diff.max(initial=0))


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64).reshape(-1), b.astype(np.float64).reshape(-1)
    scale = np.nanmax(np.abs(b64), initial=0.0) or 1.0
    return float(np.nanmax(np.abs(a64 - b64), initial=0.0) / scale)


@dataclass
class OutputReport:
    """One output over a set of runs: were they bit-identical, and how far apart were they."""

    identical: bool
    distinct: int
    max_ulp: int
    max_rel: float
    errors: list[float] = field(default_factory=list)  # each distinct result's error against float64 (rel. to max)


@dataclass
class ConfigurationReport:
    soc: str
    strategy: str | None
    plan: str
    plan_deterministic: bool
    runs: int
    threads: list[int]
    arrival_orders: int
    outputs: dict[str, OutputReport]

    @property
    def deterministic(self) -> bool:
        return all(o.identical for o in self.outputs.values())


@dataclass
class DeterminismReport:
    op: str
    configurations: list[ConfigurationReport]
    outputs: dict[str, OutputReport]           # within each plan, worst case over the plans
    across_plans: dict[str, OutputReport] | None   # the plans' results compared with each other

    @property
    def deterministic(self) -> bool:
        """Every plan gave the same bits on every run, thread count and arrival order."""
        return all(c.deterministic for c in self.configurations)

    def __str__(self) -> str:
        parts = [_describe(c) if len(self.configurations) > 1 else _describe(c, named=False)
                 for c in self.configurations]
        if self.across_plans:
            name, worst = max(self.across_plans.items(), key=lambda kv: kv[1].distinct)
            if worst.distinct > 1:
                parts.append(f"the {len(self.configurations)} plans give {worst.distinct} different {name} results, "
                             f"max {worst.max_ulp} ULP (relative {worst.max_rel:.1e}) apart: the plan defines the "
                             "order")
            else:
                parts.append(f"the {len(self.configurations)} plans give the same bits")
        return "; ".join(parts)

    def to_json(self, indent: int | None = 2) -> str:
        payload = asdict(self)
        payload["deterministic"] = self.deterministic
        for config, data in zip(self.configurations, payload["configurations"], strict=True):
            data["deterministic"] = config.deterministic
        return json.dumps(payload, indent=indent)


def _describe(config: ConfigurationReport, named: bool = True) -> str:
    prefix = f"{config.soc}[{config.strategy or 'default'}]: " if named else ""
    total = config.runs * len(config.threads)
    threads = f"{len(config.threads)} thread count{'s' if len(config.threads) != 1 else ''}"
    if config.deterministic:
        orders = f", {config.arrival_orders} arrival orders" if not config.plan_deterministic else ""
        return f"{prefix}deterministic: {total} runs, {threads}{orders}, 1 distinct result"
    name, worst = max(config.outputs.items(), key=lambda kv: (kv[1].distinct, kv[1].max_ulp))
    over = f"{config.arrival_orders} arrival orders" if not config.plan_deterministic else f"{total} runs"
    return (f"{prefix}non-deterministic: {worst.distinct} distinct {name} results over {over} ({threads}), "
            f"max {worst.max_ulp} ULP (relative {worst.max_rel:.1e})")


def _spread(results: list[np.ndarray], reference) -> OutputReport:
    distinct: dict[bytes, np.ndarray] = {}
    for r in results:
        distinct.setdefault(np.ascontiguousarray(r).tobytes(), r)
    first = results[0]
    errors = [] if reference is None else [_rel(r, np.asarray(reference)) for r in distinct.values()]
    return OutputReport(identical=len(distinct) == 1, distinct=len(distinct),
                        max_ulp=max(_ulp(r, first) for r in distinct.values()),
                        max_rel=max(_rel(r, first) for r in distinct.values()), errors=errors)


def _copy(kw: dict) -> dict:
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in kw.items()}


def check_determinism(op: str, inputs: dict, *, runs: int = 20, threads=(1, 2), socs=None, strategies=None,
                      arrival_orders=None, progress: bool = False) -> DeterminismReport:
    """Run ``normkern.<op>(**inputs)`` ``runs`` times at each thread count, for each SoC plan and strategy.

    ``socs`` / ``strategies``: lists to compare (default: ``inputs``' own or the defaults).
    ``arrival_orders``: for ops with atomic strategies, None draws a fresh order every run (as
    hardware would), an int ``k`` cycles through seeds ``0..k-1``, a list gives the seeds. Inputs are
    copied for every run, so in-place outputs (running statistics) start from the same values.
    ``progress`` prints one line per plan and thread count to stderr.
    """
    record = registry.get(op, "check_determinism")
    if not isinstance(runs, int) or runs < 1:
        raise InvalidParameterError("check_determinism", "runs", "must be a positive int", repr(runs))
    given = threads
    try:
        threads = tuple(threads)
    except TypeError:
        threads = ()
    if not threads or any(not is_int(t) or not 1 <= t <= runtime.MAX_THREADS for t in threads):
        raise InvalidParameterError("check_determinism", "threads",
                                    f"must be a non-empty sequence of ints in 1..{runtime.MAX_THREADS}", repr(given))
    if not isinstance(inputs, dict):
        raise InvalidParameterError("check_determinism", "inputs", f"must be a dict of {op}'s keyword arguments",
                                    type(inputs).__name__)
    kw = dict(inputs)
    parameters = [p for p in inspect.signature(record.function).parameters.values()
                  if p.kind is p.POSITIONAL_OR_KEYWORD]
    missing = [p.name for p in parameters if p.default is p.empty and p.name not in kw]
    unknown = sorted(set(kw) - {p.name for p in parameters} - set(registry.COMMON_KEYWORDS))
    if missing or unknown:
        rule = f"must hold {op}'s arguments ({', '.join(p.name for p in parameters)})"
        raise InvalidParameterError("check_determinism", "inputs", rule,
                                    f"missing {missing}, unknown {unknown}" if unknown else f"missing {missing}")
    own_soc, own_strategy = kw.pop("soc", None), kw.pop("strategy", None)
    kw.pop("arrival_seed", None)
    socs = list(socs) if socs is not None else [own_soc]
    strategies = list(strategies) if strategies is not None else [own_strategy]
    if arrival_orders is None:
        seeds = [None]
    elif is_int(arrival_orders) and arrival_orders >= 1:
        seeds = list(range(arrival_orders))
    else:
        try:
            seeds = list(arrival_orders)
        except TypeError:
            seeds = []
        if not seeds or any(not is_int(s) or s < 0 for s in seeds):
            raise InvalidParameterError("check_determinism", "arrival_orders",
                                        "must be None, a positive int or a non-empty list of non-negative int seeds",
                                        repr(arrival_orders))
    names = record.all_outputs
    # every configuration's plan first: each runs the op's own checks, so bad inputs get the op's error
    # before the reference sees them
    plans = [(spec, strategy, record.plan(kw, spec, strategy))
             for spec in (settings.resolve_soc(soc, op) for soc in socs) for strategy in strategies]
    reference = record.reference(kw)
    configurations, firsts = [], []
    for spec, strategy, plan in plans:
        collected: dict[str, list[np.ndarray]] = {name: [] for name in names}
        for t in threads:
            if progress:
                print(f"[{op}] {spec.name} {plan.strategy.value}: {runs} runs at {t} threads", file=sys.stderr)
            with runtime.set_num_threads(t, exact=True):  # t threads however small the input
                for r in range(runs):
                    args = _copy(kw)
                    outs = record.call(args, soc=spec, strategy=strategy, arrival_seed=seeds[r % len(seeds)])
                    for name, value in zip(names, outs, strict=True):
                        if value is not None:
                            collected[name].append(np.array(value, copy=True))
        outputs = {name: _spread(values, ref) for (name, values), ref in zip(collected.items(), reference,
                                                                           strict=True) if values}
        orders = runs * len(threads) if seeds == [None] else len(seeds)
        configurations.append(ConfigurationReport(
            soc=spec.name, strategy=plan.strategy.value, plan=str(plan), plan_deterministic=plan.deterministic,
            runs=runs, threads=list(threads), arrival_orders=orders, outputs=outputs))
        firsts.append({name: values[0] for name, values in collected.items() if values})
    merged = {name: OutputReport(identical=all(c.outputs[name].identical for c in configurations),
                                 distinct=max(c.outputs[name].distinct for c in configurations),
                                 max_ulp=max(c.outputs[name].max_ulp for c in configurations),
                                 max_rel=max(c.outputs[name].max_rel for c in configurations),
                                 errors=[e for c in configurations for e in c.outputs[name].errors])
              for name in configurations[0].outputs}
    across = None
    if len(configurations) > 1:
        across = {name: _spread([f[name] for f in firsts], None) for name in merged}
    return DeterminismReport(op=op, configurations=configurations, outputs=merged, across_plans=across)
