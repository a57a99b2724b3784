"""BatchNormStats in the op registry: its aclnn entry, plan, simulator, reference and examples."""

from __future__ import annotations

import tiling

from ...examples import activations
from ...registry import OpRecord, register
from .api import OP, _calls, arrival_order, batch_norm_stats, bind, bytes_moved, prepare
from .reference import batch_norm_stats_reference
from .simulator import simulate


def aclnn_get_workspace_size(input, eps, mean, invstd, *, soc=None):
    """First phase of aclnnBatchNormStats: ``(status, workspace_size, executor)``; the second phase
    writes ``mean`` and ``invstd``."""
    return prepare(input, eps, mean, invstd, soc=soc)


def _plan(kw, soc, strategy):
    """The plan of the call itself (its own checks and planner call; an atomic plan is shown even while
    determinism is on)."""
    return prepare(kw["input"], kw["eps"], None, None, soc=soc, strategy=strategy, deterministic=False,
                   outputs_required=False).plan


def _simulate(plan, kw):
    return simulate(plan, kw["input"], kw["eps"], arrival_order(plan, 0))


RECORD = register(OpRecord(
    name=OP, function=batch_norm_stats, bind=bind, signatures=_calls, aclnn_prepare=aclnn_get_workspace_size,
    outputs=("mean", "invstd"), strategies=tiling.BatchNormStatsStrategy,
    plan=_plan, plan_shape=tiling.plan_batch_norm_stats,
    simulate=_simulate, reference=lambda kw: batch_norm_stats_reference(kw["input"], kw["eps"]),
    example=lambda shape, dtype, rng, *, eps: {"input": activations(rng, shape, dtype), "eps": eps},
    bytes_moved=lambda kw: bytes_moved(kw["input"].shape, kw["input"].dtype), arrival=arrival_order,
    warmup=(((4, 8, 6, 6), {}), ((4, 8, 8, 8), {})),  # planes of 64 (float32): the host plan's direct walk
))
