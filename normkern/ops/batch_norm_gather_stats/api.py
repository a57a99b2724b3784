"""``batch_norm_gather_stats_with_counts``: validation in CANN's order, the cached plan, the kernel."""

from __future__ import annotations

import functools

import numpy as np

import tiling
from tiling import GatherStatsStrategy

from ...errors import InvalidParameterError, TilingError
from ...kernels.dtypes import dtype_name
from ...runtime import settings
from ...runtime.buffers import f32_buffer, write_back
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
from ...runtime.derived import derived
from ...runtime.executor import Executor
from . import kernel

OP = "batch_norm_gather_stats_with_counts"
F32 = np.float32


_NO_RUNNING = np.empty(0, F32)


@functools.cache
def _allowed_dtypes(names: tuple[str, ...]) -> tuple[np.dtype, ...]:
    # A tuple: ``in`` finds numpy's dtype singletons by identity, faster than hashing them. The fast
    # path only: bfloat16, which is not imported with normkern, passes by its name below.
    return tuple(np.dtype(name) for name in names if name in ("float32", "float16"))


def _plan(devices, channels, dtype, spec, forced, momentum, eps):
    """The plan, with its kernel arguments for a run on one thread (made once per plan)."""
    plan = planned(OP, lambda: tiling.plan_batch_norm_gather_stats_with_counts(
        devices, channels, dtype_name(dtype), spec, forced, momentum=momentum, eps=eps))
    return plan, derived(plan, "inline_kernel_args", plan.inline_kernel_args)


def prepare(input, mean, invstd, running_mean, running_var, momentum, eps, counts, mean_all, invstd_all, *,
            soc=None, strategy=None, deterministic=None, arrival_seed=None, outputs_required=True) -> Executor:
    """All checks in the op_api order: null (161001), dtype, shape (161002); the 950 tiling's own
    checks (momentum in [0, 1], eps > 0, invstd and running dtypes equal to mean's) give 561002.

    Every plan of this op is deterministic (devices are added in a fixed order), so ``deterministic``
    is only checked, and ``arrival_seed`` has no arrival order to replay."""
    check_not_null(OP, (("input", input), ("mean", mean), ("invstd", invstd), ("counts", counts))
                   + ((("meanAll", mean_all), ("invstdAll", invstd_all)) if outputs_required else ()))
    spec = settings.resolve_soc(soc, OP)
    entry = check_supported(OP, spec)
    allowed = entry.dtypes
    tensors = [("input", input), ("mean", mean), ("invstd", invstd), ("runningMean", running_mean),
               ("runningVar", running_var), ("counts", counts), ("meanAll", mean_all), ("invstdAll", invstd_all)]
    allowed_dtypes = _allowed_dtypes(allowed)
    for name, value in tensors:
        if value is not None and (type(value) is not np.ndarray or value.dtype not in allowed_dtypes):
            if dtype_name(check_array(OP, name, value).dtype) not in allowed:
                raise InvalidParameterError(OP, name, f"dtype must be one of {', '.join(allowed)} on {spec.name}",
                                            dtype_name(value.dtype))
    check_rank(OP, "input", input)
    channels = input.shape[1]
    for name, value in (("mean", mean), ("invstd", invstd)):
        if value.ndim != 2:
            raise InvalidParameterError(OP, name, "must be 2-D (D, C)", f"shape {value.shape}")
    if counts.ndim != 1:
        raise InvalidParameterError(OP, "counts", "must be 1-D (D,)", f"shape {counts.shape}")
    if not mean.shape[0] == invstd.shape[0] == counts.shape[0]:
        raise InvalidParameterError(OP, "counts", "mean, invstd and counts must have the same first dim D",
                                    f"{mean.shape[0]}, {invstd.shape[0]}, {counts.shape[0]}")
    for name, value in (("mean", mean), ("invstd", invstd)):
        if value.shape[1] != channels:
            raise InvalidParameterError(OP, name, f"dim 1 must equal input's C={channels}", value.shape[1])
    shape_c = (channels,)
    for name, value in (("runningMean", running_mean), ("runningVar", running_var),
                        ("meanAll", mean_all), ("invstdAll", invstd_all)):
        if value is not None and (value.shape != shape_c or not value.flags.writeable):
            check_channel_vector(OP, name, value, channels)
    if (running_mean is None) != (running_var is None):
        missing = "runningVar" if running_var is None else "runningMean"
        raise InvalidParameterError(OP, missing, "must be given when the other running statistic is",
                                    None)
    momentum = check_real(OP, "momentum", momentum)
    eps = check_real(OP, "eps", eps)
    if entry.tiling == "cann-ops-nn":
        # The fused kernel's tiling, in its order: dtypes, then the attributes as float32.
        for name, value in (("invstd", invstd), ("runningMean", running_mean), ("runningVar", running_var)):
            if value is not None and value.dtype != mean.dtype and not entry.mixed:
                raise TilingError(OP, f"[{OP}] {name} dtype must equal mean's ({dtype_name(mean.dtype)}) on "
                                  f"{spec.name}, got {dtype_name(value.dtype)}")
        if not F32(0.0) <= F32(momentum) <= F32(1.0):
            raise TilingError(OP, f"[{OP}] momentum must be in range [0, 1] (SyncBatchNormGatherStatsFused "
                              f"tiling), got {momentum}")
        if not F32(eps) > F32(0.0):
            raise TilingError(OP, f"[{OP}] eps must be positive as a float32 (SyncBatchNormGatherStatsFused "
                              f"tiling), got {eps}")
    written = (("meanAll", mean_all), ("invstdAll", invstd_all), ("runningMean", running_mean),
               ("runningVar", running_var))
    overlaps = check_overlaps(OP, written, (("mean", mean), ("invstd", invstd), ("counts", counts)))
    forced = parse_strategy(OP, GatherStatsStrategy, strategy)
    settings.resolve_deterministic(deterministic, OP)
    check_arrival_seed(OP, arrival_seed)
    plan, args = _plan(mean.shape[0], channels, mean.dtype, spec, forced, momentum, eps)
    out_dtype = mean.dtype

    def run(workspace, input, mean, invstd, running_mean, running_var, counts, mean_all, invstd_all):
        mean_out = mean_all if mean_all is not None else np.empty(channels, out_dtype)
        invstd_out = invstd_all if invstd_all is not None else np.empty(channels, out_dtype)
        if plan.strategy is GatherStatsStrategy.EMPTY:
            mean_out[...] = 0
            invstd_out[...] = np.nan
            return mean_out, invstd_out
        m32 = f32_buffer(mean_out, channels)
        s32 = f32_buffer(invstd_out, channels)
        update = running_mean is not None
        rm = f32_buffer(running_mean, channels, copy=True) if update else _NO_RUNNING
        rv = f32_buffer(running_var, channels, copy=True) if update else _NO_RUNNING
        # eps and momentum go in as Python floats; the kernel rounds them to float32 (cheaper than here).
        kernel.gather_stats(np.ascontiguousarray(mean, F32), np.ascontiguousarray(invstd, F32),
                            np.ascontiguousarray(counts, F32), workspace, args, eps, momentum, m32, s32, rm, rv, update)
        write_back(((mean_out, m32), (invstd_out, s32), (running_mean, rm), (running_var, rv)))
        return mean_out, invstd_out

    return Executor(OP, plan, run, (("input", input), ("mean", mean), ("invstd", invstd),
                                    ("runningMean", running_mean), ("runningVar", running_var), ("counts", counts),
                                    ("meanAll", mean_all), ("invstdAll", invstd_all)), outputs=2, overlaps=overlaps)


_calls = Signatures()


def bind(input, mean, invstd, running_mean, running_var, momentum, eps, counts, *,
         soc=None, strategy=None, deterministic=None, arrival_seed=None, out=None) -> Executor:
    """The first call of a signature of ``batch_norm_gather_stats_with_counts``: every check in the op_api
    order, the plan, and the call's arrays bound (``normkern.prepare`` and the signature cache keep its Bound)."""
    mean_all, invstd_all = unpack_out(OP, out, "mean_all, invstd_all")
    return prepare(input, mean, invstd, running_mean, running_var, momentum, eps, counts, mean_all, invstd_all,
                   soc=soc, strategy=strategy, deterministic=deterministic, arrival_seed=arrival_seed,
                   outputs_required=out is not None)


def batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean, running_var, momentum, eps, counts, *,
                                        soc=None, strategy=None, deterministic=None, arrival_seed=None, out=None):
    """Global ``(mean_all, invstd_all)`` from per-device ``mean``/``invstd`` (D, C) and ``counts`` (D,).

    ``input`` (rank 2-8) supplies only C. ``running_mean``/``running_var`` (C,), optional, are
    updated in place with ``momentum``; the running variance is unbiased (``var_sum / (W - 1)``).
    Outputs take ``mean``'s dtype; compute is float32. Counts are used as given (no truncation,
    no guard): see ``docs/ops/batch_norm_gather_stats_with_counts.md`` for zero counts, a total of 1
    and invstd <= 0. Every plan is deterministic: ``deterministic`` and ``arrival_seed`` are checked
    and change nothing.
    """
    key, call = _calls.find(input, mean, invstd, running_mean, running_var, momentum, eps, counts, soc, strategy,
                            deterministic, arrival_seed, out)
    if call is None:
        call = _calls.keep(key, bind(input, mean, invstd, running_mean, running_var, momentum, eps, counts, soc=soc,
                                     strategy=strategy, deterministic=deterministic, arrival_seed=arrival_seed,
                                     out=out))
    return call(input, mean, invstd, running_mean, running_var, counts, *(out or (None, None)))
