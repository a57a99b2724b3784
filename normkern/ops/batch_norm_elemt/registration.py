"""BatchNormElemt in the op registry: its aclnn entry, plan, simulator, reference and examples."""

from __future__ import annotations

import numpy as np

import tiling

from ...examples import activations, channel_statistics
from ...registry import OpRecord, register
from .api import OP, _calls, batch_norm_elemt, bind, bytes_moved, prepare
from .reference import batch_norm_elemt_reference
from .simulator import simulate


def aclnn_get_workspace_size(input, weight, bias, mean, invstd, eps, output, *, soc=None):
    """First phase of aclnnBatchNormElemt: ``(status, workspace_size, executor)``; the second phase
    writes ``output``."""
    return prepare(input, weight, bias, mean, invstd, eps, output, soc=soc)


def _args(kw):
    return kw["input"], kw["weight"], kw["bias"], kw["mean"], kw["invstd"]


def _plan(kw, soc, strategy):
    return prepare(*_args(kw), kw["eps"], None, soc=soc, strategy=strategy, output_required=False).plan


def _example(shape, dtype, rng, *, eps):
    x = activations(rng, shape, dtype)
    mean, invstd = channel_statistics(x, eps)
    c = shape[1]
    return {"input": x, "weight": (1 + 0.1 * rng.standard_normal(c)).astype(dtype),
            "bias": (0.1 * rng.standard_normal(c)).astype(dtype), "mean": mean.astype(dtype),
            "invstd": invstd.astype(dtype), "eps": eps}


RECORD = register(OpRecord(
    name=OP, function=batch_norm_elemt, bind=bind, signatures=_calls, aclnn_prepare=aclnn_get_workspace_size,
    outputs=("output",), strategies=tiling.ElementwiseStrategy,
    plan=_plan, plan_shape=tiling.plan_batch_norm_elemt,
    simulate=lambda plan, kw: (simulate(plan, *_args(kw), kw["eps"]),),
    reference=lambda kw: (batch_norm_elemt_reference(*_args(kw)),),
    example=_example,
    bytes_moved=lambda kw: bytes_moved(kw["input"].shape, np.asarray(kw["input"]).dtype),
))
