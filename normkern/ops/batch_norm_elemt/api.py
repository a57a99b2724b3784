"""``batch_norm_elemt``: validation in the op_api order, the cached plan, the per-channel factors, the kernel."""

from __future__ import annotations

import math

import numpy as np

import tiling
from tiling import BatchNormElemtPlan, ElementwiseStrategy

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
    check_real,
    check_stats_dtypes,
    check_supported,
    parse_strategy,
    planned,
)
from ...runtime.derived import kernel_args
from ...runtime.executor import Executor
from . import kernel

OP = "batch_norm_elemt"
#: Bytes read and written a thread must have to pay for its launch (docs/performance.md,
#: "The runtime").
THREAD_BYTES = 6 << 20
F32 = np.float32


def channel_factors(plan: BatchNormElemtPlan, weight, bias, mean, invstd, eps) -> tuple[np.ndarray, ...]:
    """Float32 (mean, scale, weight, bias) per channel; ``scale`` is invstd on host plans, and on NPU
    plans ``1/sqrt(var + eps)`` of the variance the op_api recomputes, ``var = 1/invstd^2 - eps``,
    rounded to the statistics' dtype."""
    c = plan.c
    inv = np.asarray(invstd, F32)
    if plan.recompute_var:
        eps32 = F32(eps)
        var = (F32(1.0) / (inv * inv) - eps32).astype(mean.dtype).astype(F32)
        scale = F32(1.0) / np.sqrt(var + eps32)
    else:
        scale = np.array(inv, F32)
    w = np.ones(c, F32) if weight is None else np.asarray(weight, F32)
    b = np.zeros(c, F32) if bias is None else np.asarray(bias, F32)
    return np.asarray(mean, F32), scale, w, b


def prepare(input, weight, bias, mean, invstd, eps, output, *, soc=None, strategy=None, deterministic=None,
            arrival_seed=None, output_required=True) -> Executor:
    """All checks in the op_api order: null input/mean/invstd/output (161002: the code maps CheckNotNull to
    PARAM_INVALID, the doc says 161001), dtypes, shapes (161002). Elementwise: every plan is deterministic."""
    check_not_null(OP, (("input", input), ("mean", mean), ("invstd", invstd))
                   + ((("output", output),) if output_required else ()), error=InvalidParameterError)
    spec = settings.resolve_soc(soc, OP)
    entry = check_supported(OP, spec)
    check_dtypes(OP, spec, entry, (("input", input), ("weight", weight), ("bias", bias), ("mean", mean),
                                   ("invstd", invstd), ("output", output)))
    data = dtype_name(input.dtype)
    stats = check_stats_dtypes(OP, spec, entry, data, (("mean", mean), ("invstd", invstd), ("weight", weight),
                                                      ("bias", bias)))
    if output is not None and output.dtype != input.dtype:
        raise InvalidParameterError(OP, "output", f"dtype must equal input's ({data})", dtype_name(output.dtype))
    check_rank(OP, "input", input)
    if output is not None and output.shape != input.shape:
        raise InvalidParameterError(OP, "output", f"shape must equal input's {input.shape}", output.shape)
    channels = input.shape[1]
    if channels == 0:
        raise InvalidParameterError(OP, "input", "dim 1 (C) must be positive", f"shape {input.shape}")
    for name, value in (("weight", weight), ("bias", bias), ("mean", mean), ("invstd", invstd)):
        if value is not None and value.shape != (channels,):
            raise InvalidParameterError(OP, name, f"shape must be (C,) = ({channels},)", value.shape)
    if output is not None and not output.flags.writeable:
        raise InvalidParameterError(OP, "output", "must be writeable", "a read-only array")
    overlaps = check_overlaps(OP, (("output", output),), (("input", input),))
    eps = check_real(OP, "eps", eps)
    forced = parse_strategy(OP, ElementwiseStrategy, strategy)
    settings.resolve_deterministic(deterministic, OP)
    check_arrival_seed(OP, arrival_seed)
    plan = planned(OP, lambda: tiling.plan_batch_norm_elemt(input.shape, data, spec, forced, stats_dtype=stats))

    empty = plan.strategy is ElementwiseStrategy.EMPTY
    args = None if empty else kernel_args(plan)
    spans = call_runs(plan, lambda: args.core_count, 2 * input.nbytes, THREAD_BYTES)
    body = kernel.channels if plan.strategy is ElementwiseStrategy.CHANNELS else kernel.elemt

    def run(workspace, input, weight, bias, mean, invstd, output):
        def compute(out):
            x = kernel_view(np.ascontiguousarray(input)).reshape(-1)
            launch(body, spans(), x, args,
                   *channel_factors(plan, weight, bias, mean, invstd, eps), out)

        return elementwise_output(output, input, None if empty else compute)

    return Executor(OP, plan, run, (("input", input), ("weight", weight), ("bias", bias), ("mean", mean),
                                    ("invstd", invstd), ("output", output)), outputs=1, overlaps=overlaps)


_calls = Signatures()


def bind(input, weight, bias, mean, invstd, eps, *, soc=None, strategy=None, deterministic=None,
         arrival_seed=None, out=None) -> Executor:
    """The first call of a signature of ``batch_norm_elemt``: every check in the op_api order, the plan,
    and the call's arrays bound (``normkern.prepare`` and the signature cache keep its Bound)."""
    if out is not None:
        check_array(OP, "out", out)
    return prepare(input, weight, bias, mean, invstd, eps, out, soc=soc, strategy=strategy,
                   deterministic=deterministic, arrival_seed=arrival_seed, output_required=False)


def batch_norm_elemt(input, weight, bias, mean, invstd, eps, *, soc=None, strategy=None, deterministic=None,
                     arrival_seed=None, out=None) -> np.ndarray:
    """Batch norm with given statistics: ``(x - mean) * invstd * weight + bias`` per channel (axis 1).

    ``weight``/``bias`` (C,) may be None (ones/zeros); ``mean``/``invstd`` (C,) are a forward pass's
    statistics (``batch_norm_gather_stats_with_counts`` in a synchronized batch norm). The output takes
    the input's dtype; compute is float32. On the NPU plans the scale is recomputed as the CANN op_api
    does (``var = 1/invstd^2 - eps``, then ``1/sqrt(var + eps)``: within an ulp or two of invstd); on
    ``host`` it is invstd itself, as ``torch.batch_norm_elemt`` (which ignores eps). ``out=`` is a
    preallocated array of the input's shape and dtype. Elementwise: every plan is deterministic.
    """
    key, call = _calls.find(input, weight, bias, mean, invstd, eps, soc, strategy, deterministic, arrival_seed, out)
    if call is None:
        call = _calls.keep(key, bind(input, weight, bias, mean, invstd, eps, soc=soc, strategy=strategy,
                                     deterministic=deterministic, arrival_seed=arrival_seed, out=out))
    return call(input, weight, bias, mean, invstd, out)


def bytes_moved(shape, dtype) -> int:
    """The memory-traffic floor: the input read once and the output written once."""
    return 2 * math.prod(shape) * np.dtype(dtype).itemsize
