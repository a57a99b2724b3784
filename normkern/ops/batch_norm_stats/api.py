"""``batch_norm_stats``: validation at the boundary, the cached plan, the kernel call."""

from __future__ import annotations

import numpy as np

import tiling
from tiling import BatchNormStatsStrategy

from ...errors import InvalidParameterError
from ...kernels.dtypes import dtype_name, kernel_view
from ...runtime import call_runs, launch, settings
from ...runtime.buffers import arrival_order, f32_buffer, write_back
from ...runtime.calls import Signatures
from ...runtime.checks import (
    check_array,
    check_arrival_seed,
    check_channel_vector,
    check_not_null,
    check_overlaps,
    check_rank,
    check_real,
    check_supported,
    parse_strategy,
    planned,
    unpack_out,
)
from ...runtime.derived import kernel_args
from ...runtime.executor import Executor
from . import kernel

OP = "batch_norm_stats"
#: Input bytes a thread must have to pay for its launch (docs/performance.md,
#: "The runtime").
THREAD_BYTES = 384 << 10


def prepare(input, eps, mean, invstd, *, soc=None, strategy=None, deterministic=None,
            arrival_seed=None, outputs_required=True) -> Executor:
    """Check everything in the CANN op_api order, plan, and bind a kernel call.

    Order: null pointers (161001), dtypes (161002), shapes (161002), attributes (161002); a SoC
    without this op gives 561003. Nothing is written before every check has passed.
    """
    check_not_null(OP, (("input", input),) + ((("mean", mean), ("invstd", invstd)) if outputs_required else ()))
    spec = settings.resolve_soc(soc, OP)
    x = check_array(OP, "input", input)
    allowed = check_supported(OP, spec).dtypes
    if dtype_name(x.dtype) not in allowed:
        raise InvalidParameterError(OP, "input", f"dtype must be one of {', '.join(allowed)} on {spec.name}",
                                    dtype_name(x.dtype))
    for name, value in (("mean", mean), ("invstd", invstd)):
        if value is not None and check_array(OP, name, value).dtype != np.float32:
            raise InvalidParameterError(OP, name, "dtype must be float32", dtype_name(value.dtype))
    check_rank(OP, "input", x)
    channels = x.shape[1]
    if channels == 0:
        raise InvalidParameterError(OP, "input", "dim 1 (C) must be positive", f"shape {x.shape}")
    check_channel_vector(OP, "mean", mean, channels)
    check_channel_vector(OP, "invstd", invstd, channels)
    overlaps = check_overlaps(OP, (("mean", mean), ("invstd", invstd)), (("input", x),))
    check_real(OP, "eps", eps)
    forced = parse_strategy(OP, BatchNormStatsStrategy, strategy)
    want_deterministic = settings.resolve_deterministic(deterministic, OP)
    check_arrival_seed(OP, arrival_seed)
    plan = planned(OP, lambda: tiling.plan_batch_norm_stats(x.shape, dtype_name(x.dtype), spec, forced),
                   want_deterministic)
    eps32 = np.float32(eps)
    empty = plan.strategy is BatchNormStatsStrategy.EMPTY
    args = None if empty else kernel_args(plan)
    shape = (plan.n, plan.c, plan.hxw)
    spans = call_runs(plan, lambda: args.core_count, x.nbytes, THREAD_BYTES)

    def run(workspace: np.ndarray, x, mean, invstd) -> tuple[np.ndarray, np.ndarray]:
        mean_out = f32_buffer(mean, channels)
        invstd_out = f32_buffer(invstd, channels)
        if empty:
            mean_out.fill(0.0)
            invstd_out.fill(np.nan)
        else:
            x3 = kernel_view(np.ascontiguousarray(x)).reshape(shape)
            if plan.strategy is BatchNormStatsStrategy.CHANNELS:
                launch(kernel.channels_direct if args.direct else kernel.channels, spans(), x3.reshape(-1), args, eps32,
                       mean_out, invstd_out)
            elif plan.strategy is BatchNormStatsStrategy.SPLIT_C:
                launch(kernel.split_c, spans(), x3, args, eps32, mean_out, invstd_out)
            else:
                order = arrival_order(plan, arrival_seed)
                launch(kernel.split_r_sums, spans(), x3, workspace, args, mean_out, False)
                kernel.split_r_mean(workspace, args, order[0], mean_out)
                launch(kernel.split_r_sums, spans(), x3, workspace, args, mean_out, True)
                kernel.split_r_invstd(workspace, args, order[1], eps32, invstd_out)
        if mean is not None or invstd is not None:
            write_back(((mean, mean_out), (invstd, invstd_out)))
        return (mean_out if mean is None else mean, invstd_out if invstd is None else invstd)

    return Executor(OP, plan, run, (("input", x), ("mean", mean), ("invstd", invstd)), outputs=2, overlaps=overlaps)


_calls = Signatures()


def bind(input: np.ndarray, eps: float, *, soc=None, strategy=None, deterministic=None,
         arrival_seed=None, out=None) -> Executor:
    """The first call of a signature of ``batch_norm_stats``: every check in the op_api order, the plan,
    and the call's arrays bound (``normkern.prepare`` and the signature cache keep its Bound)."""
    mean, invstd = unpack_out(OP, out, "mean, invstd")
    return prepare(input, eps, mean, invstd, soc=soc, strategy=strategy, deterministic=deterministic,
                   arrival_seed=arrival_seed, outputs_required=out is not None)


def batch_norm_stats(input: np.ndarray, eps: float, *, soc=None, strategy=None, deterministic=None,
                     arrival_seed=None, out=None) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and inverse standard deviation of ``input`` (channel on axis 1).

    ``mean = mean(x)`` and ``invstd = 1/sqrt(biased_var + eps)`` over every axis but 1, two-pass,
    in float32 (the input's float16/bfloat16 values are widened exactly). Returns float32 ``(C,)``
    arrays ``(mean, invstd)``; ``out=(mean, invstd)`` writes into preallocated ones. An input with
    no elements per channel gives mean 0 and invstd NaN.

    ``soc`` picks the plan (default ``Ascend910B2`` or :func:`normkern.set_default_soc`);
    ``strategy`` forces one (``"split_c"``, ``"split_r"``, ``"atomic"``); ``deterministic``
    overrides the global switch; ``arrival_seed`` reproduces an atomic plan's arrival order.
    """
    key, call = _calls.find(input, eps, soc, strategy, deterministic, arrival_seed, out)
    if call is None:
        call = _calls.keep(key, bind(input, eps, soc=soc, strategy=strategy, deterministic=deterministic,
                                     arrival_seed=arrival_seed, out=out))
    return call(input, *(out or (None, None)))


def bytes_moved(shape, dtype) -> int:
    """The memory-traffic floor of one call: the input read once, two float32 (C,) outputs written.

    Pass 2 re-reads each channel while it is still cache-resident, so it is not counted; a
    channel larger than the cache makes the real traffic up to twice the input.
    """
    count = 1
    for extent in shape:
        count *= extent
    return count * np.dtype(dtype).itemsize + 2 * shape[1] * 4
