"""BatchNormElemtBackward in the op registry: its aclnn entry, plan, simulator, reference and examples."""

from __future__ import annotations

import numpy as np

import tiling

from ...examples import activations, channel_statistics, gradients
from ...registry import OpRecord, register
from .api import OP, _calls, batch_norm_backward_elemt, bind, bytes_moved, prepare
from .reference import batch_norm_backward_elemt_reference
from .simulator import simulate

_NAMES = ("grad_out", "input", "mean", "invstd", "weight", "sum_dy", "sum_dy_xmu", "count")


def aclnn_get_workspace_size(gradOut, input, mean, invstd, weight, sumDy, sumDyXmu, counter, gradInput, *,
                             soc=None):
    """First phase of aclnnBatchNormElemtBackward: ``(status, workspace_size, executor)``; the second phase
    writes ``gradInput``."""
    return prepare(gradOut, input, mean, invstd, weight, sumDy, sumDyXmu, counter, gradInput, soc=soc)


def _plan(kw, soc, strategy):
    return prepare(*(kw[n] for n in _NAMES), None, soc=soc, strategy=strategy, output_required=False).plan


def _example(shape, dtype, rng, *, eps):
    """One device's tensors, with the sums of its own batch and counts of three devices (the others
    holding as many elements again and twice)."""
    x = activations(rng, shape, dtype)
    dy = gradients(rng, shape, dtype)
    mean, invstd = channel_statistics(x, eps)
    axes = (0, *range(2, len(shape)))
    dy64 = dy.astype(np.float64)
    sum_dy = dy64.sum(axis=axes) * 4
    sum_dy_xmu = (dy64 * (x.astype(np.float64) - mean.reshape((1, -1) + (1,) * (len(shape) - 2)))).sum(axis=axes) * 4
    per_device = int(np.prod(shape)) // shape[1]
    return {"grad_out": dy, "input": x, "mean": mean.astype(np.float32), "invstd": invstd.astype(np.float32),
            "weight": rng.uniform(0.5, 2, shape[1]).astype(np.float32), "sum_dy": sum_dy.astype(np.float32),
            "sum_dy_xmu": sum_dy_xmu.astype(np.float32),
            "count": np.array([per_device, per_device, 2 * per_device], np.int32)}


RECORD = register(OpRecord(
    name=OP, function=batch_norm_backward_elemt, bind=bind, signatures=_calls, aclnn_prepare=aclnn_get_workspace_size,
    outputs=("grad_input",), strategies=tiling.ElementwiseStrategy,
    plan=_plan, plan_shape=tiling.plan_batch_norm_backward_elemt,
    simulate=lambda plan, kw: (simulate(plan, *(kw[n] for n in _NAMES)),),
    reference=lambda kw: (batch_norm_backward_elemt_reference(*(kw[n] for n in _NAMES)),),
    example=_example,
    bytes_moved=lambda kw: bytes_moved(kw["input"].shape, np.asarray(kw["input"]).dtype),
))
