"""BatchNormReduceBackward in the op registry: its aclnn entry, plan, simulator, reference and examples."""

from __future__ import annotations

import numpy as np

import tiling

from ...examples import activations, channel_statistics, gradients
from ...registry import OpRecord, register
from .api import OP, _calls, arrival_order, batch_norm_backward_reduce, bind, bytes_moved, prepare
from .reference import batch_norm_backward_reduce_reference
from .simulator import simulate


def aclnn_get_workspace_size(gradOut, input, mean, invstd, weight, inputG, weightG, biasG, sumDy, sumDyXmu,
                             gradWeight, gradBias, *, soc=None):
    """First phase of aclnnBatchNormReduceBackward: ``(status, workspace_size, executor)``; the second
    phase writes the outputs the masks ask for."""
    return prepare(gradOut, input, mean, invstd, weight, inputG, weightG, biasG, sumDy, sumDyXmu, gradWeight,
                   gradBias, soc=soc)


def _plan(kw, soc, strategy):
    return prepare(kw["grad_out"], kw["input"], kw["mean"], kw["invstd"], kw["weight"], True, True, True,
                   None, None, None, None, soc=soc, strategy=strategy, deterministic=False,
                   outputs_required=False).plan


def _cast(outputs, kw):
    """The simulator's float32 results in the dtypes the call returns."""
    weight_dtype = np.asarray(kw["mean"] if kw["weight"] is None else kw["weight"]).dtype
    dtypes = (kw["mean"].dtype, kw["mean"].dtype, weight_dtype, weight_dtype)
    return tuple(o.astype(d) for o, d in zip(outputs, dtypes, strict=True))


def _example(shape, dtype, rng, *, eps):
    x = activations(rng, shape, dtype)
    mean, invstd = channel_statistics(x, eps)
    return {"grad_out": gradients(rng, shape, dtype), "input": x, "mean": mean.astype(np.float32),
            "invstd": invstd.astype(np.float32), "weight": rng.uniform(0.5, 2, shape[1]).astype(np.float32),
            "input_g": True, "weight_g": True, "bias_g": True}


RECORD = register(OpRecord(
    name=OP, function=batch_norm_backward_reduce, bind=bind, signatures=_calls, aclnn_prepare=aclnn_get_workspace_size,
    outputs=("sum_dy", "sum_dy_xmu", "grad_weight", "grad_bias"),
    strategies=tiling.BatchNormReduceBackwardStrategy,
    plan=_plan, plan_shape=tiling.plan_batch_norm_backward_reduce,
    simulate=lambda plan, kw: _cast(simulate(plan, kw["grad_out"], kw["input"], kw["mean"], kw["invstd"],
                                             arrival_order(plan, 0)), kw),
    reference=lambda kw: batch_norm_backward_reduce_reference(kw["grad_out"], kw["input"], kw["mean"],
                                                              kw["invstd"]),
    example=_example,
    bytes_moved=lambda kw: bytes_moved(kw["input"].shape, np.asarray(kw["input"]).dtype), arrival=arrival_order,
))
