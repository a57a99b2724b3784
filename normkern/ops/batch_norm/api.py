"""``batch_norm``: validation in the aclnnBatchNorm op_api order, the cached plan, one kernel call."""

from __future__ import annotations

import numpy as np

import tiling
from tiling import BatchNormStrategy

from ...errors import InvalidParameterError
from ...kernels.dtypes import dtype_name, kernel_view
from ...kernels.running import inverse_std
from ...runtime import call_runs, launch, settings
from ...runtime.buffers import f32_buffer, write_back
from ...runtime.calls import Signatures
from ...runtime.checks import (
    check_array,
    check_arrival_seed,
    check_channel_vector,
    check_dtypes,
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

OP = "batch_norm"
#: Bytes read and written a thread must have to pay for its launch (docs/performance.md, "The runtime"): training
#: reads its input three times (from L2 after the first), evaluation once, as batch_norm_elemt.
THREAD_BYTES = 384 << 10
EVAL_THREAD_BYTES = 6 << 20
F32 = np.float32
OUTPUTS = ("output", "saveMean", "saveInvstd")


def prepare(input, weight, bias, running_mean, running_var, training, momentum, eps, output, save_mean,
            save_invstd, *, soc=None, strategy=None, deterministic=None, arrival_seed=None,
            outputs_required=True) -> Executor:
    """Every check in the aclnnBatchNorm op_api order, the plan, and the bound kernel call.

    Order: null input and output, in training saveMean and saveInvstd (161001); an empty input returns at
    once (saveMean 0, saveInvstd NaN); dtypes of input, output, saveMean, saveInvstd, then weight, bias,
    runningMean, runningVar (161002); ranks and output's shape; the (C,) shapes (161002); a SoC without the
    op 561003, one without a plan 561002. Nothing is written before every check has passed.
    """
    if not isinstance(training, (bool, np.bool_)):
        raise InvalidParameterError(OP, "training", "must be a bool", repr(training))
    training = bool(training)
    saves = (("saveMean", save_mean), ("saveInvstd", save_invstd)) if training else ()
    check_not_null(OP, (("input", input),) + ((("output", output),) + saves if outputs_required else ()))
    spec = settings.resolve_soc(soc, OP)
    entry = check_supported(OP, spec)
    x = check_array(OP, "input", input)
    tensors = (("input", x), ("weight", weight), ("bias", bias), ("runningMean", running_mean),
               ("runningVar", running_var), ("output", output), ("saveMean", save_mean), ("saveInvstd", save_invstd))
    if x.size == 0:
        return _empty_executor(spec, x, tensors)
    check_dtypes(OP, spec, entry, (("input", x), ("output", output), ("saveMean", save_mean),
                                   ("saveInvstd", save_invstd)))
    check_dtypes(OP, spec, entry, (("weight", weight), ("bias", bias), ("runningMean", running_mean),
                                   ("runningVar", running_var)))
    check_rank(OP, "input", x)
    if output is not None:
        check_rank(OP, "output", output)
        if output.shape != x.shape:
            raise InvalidParameterError(OP, "output", f"shape must equal input's {x.shape}", output.shape)
        if not output.flags.writeable:
            raise InvalidParameterError(OP, "output", "must be writeable", "a read-only array")
    channels = x.shape[1]
    for name, value in (("weight", weight), ("bias", bias)):
        check_channel_vector(OP, name, value, channels, written=False)
    for name, value in (("runningMean", running_mean), ("runningVar", running_var)):
        check_channel_vector(OP, name, value, channels, written=training)
    for name, value in (("saveMean", save_mean), ("saveInvstd", save_invstd)):
        check_channel_vector(OP, name, value, channels)
    updated = (("runningMean", running_mean), ("runningVar", running_var)) if training else ()
    overlaps = check_overlaps(OP, (("output", output), ("saveMean", save_mean), ("saveInvstd", save_invstd),
                                   *updated), (("input", x),))
    momentum, eps = check_real(OP, "momentum", momentum), check_real(OP, "eps", eps)
    forced = parse_strategy(OP, BatchNormStrategy, strategy)
    settings.resolve_deterministic(deterministic, OP)  # every plan of this op is deterministic
    check_arrival_seed(OP, arrival_seed)
    plan = planned(OP, lambda: tiling.plan_batch_norm(x.shape, dtype_name(x.dtype), spec, forced,
                                                      training=training))
    empty = plan.strategy is BatchNormStrategy.EMPTY
    args = None if empty else kernel_args(plan)
    spans = call_runs(plan, lambda: args.core_count, 2 * x.nbytes, THREAD_BYTES if training else EVAL_THREAD_BYTES)
    momentum32, eps32 = F32(momentum), F32(eps)

    def run(workspace, input, weight, bias, running_mean, running_var, output, save_mean, save_invstd):
        y = output if output is not None else np.empty(input.shape, input.dtype)
        direct = y.flags.c_contiguous
        flat_y = kernel_view(y if direct else np.empty(input.shape, input.dtype)).reshape(-1)
        mean = f32_buffer(save_mean, channels)
        invstd = f32_buffer(save_invstd, channels)
        if empty:
            mean.fill(0.0)
            invstd.fill(np.nan)
        else:
            w = np.ones(channels, F32) if weight is None else np.asarray(weight, F32)
            b = np.zeros(channels, F32) if bias is None else np.asarray(bias, F32)
            flat_x = kernel_view(np.ascontiguousarray(input)).reshape(-1)
            if training:  # a running statistic that is None is updated in a scratch array (CANN's fill)
                rm = np.zeros(channels, F32) if running_mean is None else f32_buffer(running_mean, channels, True)
                rv = np.ones(channels, F32) if running_var is None else f32_buffer(running_var, channels, True)
                body = kernel.train_direct if args.direct else kernel.train
                launch(body, spans(), flat_x, args, eps32, momentum32, w, b, rm, rv, flat_y, mean, invstd)
                write_back(((running_mean, rm), (running_var, rv)))
            else:
                mean[:] = 0.0 if running_mean is None else running_mean
                inverse_std(np.ones(channels, F32) if running_var is None else np.asarray(running_var, F32), eps32,
                            invstd)
                launch(kernel.evaluate, spans(), flat_x, args, mean, invstd, w, b, flat_y)
            if not direct:
                y[...] = flat_y.reshape(input.shape)
        write_back(((save_mean, mean), (save_invstd, invstd)))
        return y, (mean if save_mean is None else save_mean), (invstd if save_invstd is None else save_invstd)

    return Executor(OP, plan, run, tensors, outputs=3, overlaps=overlaps)


def _empty_executor(spec, x, tensors) -> Executor:
    """The op_api's early exit for an empty input (before any other check): success, no kernel; a given
    saveMean is filled with 0 and saveInvstd with NaN, nothing else is written. The Pythonic layer answers an
    empty output and those statistics."""
    channels = x.shape[1] if x.ndim >= 2 else 0
    for name, value in tensors[-2:]:
        if value is not None and not check_array(OP, name, value).flags.writeable:
            raise InvalidParameterError(OP, name, "must be writeable", "a read-only array")
    plan = tiling.plan_batch_norm((0, max(channels, 1)), "float32", spec if tiling.support(OP, spec).runs else "host",
                                  "empty")

    def run(workspace, input, weight, bias, running_mean, running_var, output, save_mean, save_invstd):
        mean = np.zeros(channels, F32) if save_mean is None else save_mean
        invstd = np.full(channels, np.nan, F32) if save_invstd is None else save_invstd
        if save_mean is not None:
            save_mean[...] = 0
        if save_invstd is not None:
            save_invstd[...] = np.nan
        return (np.empty(input.shape, input.dtype) if output is None else output), mean, invstd

    return Executor(OP, plan, run, tensors, outputs=3)


_calls = Signatures()


def bind(input, weight, bias, running_mean, running_var, training, momentum, eps, *, soc=None, strategy=None,
         deterministic=None, arrival_seed=None, out=None) -> Executor:
    """The first call of a signature of ``batch_norm``: every check in the op_api order, the plan, and the
    call's arrays bound (``normkern.prepare`` and the signature cache keep its Bound)."""
    output, save_mean, save_invstd = unpack_out(OP, out, "output, save_mean, save_invstd")
    return prepare(input, weight, bias, running_mean, running_var, training, momentum, eps, output, save_mean,
                   save_invstd, soc=soc, strategy=strategy, deterministic=deterministic, arrival_seed=arrival_seed,
                   outputs_required=out is not None)


def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, *, soc=None, strategy=None,
               deterministic=None, arrival_seed=None, out=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch norm's forward in one call (aclnnBatchNorm; PyTorch's ``native_batch_norm``), channel on axis 1.

    ``training``: the batch's per-channel ``mean`` and ``invstd = 1/sqrt(biased_var + eps)`` (two-pass),
    ``output = (x - mean) * (invstd * weight) + bias``, and ``running_mean``/``running_var`` (when both are
    given) updated in place: ``running * (1 - momentum) + batch * momentum``, the variance unbiased
    (``sum (x - mean)^2 / (N*HxW - 1)``). Otherwise the output from the running statistics (zeros and ones
    when None). ``weight``/``bias`` may be None (ones/zeros). Every (C,) tensor is float32 or of the
    input's dtype; compute is float32. Returns ``(output, save_mean, save_invstd)``: the output in the
    input's dtype, the statistics used as float32 (C,) arrays (in evaluation the running mean and
    ``1/sqrt(running_var + eps)``). ``out=(output, save_mean, save_invstd)`` writes into given arrays. An
    input with no elements per channel gives mean 0 and invstd NaN and updates nothing.

    Only the ``host`` SoC has a plan (normkern's own: ``tiling.plan_batch_norm``); the NPU SoCs refuse the op
    with 561002 until theirs are modeled.
    """
    key, call = _calls.find(input, weight, bias, running_mean, running_var, training, momentum, eps, soc, strategy,
                            deterministic, arrival_seed, out)
    if call is None:
        call = _calls.keep(key, bind(input, weight, bias, running_mean, running_var, training, momentum, eps,
                                     soc=soc, strategy=strategy, deterministic=deterministic,
                                     arrival_seed=arrival_seed, out=out))
    return call(input, weight, bias, running_mean, running_var, *(out or (None, None, None)))


def bytes_moved(shape, dtype) -> int:
    """The memory-traffic floor of one call: the input read once, the output written once."""
    count = 1
    for extent in shape:
        count *= extent
    return 2 * count * np.dtype(dtype).itemsize
