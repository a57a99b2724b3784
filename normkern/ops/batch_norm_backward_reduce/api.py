"""``batch_norm_backward_reduce``: validation in the op_api order, the cached plan, the two sums, the finish."""

from __future__ import annotations

import math

import numpy as np

import tiling
from tiling import BatchNormReduceBackwardStrategy

from ...errors import InvalidParameterError
from ...kernels.dtypes import dtype_name, kernel_view
from ...runtime import call_runs, launch, settings
from ...runtime.buffers import arrival_order, write_back
from ...runtime.calls import Signatures
from ...runtime.checks import (
    check_arrival_seed,
    check_dtypes,
    check_not_null,
    check_overlaps,
    check_rank,
    check_supported,
    parse_strategy,
    planned,
    unpack_out,
)
from ...runtime.derived import kernel_args
from ...runtime.executor import Executor
from . import kernel

OP = "batch_norm_backward_reduce"
#: Bytes read and written a thread must have to pay for its launch (docs/performance.md,
#: "The runtime").
THREAD_BYTES = 1 << 20
F32 = np.float32
OUTPUTS = ("sumDy", "sumDyXmu", "gradWeight", "gradBias")


def _check_mask(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidParameterError(OP, name, "must be a bool", repr(value))
    return bool(value)


def prepare(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g, sum_dy, sum_dy_xmu, grad_weight,
            grad_bias, *, soc=None, strategy=None, deterministic=None, arrival_seed=None,
            outputs_required=True) -> Executor:
    """All checks in the op_api order: null inputs, then null outputs their mask asks for (161001); input
    dtypes, grad_out's equal to input's, masked outputs' dtypes; ranks, C > 0, masked outputs (C,)
    (161002). normkern adds what the op_api leaves to its kernels: grad_out's shape equal to input's and
    mean/invstd/weight of shape (C,) (161002). Then the empty early exit."""
    masks = tuple(_check_mask(n, v) for n, v in (("inputG", input_g), ("weightG", weight_g), ("biasG", bias_g)))
    outputs = (sum_dy, sum_dy_xmu, grad_weight, grad_bias)
    wanted = (masks[0], masks[0], masks[1], masks[2])
    check_not_null(OP, (("gradOut", grad_out), ("input", input), ("mean", mean), ("invstd", invstd)))
    if outputs_required:
        check_not_null(OP, tuple((n, o) for n, o, w in zip(OUTPUTS, outputs, wanted, strict=True) if w))
    spec = settings.resolve_soc(soc, OP)
    entry = check_supported(OP, spec)
    check_dtypes(OP, spec, entry, (("gradOut", grad_out), ("input", input), ("mean", mean), ("invstd", invstd)))
    if grad_out.dtype != input.dtype:
        raise InvalidParameterError(OP, "gradOut", f"dtype must equal input's ({dtype_name(input.dtype)})",
                                    dtype_name(grad_out.dtype))
    check_dtypes(OP, spec, entry, tuple((n, o) for n, o, w in zip(OUTPUTS, outputs, wanted, strict=True) if w)
                 + (("weight", weight),))
    check_rank(OP, "gradOut", grad_out)
    check_rank(OP, "input", input)
    channels = input.shape[1]
    if channels == 0:
        raise InvalidParameterError(OP, "input", "dim 1 (C) must be positive", f"shape {input.shape}")
    for name, value, want in zip(OUTPUTS, outputs, wanted, strict=True):
        if want and value is not None:
            if value.shape != (channels,):
                raise InvalidParameterError(OP, name, f"shape must be (C,) = ({channels},)", value.shape)
            if not value.flags.writeable:
                raise InvalidParameterError(OP, name, "must be writeable", "a read-only array")
    if grad_out.shape != input.shape:
        raise InvalidParameterError(OP, "gradOut", f"shape must equal input's {input.shape}", grad_out.shape)
    for name, value in (("mean", mean), ("invstd", invstd), ("weight", weight)):
        if value is not None and value.shape != (channels,):
            raise InvalidParameterError(OP, name, f"shape must be (C,) = ({channels},)", value.shape)
    live = tuple((n, o) for n, o, w in zip(OUTPUTS, outputs, wanted, strict=True) if w)
    overlaps = check_overlaps(OP, live, (("gradOut", grad_out), ("input", input)))
    forced = parse_strategy(OP, BatchNormReduceBackwardStrategy, strategy)
    want_deterministic = settings.resolve_deterministic(deterministic, OP)
    check_arrival_seed(OP, arrival_seed)
    plan = planned(OP, lambda: tiling.plan_batch_norm_backward_reduce(input.shape, dtype_name(input.dtype), spec,
                                                                      forced), want_deterministic)
    stats_dtype = mean.dtype
    weight_dtype = stats_dtype if weight is None else weight.dtype
    spans = call_runs(plan, lambda: kernel_args(plan).core_count, 2 * input.nbytes, THREAD_BYTES)

    def run(workspace, grad_out, input, mean, invstd, weight, *outputs):
        dtypes = (stats_dtype, stats_dtype, weight_dtype, weight_dtype)
        targets = [o if o is not None else np.zeros(channels, d) if w else None
                   for o, w, d in zip(outputs, wanted, dtypes, strict=True)]
        if plan.strategy is BatchNormReduceBackwardStrategy.EMPTY:
            if spec.arch in (tiling.ASCEND950, tiling.HOST):  # the op_api fills zeros on regbase only
                for target in targets:
                    if target is not None:
                        target[...] = 0
            return tuple(targets)
        mean32 = np.asarray(mean, F32)
        shift = mean32 if plan.centered else np.zeros(channels, F32)
        dy3 = kernel_view(np.ascontiguousarray(grad_out)).reshape(plan.n, plan.c, plan.hxw)
        x3 = kernel_view(np.ascontiguousarray(input)).reshape(plan.n, plan.c, plan.hxw)
        s_dy = np.empty(channels, F32)
        s_p = np.empty(channels, F32)
        args = kernel_args(plan)
        if plan.strategy is BatchNormReduceBackwardStrategy.PLANES:
            launch(kernel.planes, spans(), dy3.reshape(-1), x3.reshape(-1), args, shift, s_dy, s_p)
        elif plan.strategy is BatchNormReduceBackwardStrategy.SPLIT_C:
            launch(kernel.split_c, spans(), dy3, x3, args, shift, s_dy, s_p)
        else:
            launch(kernel.split_r, spans(), dy3, x3, workspace, args, shift)
            kernel.add_partials(workspace, args, arrival_order(plan, arrival_seed), s_dy, s_p)
        xmu = s_p if plan.centered else s_p - mean32 * s_dy
        write_back(zip(targets, (s_dy, xmu, xmu * np.asarray(invstd, F32), s_dy), strict=True))
        return tuple(targets)

    return Executor(OP, plan, run, (("gradOut", grad_out), ("input", input), ("mean", mean), ("invstd", invstd),
                                    ("weight", weight), *zip(OUTPUTS, outputs, strict=True)), outputs=4,
                    overlaps=overlaps)


_calls = Signatures()


def bind(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g, *, soc=None,
         strategy=None, deterministic=None, arrival_seed=None, out=None) -> Executor:
    """The first call of a signature of ``batch_norm_backward_reduce``: every check in the op_api order, the plan,
    and the call's arrays bound (``normkern.prepare`` and the signature cache keep its Bound)."""
    targets = unpack_out(OP, out, "sum_dy, sum_dy_xmu, grad_weight, grad_bias")
    return prepare(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g, *targets, soc=soc,
                   strategy=strategy, deterministic=deterministic, arrival_seed=arrival_seed,
                   outputs_required=out is not None)


def batch_norm_backward_reduce(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g, *, soc=None,
                               strategy=None, deterministic=None, arrival_seed=None, out=None):
    """Per-channel (axis 1) sums of a batch norm's backward: ``(sum_dy, sum_dy_xmu, grad_weight, grad_bias)``.

    ``sum_dy = sum(dy)``, ``sum_dy_xmu = sum(dy * (x - mean))``, ``grad_weight = sum_dy_xmu * invstd``,
    ``grad_bias = sum_dy``; ``input_g`` asks for the first two, ``weight_g`` and ``bias_g`` for the others
    (None where not asked). ``weight`` may be None (it enters no output). Compute is float32; sum_dy and
    sum_dy_xmu take mean's dtype, grad_weight and grad_bias weight's (mean's without a weight). NPU plans
    form sum_dy_xmu as CANN does, ``sum(dy * x) - mean * sum_dy``; host plans sum ``dy * (x - mean)``.
    ``out=(sum_dy, sum_dy_xmu, grad_weight, grad_bias)`` preallocated (C,) arrays (None where masked).
    """
    key, call = _calls.find(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g, soc, strategy,
                            deterministic, arrival_seed, out)
    if call is None:
        call = _calls.keep(key, bind(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g, soc=soc,
                                     strategy=strategy, deterministic=deterministic, arrival_seed=arrival_seed,
                                     out=out))
    return call(grad_out, input, mean, invstd, weight, *(out or (None, None, None, None)))


def bytes_moved(shape, dtype) -> int:
    """The memory-traffic floor: grad_out and input read once (the (C,) outputs are negligible)."""
    return 2 * math.prod(shape) * np.dtype(dtype).itemsize


