"""BatchNormGatherStatsWithCounts in the op registry: its aclnn entry, plan, simulator, reference and examples."""

from __future__ import annotations

import numpy as np

import tiling

from ...registry import OpRecord, register
from .api import OP, _calls, batch_norm_gather_stats_with_counts, bind, prepare
from .reference import batch_norm_gather_stats_reference
from .simulator import simulate


def aclnn_get_workspace_size(input, mean, invstd, runningMean, runningVar, momentum, eps, counts, meanAll, invstdAll,
                             *, soc=None):
    """First phase of aclnnBatchNormGatherStatsWithCounts: ``(status, workspace_size, executor)``; the second
    phase writes meanAll/invstdAll and updates runningMean/runningVar in place."""
    return prepare(input, mean, invstd, runningMean, runningVar, momentum, eps, counts, meanAll, invstdAll, soc=soc)


def _plan(kw, soc, strategy):
    """The plan of the call itself (its own checks and planner call)."""
    return prepare(kw["input"], kw["mean"], kw["invstd"], kw.get("running_mean"), kw.get("running_var"),
                   kw["momentum"], kw["eps"], kw["counts"], None, None, soc=soc, strategy=strategy,
                   outputs_required=False).plan


def _plan_shape(shape, dtype, soc, strategy):
    return tiling.plan_batch_norm_gather_stats_with_counts(*shape, dtype, soc, strategy)


def _simulate(plan, kw):
    """mean_all, invstd_all in mean's dtype and the updated running statistics in theirs."""
    rm, rv = kw["running_mean"], kw["running_var"]
    mean_all, invstd_all, rm_new, rv_new = simulate(plan, kw["mean"], kw["invstd"], kw["counts"], rm, rv,
                                                    kw["momentum"], kw["eps"])
    return (mean_all.astype(kw["mean"].dtype), invstd_all.astype(kw["mean"].dtype), rm_new.astype(rm.dtype),
            rv_new.astype(rv.dtype))


def _reference(kw):
    return batch_norm_gather_stats_reference(kw["mean"], kw["invstd"], kw["counts"], kw.get("running_mean"),
                                             kw.get("running_var"), kw["momentum"], kw["eps"])


def _example(shape, dtype, rng, *, eps):
    """``shape`` is (D, C), the shape of the per-device statistics."""
    d, c = shape
    return {"input": np.empty((2, c), dtype), "mean": (rng.standard_normal((d, c)) + 1).astype(dtype),
            "invstd": rng.uniform(0.5, 2.0, (d, c)).astype(dtype), "running_mean": np.zeros(c, dtype),
            "running_var": np.ones(c, dtype), "momentum": 0.1, "eps": eps,
            "counts": rng.integers(1, 4096, d).astype(dtype)}


RECORD = register(OpRecord(
    name=OP, function=batch_norm_gather_stats_with_counts, bind=bind, signatures=_calls,
    aclnn_prepare=aclnn_get_workspace_size, outputs=("mean_all", "invstd_all"),
    updated=("running_mean", "running_var"), strategies=tiling.GatherStatsStrategy,
    plan=_plan, plan_shape=_plan_shape, simulate=_simulate, reference=_reference, example=_example,
    bytes_moved=lambda kw: kw["mean"].nbytes + kw["invstd"].nbytes + kw["counts"].nbytes,
    shape_help="D,C, the shape of the per-device mean", shape_ranks=(2, 2),
    warmup=(((6, 8), {}),),
))
