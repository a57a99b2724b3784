"""``batch_norm_backward_elemt``: validation in the op_api order, the cached plan, the per-channel factors,
the kernel."""

from __future__ import annotations

import math

import numpy as np

import tiling
from tiling import BatchNormElemtBackwardPlan, ElementwiseStrategy

from ...errors import InvalidParameterError
from ...kernels.dtypes import dtype_name, kernel_view
from ...runtime import call_runs, launch, settings
from ...runtime.buffers import elementwise_output
from ...runtime.calls import Signatures
from ...runtime.checks import (
    check_array,
    check_arrival_seed,
    check_dtypes,
    check_not_null,
    check_overlaps,
    check_rank,
    check_stats_dtypes,
    check_supported,
    parse_strategy,
    planned,
)
from ...runtime.derived import kernel_args
from ...runtime.executor import Executor
from . import kernel

OP = "batch_norm_backward_elemt"
#: Bytes read and written a thread must have to pay for its launch (docs/performance.md,
#: "The runtime").
THREAD_BYTES = 8 << 20
F32 = np.float32
COUNTER_DTYPES = ("int32", "float16", "float32")


def channel_factors(plan: BatchNormElemtBackwardPlan, mean, invstd, weight, sum_dy, sum_dy_xmu, counter):
    """Float32 (mean, mean_dy, factor, scale) per channel: ``n`` = counter summed in index order,
    ``mean_dy = sum_dy / n`` and ``mean_dy_xmu = sum_dy_xmu / n`` (rounded to float16 when the statistics
    are float16, as the op_api's promotion does), ``factor = mean_dy_xmu * (invstd * invstd)``,
    ``scale = invstd * weight``."""
    counts = np.asarray(counter).astype(F32).reshape(-1)
    n = np.add.accumulate(counts, dtype=F32)[-1] if counts.size else F32(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_dy = np.asarray(sum_dy, F32) / n
        mean_dy_xmu = np.asarray(sum_dy_xmu, F32) / n
    if plan.stats_dtype == "float16":
        mean_dy = mean_dy.astype(np.float16).astype(F32)
        mean_dy_xmu = mean_dy_xmu.astype(np.float16).astype(F32)
    inv = np.asarray(invstd, F32)
    w = np.ones(plan.c, F32) if weight is None else np.asarray(weight, F32)
    return np.asarray(mean, F32), mean_dy, mean_dy_xmu * (inv * inv), inv * w


def prepare(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, counter, grad_input, *, soc=None,
            strategy=None, deterministic=None, arrival_seed=None, output_required=True) -> Executor:
    """All checks in the op_api order: null tensors (161001); dtypes (counter int32/float16/float32),
    then normkern's rule that grad_out, input and grad_input share a dtype and the per-channel tensors
    another (the arch35 tiling's rule); ranks, C > 0, grad_out/grad_input shaped as input, the
    per-channel tensors (C,) (161002). Then the empty early exit. Every plan is deterministic."""
    check_not_null(OP, (("gradOut", grad_out), ("input", input), ("mean", mean), ("invstd", invstd),
                        ("sumDy", sum_dy), ("sumDyXmu", sum_dy_xmu), ("counter", counter))
                   + ((("gradInput", grad_input),) if output_required else ()))
    spec = settings.resolve_soc(soc, OP)
    entry = check_supported(OP, spec)
    check_dtypes(OP, spec, entry, (("gradOut", grad_out), ("input", input), ("mean", mean), ("invstd", invstd),
                                   ("weight", weight), ("sumDy", sum_dy), ("sumDyXmu", sum_dy_xmu)))
    if dtype_name(check_array(OP, "counter", counter).dtype) not in COUNTER_DTYPES:
        raise InvalidParameterError(OP, "counter", f"dtype must be one of {', '.join(COUNTER_DTYPES)}",
                                    dtype_name(counter.dtype))
    check_dtypes(OP, spec, entry, (("gradInput", grad_input),))
    data = dtype_name(input.dtype)
    for name, value in (("gradOut", grad_out), ("gradInput", grad_input)):
        if value is not None and value.dtype != input.dtype:
            raise InvalidParameterError(OP, name, f"dtype must equal input's ({data})", dtype_name(value.dtype))
    stats = check_stats_dtypes(OP, spec, entry, data, (("mean", mean), ("invstd", invstd), ("weight", weight),
                                                      ("sumDy", sum_dy), ("sumDyXmu", sum_dy_xmu)))
    check_rank(OP, "input", input)
    check_rank(OP, "gradOut", grad_out, 0)
    check_rank(OP, "counter", counter, 0)
    channels = input.shape[1]
    if channels == 0:
        raise InvalidParameterError(OP, "input", "dim 1 (C) must be positive", f"shape {input.shape}")
    for name, value in (("gradOut", grad_out), ("gradInput", grad_input)):
        if value is not None and value.shape != input.shape:
            raise InvalidParameterError(OP, name, f"shape must equal input's {input.shape}", value.shape)
    for name, value in (("mean", mean), ("invstd", invstd), ("weight", weight), ("sumDy", sum_dy),
                        ("sumDyXmu", sum_dy_xmu)):
        if value is not None and value.shape != (channels,):
            raise InvalidParameterError(OP, name, f"shape must be (C,) = ({channels},)", value.shape)
    if grad_input is not None and not grad_input.flags.writeable:
        raise InvalidParameterError(OP, "gradInput", "must be writeable", "a read-only array")
    overlaps = check_overlaps(OP, (("gradInput", grad_input),), (("gradOut", grad_out), ("input", input)))
    forced = parse_strategy(OP, ElementwiseStrategy, strategy)
    settings.resolve_deterministic(deterministic, OP)
    check_arrival_seed(OP, arrival_seed)
    plan = planned(OP, lambda: tiling.plan_batch_norm_backward_elemt(input.shape, data, spec, forced,
                                                                     stats_dtype=stats, devices=counter.size))

    spans = call_runs(plan, lambda: kernel_args(plan).core_count, 3 * input.nbytes, THREAD_BYTES)
    body = kernel.channels if plan.strategy is ElementwiseStrategy.CHANNELS else kernel.elemt_backward

    def run(workspace, grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, counter, grad_input):
        def compute(out):
            dy = kernel_view(np.ascontiguousarray(grad_out)).reshape(-1)
            x = kernel_view(np.ascontiguousarray(input)).reshape(-1)
            launch(body, spans(), dy, x, kernel_args(plan),
                   *channel_factors(plan, mean, invstd, weight, sum_dy, sum_dy_xmu, counter), out)

        return elementwise_output(grad_input, input, None if plan.strategy is ElementwiseStrategy.EMPTY else compute)

    return Executor(OP, plan, run, (("gradOut", grad_out), ("input", input), ("mean", mean), ("invstd", invstd),
                                    ("weight", weight), ("sumDy", sum_dy), ("sumDyXmu", sum_dy_xmu),
                                    ("counter", counter), ("gradInput", grad_input)), outputs=1, overlaps=overlaps)


_calls = Signatures()


def bind(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count, *, soc=None,
         strategy=None, deterministic=None, arrival_seed=None, out=None) -> Executor:
    """The first call of a signature of ``batch_norm_backward_elemt``: every check in the op_api order, the plan,
    and the call's arrays bound (``normkern.prepare`` and the signature cache keep its Bound)."""
    if out is not None:
        check_array(OP, "out", out)
    return prepare(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count, out, soc=soc,
                   strategy=strategy, deterministic=deterministic, arrival_seed=arrival_seed,
                   output_required=False)


def batch_norm_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count, *, soc=None,
                              strategy=None, deterministic=None, arrival_seed=None, out=None) -> np.ndarray:
    """grad_input of a synchronized batch norm from the global per-channel sums.

    With ``n = sum(count)`` (the per-device counts, int32 or float, any shape):
    ``grad_input = (dy - sum_dy/n - (x - mean) * invstd^2 * sum_dy_xmu/n) * invstd * weight``, in
    float32, in the order of CANN's SyncBatchNormBackwardElemt. ``sum_dy``/``sum_dy_xmu`` are the
    all-reduced outputs of ``batch_norm_backward_reduce``; ``weight`` may be None (ones). The output takes
    grad_out's dtype; ``out=`` is a preallocated array of its shape and dtype. Every plan is deterministic.
    """
    key, call = _calls.find(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count, soc, strategy,
                            deterministic, arrival_seed, out)
    if call is None:
        call = _calls.keep(key, bind(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count, soc=soc,
                                     strategy=strategy, deterministic=deterministic, arrival_seed=arrival_seed,
                                     out=out))
    return call(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count, out)


def bytes_moved(shape, dtype) -> int:
    """The memory-traffic floor: grad_out and input read once, grad_input written once."""
    return 3 * math.prod(shape) * np.dtype(dtype).itemsize
