"""FastBatchNormBackward in the op registry: its aclnn entry, plan, simulator, reference and examples."""

from __future__ import annotations

import numpy as np

import tiling

from ...examples import activations, gradients
from ...registry import OpRecord, Option, register
from .api import OP, _calls, bind, bytes_moved, fast_batch_norm_backward, fused_views, prepare, statistics, unfused_view
from .reference import fast_batch_norm_backward_reference
from .simulator import simulate


def aclnn_get_workspace_size(gradOut, input, weight, runningMean, runningVar, saveMean, saveInvstd, training, eps,
                             outputMask, version, gradInput, gradWeight, gradBias, *, soc=None):
    """First phase of aclnnFastBatchNormBackward: ``(status, workspace_size, executor)``; the second phase
    writes the gradients outputMask selects. An empty gradOut or input returns ``(0, 0, executor)``
    before any other check, as the op_api."""
    return prepare(gradOut, input, weight, runningMean, runningVar, saveMean, saveInvstd, training, eps, outputMask,
                   version, gradInput, gradWeight, gradBias, soc=soc)


def _plan(kw, soc, strategy):
    """The plan of the call itself (its own checks and planner call)."""
    return prepare(kw["grad_out"], kw["input"], kw.get("weight"), kw.get("running_mean"), kw.get("running_var"),
                   kw.get("save_mean"), kw.get("save_invstd"), kw["training"], kw["eps"],
                   kw.get("output_mask", (True, True, True)), kw.get("version", 0), None, None, None, soc=soc,
                   strategy=strategy, outputs_required=False).plan


def _plan_shape(shape, dtype, soc, strategy, *, training=True):
    return tiling.plan_fast_batch_norm_backward(shape, dtype, soc, strategy, training=training, weight_dtype="float32")


def _simulate(plan, kw):
    stats = (kw["weight"], kw["running_mean"], kw["running_var"], kw["save_mean"], kw["save_invstd"])
    dy3, x3 = fused_views(plan, kw["grad_out"], kw["input"])
    dx, gw, gb = simulate(plan, dy3, x3, *statistics(plan, *stats, kw["eps"]))
    return unfused_view(plan, dx.astype(kw["input"].dtype)), gw, gb


def _reference(kw):
    return fast_batch_norm_backward_reference(kw["grad_out"], kw["input"], kw.get("weight"), kw.get("running_mean"),
                                              kw.get("running_var"), kw.get("save_mean"), kw.get("save_invstd"),
                                              kw["training"], kw["eps"])


def _example(shape, dtype, rng, *, eps, training=True, output_mask=None):
    x = activations(rng, shape, dtype)
    dy = gradients(rng, shape, dtype)
    axes = (0, *range(2, len(shape)))
    x64 = x.astype(np.float64)
    mean, var = x64.mean(axis=axes), x64.var(axis=axes)
    return {"grad_out": dy, "input": x, "weight": rng.uniform(0.5, 2, shape[1]).astype(np.float32),
            "running_mean": mean.astype(np.float32), "running_var": var.astype(np.float32),
            "save_mean": mean.astype(np.float32), "save_invstd": (1 / np.sqrt(var + eps)).astype(np.float32),
            "training": training, "eps": eps, **({} if output_mask is None else {"output_mask": tuple(output_mask)})}


RECORD = register(OpRecord(
    name=OP, function=fast_batch_norm_backward, bind=bind, signatures=_calls,
    aclnn_prepare=aclnn_get_workspace_size, outputs=("grad_input", "grad_weight", "grad_bias"),
    strategies=tiling.FastBatchNormBackwardStrategy, plan=_plan, plan_shape=_plan_shape, simulate=_simulate,
    reference=_reference, example=_example,
    bytes_moved=lambda kw: bytes_moved(kw["input"].shape, kw["input"].dtype),
    options=(Option("--inference", "training", dict(action="store_false", help="run with training=False")),),
    # every body: training and inference (with and without dx) compile apart; on the host, planes of up to
    # 64 and of up to HOST_PLANE_PASS_MAX elements run their own (``whole_planes_short``, ``whole_planes``),
    # longer ones the general phases, single-core and (A2's 2x2x100x100 plan) cross-core; a float32 dx of 16 MiB
    # is streamed (``api.STREAM_MIN_BYTES``)
    warmup=(*(((4, 8, 6, 6), {"training": training}) for training in (True, False)),
            ((2, 4, 12, 12), {"training": True}), ((2, 4, 12, 12), {"training": False}),
            *(((2, 2, 100, 100), {"training": training}) for training in (True, False)),
            ((2, 2, 100, 100), {"training": False, "output_mask": (False, True, True)}),
            ((2, 2, 1024, 1024), {"training": True})),
))
