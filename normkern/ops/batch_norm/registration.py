"""BatchNorm in the op registry: its aclnn entry, plan, simulator, reference and examples."""

from __future__ import annotations

import numpy as np

import tiling

from ...examples import activations
from ...registry import OpRecord, Option, register
from .api import OP, _calls, batch_norm, bind, bytes_moved, prepare
from .reference import batch_norm_reference
from .simulator import simulate


def aclnn_get_workspace_size(input, weight, bias, runningMean, runningVar, training, momentum, eps, output, saveMean,
                             saveInvstd, *, soc=None):
    """First phase of aclnnBatchNorm: ``(status, workspace_size, executor)``; the second phase writes output,
    saveMean and saveInvstd and, in training, updates runningMean and runningVar in place."""
    return prepare(input, weight, bias, runningMean, runningVar, training, momentum, eps, output, saveMean,
                   saveInvstd, soc=soc)


def _args(kw):
    return (kw["input"], kw["weight"], kw["bias"], kw["running_mean"], kw["running_var"], kw["training"],
            kw["momentum"], kw["eps"])


def _plan(kw, soc, strategy):
    return prepare(*_args(kw), None, None, None, soc=soc, strategy=strategy, outputs_required=False).plan


def _simulate(plan, kw):
    """Every output, then the running statistics as updated, each in its array's dtype."""
    y, mean, invstd, rm, rv = simulate(plan, kw["input"], kw["weight"], kw["bias"], kw["running_mean"],
                                       kw["running_var"], kw["momentum"], kw["eps"])
    return y, mean, invstd, rm.astype(kw["running_mean"].dtype), rv.astype(kw["running_var"].dtype)


def _example(shape, dtype, rng, *, eps, training=True):
    c = shape[1]
    return {"input": activations(rng, shape, dtype), "weight": (1 + 0.1 * rng.standard_normal(c)).astype(dtype),
            "bias": (0.1 * rng.standard_normal(c)).astype(dtype),
            "running_mean": (0.1 * rng.standard_normal(c)).astype(np.float32),
            "running_var": rng.uniform(0.5, 2.0, c).astype(np.float32), "training": training, "momentum": 0.1,
            "eps": eps}


RECORD = register(OpRecord(
    name=OP, function=batch_norm, bind=bind, signatures=_calls, aclnn_prepare=aclnn_get_workspace_size,
    outputs=("output", "save_mean", "save_invstd"), updated=("running_mean", "running_var"),
    strategies=tiling.BatchNormStrategy, plan=_plan,
    plan_shape=lambda shape, dtype, soc, strategy, training=True: tiling.plan_batch_norm(shape, dtype, soc, strategy,
                                                                                         training=training),
    simulate=_simulate, reference=lambda kw: batch_norm_reference(*_args(kw)), example=_example,
    bytes_moved=lambda kw: bytes_moved(kw["input"].shape, kw["input"].dtype),
    options=(Option("--eval", "training", dict(action="store_false", default=True,
                                                help="evaluation: the running statistics, nothing updated")),),
    # planes of 36: the staged walk; of 64 (float32): the direct walk
    warmup=(((4, 8, 6, 6), {"training": True}), ((4, 8, 6, 6), {"training": False}),
            ((4, 8, 8, 8), {"training": True})),
))
