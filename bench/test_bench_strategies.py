"""Every applicable strategy of each op at standard shapes, and the default A2 plan against the host plan:
time, and error against the op's float64 reference (max |error| / max |reference| over the outputs)."""

from __future__ import annotations

import numpy as np
import pytest

import tiling
from normkern import _registry
from normkern.benchmark import max_error
from normkern.examples import example_inputs

from .conftest import median_seconds, record

#: (op, shape, the op's own options); every strategy of the op but ``empty`` is tried.
CASES = [
    ("batch_norm_stats", (32, 64, 56, 56), {}),
    ("batch_norm_stats", (256, 4, 28, 28), {}),
    ("batch_norm_gather_stats_with_counts", (64, 2048), {}),
    ("fast_batch_norm_backward", (32, 64, 56, 56), {}),
    ("fast_batch_norm_backward", (8, 512, 7, 7), {}),
    ("group_norm_backward", (8, 256, 56, 56), {"group": 32}),
]
SOCS = {"batch_norm_gather_stats_with_counts": ("Ascend950", "host")}


@pytest.mark.parametrize("op, shape, extra", CASES, ids=lambda v: "x".join(map(str, v))
                         if isinstance(v, tuple) else v if isinstance(v, str) else "")
def test_strategies_and_plans(environment, op, shape, extra):
    record_ = _registry.get(op)
    kw = example_inputs(op, shape, **extra)
    reference = record_.reference(kw)
    call, seeded = record_.function, {"arrival_seed": 0}
    strategies = [s.value for s in record_.strategies if s.value != "empty"]
    for soc in SOCS.get(op, ("Ascend910B2", "host")):
        for strategy in strategies:
            try:
                plan = record_.plan(kw, soc, strategy)
            except tiling.TilingError as exc:
                record({"op": op, "shape": "x".join(map(str, shape)), "soc": soc, "strategy": strategy,
                        "refused": str(exc)[:80]})
                continue
            args = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
            outputs = call(**args, soc=soc, strategy=strategy, **seeded)
            med, iqr = median_seconds(lambda soc=soc, strategy=strategy, args=args: call(
                **args, soc=soc, strategy=strategy, **seeded), rounds=7, warmup=1)
            error = max_error(outputs, reference)
            record({"op": op, "shape": "x".join(map(str, shape)), "soc": soc, "strategy": strategy,
                    "ms": round(med * 1e3, 3), "iqr_ms": round(iqr * 1e3, 3), "rel_error": float(f"{error:.2e}"),
                    "deterministic": plan.deterministic, "plan": str(plan)})
