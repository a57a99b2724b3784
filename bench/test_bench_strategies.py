"""Every applicable strategy of each op at standard shapes, and the default A2 plan against the host plan:
time, error against the op's float64 reference (max |error| / max |reference| over the outputs), and an
atomic plan's spread over arrival orders, measured as ``normkern bench`` measures them."""

from __future__ import annotations

import pytest

from normkern.benchmark import run_bench

from .conftest import record

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
    """``normkern bench``'s measurement (``run_bench``): each row's median and IQR, its error, an atomic
    plan's spread over 10 arrival orders, and whether the row and the machine were steady enough to trust."""
    report = run_bench(op, shape, socs=SOCS.get(op, ("Ascend910B2", "host")), repeat=7, arrival_orders=10,
                       options=extra)
    for row in report.rows:
        if row.refused:
            record({"op": op, "shape": "x".join(map(str, shape)), "soc": row.soc, "strategy": row.strategy,
                    "refused": row.refused[:80]})
            continue
        record({"op": op, "shape": "x".join(map(str, shape)), "soc": row.soc, "strategy": row.strategy,
                "ms": round(row.median_ms, 3), "iqr_ms": round(row.iqr_ms, 3), "rel_error": float(f"{row.max_err:.2e}"),
                "deterministic": row.deterministic, "arrival_orders": row.arrival_orders,
                "distinct": row.distinct, "max_ulp": row.max_ulp, "trusted": row.trusted and not report.busy,
                "plan": row.plan})
