"""GroupNormBackward in the op registry: its aclnn entry, plan, simulator, reference and examples."""

from __future__ import annotations

import math

import numpy as np

import tiling

from ...examples import activations, gradients
from ...registry import OpRecord, Option, register
from .api import OP, _calls, arrival_order, bind, bytes_moved, group_norm_backward, prepare, task_statistics, task_views
from .reference import group_norm_backward_reference
from .simulator import simulate


def aclnn_get_workspace_size(gradOut, input, mean, rstd, gamma, N, C, HxW, group, outputMask, gradInput, gradGammaOut,
                             gradBetaOut, *, soc=None):
    """First phase of aclnnGroupNormBackward: ``(status, workspace_size, executor)``; the second phase
    writes the gradients outputMask selects, with the partial rows in the caller's workspace.

    Runs the default (``cann``) plan: deterministic, whatever the determinism switch says, as the A2
    code (the ``atomic`` strategy is reachable from the Pythonic layer)."""
    return prepare(gradOut, input, mean, rstd, gamma, N, C, HxW, group, outputMask, gradInput, gradGammaOut,
                   gradBetaOut, soc=soc)


def _plan(kw, soc, strategy):
    """The plan of the call itself (its own checks and planner call; an atomic plan is shown even while
    determinism is on)."""
    return prepare(kw["grad_out"], kw["input"], kw["mean"], kw["rstd"], kw.get("gamma"), kw["N"], kw["C"], kw["HxW"],
                   kw["group"], kw.get("output_mask", (True, True, True)), None, None, None, soc=soc,
                   strategy=strategy, deterministic=False, outputs_required=False).plan


def _plan_shape(shape, dtype, soc, strategy, *, group=1):
    return tiling.plan_group_norm_backward(shape[0], shape[1], math.prod(shape[2:]), group, dtype, soc, strategy)


def _simulate(plan, kw):
    x = kw["input"]
    dy3, x3 = task_views(plan, kw["grad_out"], x)
    dx, gg, gb = simulate(plan, dy3, x3, *task_statistics(plan, kw["mean"], kw["rstd"], kw["gamma"]),
                          arrival_order(plan, 0))
    return dx.reshape(x.shape).astype(x.dtype), gg.astype(x.dtype), gb.astype(x.dtype)


def _reference(kw):
    return group_norm_backward_reference(kw["grad_out"], kw["input"], kw["mean"], kw["rstd"], kw.get("gamma"),
                                         kw["N"], kw["C"], kw["HxW"], kw["group"])


def _example(shape, dtype, rng, *, eps, group=1):
    x = activations(rng, shape, dtype)
    dy = gradients(rng, shape, dtype)
    n, c = shape[0], shape[1]
    grouped = x.astype(np.float64).reshape(n, group, -1)
    return {"grad_out": dy, "input": x, "mean": grouped.mean(axis=-1).astype(dtype),
            "rstd": (1 / np.sqrt(grouped.var(axis=-1) + eps)).astype(dtype),
            "gamma": rng.uniform(0.5, 1.5, c).astype(dtype), "N": n, "C": c, "HxW": math.prod(shape[2:]),
            "group": group}


RECORD = register(OpRecord(
    name=OP, function=group_norm_backward, bind=bind, signatures=_calls, aclnn_prepare=aclnn_get_workspace_size,
    outputs=("grad_input", "grad_gamma", "grad_beta"), strategies=tiling.GroupNormBackwardStrategy,
    plan=_plan, plan_shape=_plan_shape, simulate=_simulate, reference=_reference, example=_example,
    bytes_moved=lambda kw: bytes_moved(kw["N"], kw["C"], kw["HxW"], kw["input"].dtype),
    shape_help="N,C[,spatial...], the input's shape, with --group", shape_ranks=(2, 8),
    options=(Option("--group", "group", dict(type=int, default=1, help="the number of groups (default 1)")),),
    # whole mode-0 rows of at most 64, 128 and 256 elements run ``stage1_short``, ``stage1_short_128`` and
    # ``stage1_short_256``, longer ones ``stage1_rows``, HxW == 1 (mode 5) and chunked rows (mode 3, A2's
    # planes beyond the UB) the general ``stage1``
    warmup=(((4, 8, 6, 6), {"group": 2}), ((2, 4, 10, 10), {"group": 2}), ((2, 4, 14, 14), {"group": 2}),
            ((2, 4, 20, 20), {"group": 2}), ((4, 8), {"group": 2}), ((1, 2, 128, 128), {"group": 1})),
    arrival=arrival_order,
))
