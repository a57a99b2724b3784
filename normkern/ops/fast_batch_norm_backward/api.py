"""``fast_batch_norm_backward``: validation in the op_api order, the op_api views, the cached plan, the kernel."""

from __future__ import annotations

import numpy as np

import tiling
from tiling import FastBatchNormBackwardPlan, FastBatchNormBackwardStrategy

from ...errors import InvalidParameterError
from ...kernels.dtypes import dtype_name, kernel_view
from ...kernels.streaming import worth_streaming
from ...runtime import call_runs, launch, settings
from ...runtime.buffers import f32_buffer, write_back
from ...runtime.calls import Signatures
from ...runtime.checks import (
    check_array,
    check_arrival_seed,
    check_channel_vector,
    check_int,
    check_not_null,
    check_output_mask,
    check_overlaps,
    check_rank,
    check_real,
    check_supported,
    parse_strategy,
    planned,
    unpack_out,
)
from ...runtime.derived import derived, kernel_args
from ...runtime.executor import Executor
from . import host, kernel

OP = "fast_batch_norm_backward"
#: Bytes read and written a thread must have to pay for its launch (docs/performance.md,
#: "The runtime").
THREAD_BYTES = 3 << 19  # 1.5 MiB
F32 = np.float32
DTYPES = ("float32", "float16", "bfloat16")
OUTPUTS = ("gradInput", "gradWeight", "gradBias")
#: The training dx of a float32 grad_input at least this large, in rows (plane rows, or their HW
#: blocks) of at least ``STREAM_MIN_ROW_BYTES``, is written with streaming stores
#: (``kernel._dx_job_streamed``): it cannot stay in this CPU's caches, where a plain store reads each
#: line from memory before writing it. Shorter rows lose: each has partial lines at both ends, stored
#: plainly beside the streamed ones (docs/performance.md).
STREAM_MIN_BYTES = 16 * 2**20
STREAM_MIN_ROW_BYTES = 4096


def _check_mask(output_mask) -> tuple[bool, bool, bool]:
    """CheckMaskNotNull: a missing or empty mask is a null pointer (161001, as the code); other lengths
    than 3 are refused with 161002 (the doc; the code would read past a short mask)."""
    return check_output_mask(OP, output_mask, OUTPUTS, empty_is_null=True)


def _check_dtype(name: str, value) -> None:
    if dtype_name(check_array(OP, name, value).dtype) not in DTYPES:
        raise InvalidParameterError(OP, name, f"dtype must be one of {', '.join(DTYPES)}", dtype_name(value.dtype))


def _check_optional_dtypes(optional: tuple[tuple[str, object], ...]) -> None:
    for name, value in optional:
        if value is not None:
            _check_dtype(name, value)


def _check_attributes(training, eps, version) -> float:
    """``training`` a bool, ``eps`` a real number (returned as a float), ``version`` an int."""
    if not isinstance(training, (bool, np.bool_)):
        raise InvalidParameterError(OP, "training", "must be a bool", repr(training))
    eps = check_real(OP, "eps", eps)
    check_int(OP, "version", version, "must be an int (CANN ignores its value)")
    return eps


def phase_spans(plan, args, leads, nbytes: int):
    """What gives each phase's thread runs for a call touching ``nbytes`` (``runtime.call_runs`` of
    ``phase_work``)."""
    return call_runs(plan, lambda: phase_work(args, leads), nbytes, THREAD_BYTES)


def phase_work(args, leads) -> tuple[np.ndarray, ...]:
    """Each phase's work items: a single-core phase's cores, a cross-core phase's groups (``leads``), each by
    the (channel, block) pairs it reduces."""
    pairs = args.job_channel_count * args.job_block_count
    rows = []
    for offsets, phase_leads in zip(args.phase_core_jobs, leads, strict=True):
        if phase_leads.size:
            ends = phase_leads + args.job_group_size[phase_leads]
            rows.append(np.array([pairs[lead:end].sum() for lead, end in zip(phase_leads, ends, strict=True)]))
        else:
            rows.append(np.array([pairs[offsets[k]:offsets[k + 1]].sum() for k in range(offsets.shape[0] - 1)]))
    return tuple(rows)


def statistics(plan: FastBatchNormBackwardPlan, weight, running_mean, running_var, save_mean, save_invstd,
               eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32 ``(mean, scale, weight)`` per channel, as the op_api casts and fills them.

    Training: ``save_mean`` and ``save_invstd`` (the reciprocal standard deviation). Inference:
    ``running_mean`` and ``1/sqrt(running_var + eps)`` in float32, 0 where the root is 0 (as the
    A2 kernel's ``var == 0 ? 0 : 1 / var``). Missing tensors: means 0, variances 1, weight 1.
    Always copies: the kernel writes grad_weight/grad_bias channel by channel while it still reads
    these, and an output may be the very array given as ``weight`` (or a statistic).
    """
    c = plan.a

    def vec(value, fill):
        return np.full(c, fill, F32) if value is None else np.array(value, dtype=F32, order="C")

    w = vec(weight, 1.0)
    if plan.training:
        return vec(save_mean, 0.0), vec(save_invstd, 1.0), w
    root = np.sqrt(vec(running_var, 1.0) + F32(eps))
    with np.errstate(divide="ignore"):
        scale = np.where(root == 0, F32(0.0), F32(1.0) / root).astype(F32)
    return vec(running_mean, 0.0), scale, w


def fused_views(plan: FastBatchNormBackwardPlan, *tensors: np.ndarray) -> list[np.ndarray]:
    """Each ``(N, C, *spatial)`` tensor as the contiguous (B0, C, B1) array the kernel walks (transposed
    to (1, C, N*HW) where the op_api transposes)."""
    n, c = plan.shape[0], plan.shape[1]
    views = []
    for t in tensors:
        flat = np.ascontiguousarray(t).reshape(n, c, -1)
        if plan.transposed:
            flat = np.ascontiguousarray(flat.transpose(1, 0, 2))
        views.append(flat.reshape(plan.b0, plan.a, plan.b1))
    return views


def unfused_view(plan: FastBatchNormBackwardPlan, dx3: np.ndarray) -> np.ndarray:
    """The inverse of :func:`fused_views` for one result, shaped like the input."""
    n, c = plan.shape[0], plan.shape[1]
    if plan.transposed:
        return dx3.reshape(c, n, -1).transpose(1, 0, 2).reshape(plan.shape)
    return dx3.reshape(plan.shape)


def prepare(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, training, eps,
            output_mask, version, grad_input, grad_weight, grad_bias, *, soc=None, strategy=None,
            deterministic=None, arrival_seed=None, outputs_required=True) -> Executor:
    """Check everything in the op_api order (``CheckParams`` of aclnn_fast_batch_norm_backward.cpp), plan,
    and bind a kernel call. Nothing is written before every check has passed.

    Order: gradOut/input null (161001); empty input: success, no workspace, nothing else checked;
    SoC (561003); outputMask and required outputs null (161001); dtypes of gradOut, input (equal),
    the required outputs, the optional inputs (161002); ranks and shapes of gradOut, input,
    gradInput, then weight/runningMean/runningVar (161002). Beyond CANN, which skips them:
    saveMean/saveInvstd and gradWeight/gradBias must have length C, so nothing is read or
    written past a buffer; the call attributes must have their types. Every plan is deterministic
    (core partials are added in core order), so ``deterministic`` and ``arrival_seed`` are only checked.
    """
    check_not_null(OP, (("gradOut", grad_out), ("input", input)))
    dy = check_array(OP, "gradOut", grad_out)
    x = check_array(OP, "input", input)
    spec = settings.resolve_soc(soc, OP)
    forced = parse_strategy(OP, FastBatchNormBackwardStrategy, strategy)
    settings.resolve_deterministic(deterministic, OP)
    check_arrival_seed(OP, arrival_seed)
    optional = (("weight", weight), ("runningMean", running_mean), ("runningVar", running_var),
                ("saveMean", save_mean), ("saveInvstd", save_invstd))
    if x.size == 0 or dy.size == 0:
        # CANN's op_api returns before checking anything else; normkern checks the dtypes and the attributes
        # first, so an empty call of wrong types is refused as a full one would be (and nothing complex or
        # integral comes back).
        _check_dtype("gradOut", dy)
        _check_dtype("input", x)
        _check_optional_dtypes(optional)
        _check_attributes(training, eps, version)
        return _empty_executor(spec, x if x.size == 0 else dy, x, weight, output_mask,
                               _tensors(dy, x, weight, running_mean, running_var, save_mean, save_invstd,
                                        grad_input, grad_weight, grad_bias), outputs_required)
    check_supported(OP, spec)
    mask = _check_mask(output_mask)
    if outputs_required:
        check_not_null(OP, tuple((name, out) for name, out, m in zip(OUTPUTS, (grad_input, grad_weight, grad_bias),
                                                                     mask, strict=True) if m))
    _check_dtype("gradOut", dy)
    _check_dtype("input", x)
    if x.dtype != dy.dtype:
        raise InvalidParameterError(OP, "input", f"dtype must equal gradOut's ({dtype_name(dy.dtype)})",
                                    dtype_name(x.dtype))
    for name, out, m in zip(OUTPUTS, (grad_input, grad_weight, grad_bias), mask, strict=True):
        if m and out is not None:
            _check_dtype(name, out)
    _check_optional_dtypes(optional)
    check_rank(OP, "input", x)
    check_rank(OP, "gradOut", dy)
    if dy.shape != x.shape:
        raise InvalidParameterError(OP, "gradOut", f"shape must equal input's {x.shape}", dy.shape)
    if mask[0] and grad_input is not None:
        if grad_input.shape != x.shape:
            raise InvalidParameterError(OP, "gradInput", f"shape must equal gradOut's {x.shape}", grad_input.shape)
        if not grad_input.flags.writeable:
            raise InvalidParameterError(OP, "gradInput", "must be writeable", "a read-only array")
    channels = x.shape[1]
    for name, value in optional:
        check_channel_vector(OP, name, value, channels, written=False)
    check_channel_vector(OP, "gradWeight", grad_weight if mask[1] else None, channels)
    check_channel_vector(OP, "gradBias", grad_bias if mask[2] else None, channels)
    eps = _check_attributes(training, eps, version)
    live = tuple((name, out if m else None) for name, out, m
                 in zip(OUTPUTS, (grad_input, grad_weight, grad_bias), mask, strict=True))
    overlaps = check_overlaps(OP, live, (("gradOut", dy), ("input", x)))
    plan = planned(OP, lambda: tiling.plan_fast_batch_norm_backward(x.shape, dtype_name(x.dtype), spec, forced,
                                                                    training=bool(training), weight_dtype="float32",
                                                                    epsilon=eps))
    grad_dtype = weight.dtype if weight is not None else x.dtype
    args = kernel_args(plan)
    if plan.strategy is FastBatchNormBackwardStrategy.PLANES:
        return Executor(OP, plan, _planes_run(plan, args, mask, channels, grad_dtype, eps, x),
                        _tensors(dy, x, weight, running_mean, running_var, save_mean, save_invstd, grad_input,
                                 grad_weight, grad_bias), outputs=3, overlaps=overlaps)
    leads = derived(plan, "phase_leads", lambda: kernel.phase_leads(args))
    row_bytes = (args.hw_block if args.split_hw else args.b1) * x.dtype.itemsize
    no_dx = np.empty((0, 0, 0), x.dtype)
    spans = phase_spans(plan, args, leads, (3 if mask[0] else 2) * x.nbytes)

    def run(workspace: np.ndarray, dy, x, weight, running_mean, running_var, save_mean, save_invstd, grad_input,
            grad_weight, grad_bias):
        gi = grad_input if grad_input is not None or not mask[0] else np.empty(x.shape, x.dtype)
        mean, scale, w = statistics(plan, weight, running_mean, running_var, save_mean, save_invstd, eps)
        dy3, x3 = fused_views(plan, dy, x)
        direct = mask[0] and not plan.transposed and gi.dtype == x.dtype and gi.flags.c_contiguous
        dx3 = gi.reshape(dy3.shape) if direct else np.empty(dy3.shape, x.dtype) if mask[0] else no_dx
        gw = f32_buffer(grad_weight, channels)
        gb = f32_buffer(grad_bias, channels)
        stream = direct and plan.training and row_bytes >= STREAM_MIN_ROW_BYTES and \
            worth_streaming(dx3, STREAM_MIN_BYTES)
        kernel.backward(leads, kernel_view(dy3), kernel_view(x3), kernel_view(dx3), workspace, args, spans(), mean,
                        scale, w, plan.training, mask[0], gw, gb, stream)
        if mask[0] and not direct:
            gi[...] = unfused_view(plan, dx3)
        return _results(mask, gi, grad_weight, grad_bias, gw, gb, grad_dtype)

    return Executor(OP, plan, run, _tensors(dy, x, weight, running_mean, running_var, save_mean, save_invstd,
                                            grad_input, grad_weight, grad_bias), outputs=3, overlaps=overlaps)


def _results(mask, gi, grad_weight, grad_bias, gw, gb, grad_dtype) -> tuple:
    """The call's three results, None where masked: the given outputs (their float32 working arrays written back),
    else new ones in the gradients' dtype."""
    results = [gi, grad_weight, grad_bias]
    for i, result, m in ((1, gw, mask[1]), (2, gb, mask[2])):
        if m and results[i] is None:
            results[i] = result.astype(grad_dtype, copy=False)
    write_back(((grad_weight if mask[1] else None, gw), (grad_bias if mask[2] else None, gb)))
    return tuple(r if m else None for r, m in zip(results, mask, strict=True))


def _planes_run(plan, args, mask, channels, grad_dtype, eps, x):
    """The Bound run of a ``planes`` plan (the host's): one body over the channels (``host.planes``)."""
    spans = call_runs(plan, lambda: args.core_count, (3 if mask[0] else 2) * x.nbytes, THREAD_BYTES)
    no_dx = np.empty(0, x.dtype)

    def run(workspace, dy, x, weight, running_mean, running_var, save_mean, save_invstd, grad_input, grad_weight,
            grad_bias):
        gi = grad_input if grad_input is not None or not mask[0] else np.empty(x.shape, x.dtype)
        mean, scale, w = statistics(plan, weight, running_mean, running_var, save_mean, save_invstd, eps)
        direct = mask[0] and gi.dtype == x.dtype and gi.flags.c_contiguous
        dx = gi if direct else np.empty(x.shape, x.dtype) if mask[0] else no_dx
        gw = f32_buffer(grad_weight, channels)
        gb = f32_buffer(grad_bias, channels)
        launch(host.planes, spans(), kernel_view(np.ascontiguousarray(dy)).reshape(-1),
               kernel_view(np.ascontiguousarray(x)).reshape(-1), kernel_view(dx).reshape(-1), args, mean, scale, w,
               plan.training, mask[0], gw, gb)
        if mask[0] and not direct:
            gi[...] = dx
        return _results(mask, gi, grad_weight, grad_bias, gw, gb, grad_dtype)

    return run


def _tensors(*arrays) -> tuple:
    """The op's (name, array) pairs in its executor's order: the seven inputs, then the three outputs."""
    return tuple(zip(("gradOut", "input", "weight", "runningMean", "runningVar", "saveMean", "saveInvstd",
                      *OUTPUTS), arrays, strict=True))


def _empty_executor(spec, empty, x, weight, output_mask, tensors, outputs_required) -> Executor:
    """The op_api's early exit for an empty input or gradOut (``empty``): success, no workspace, no kernel,
    nothing written.

    The Pythonic layer still answers: an empty grad_input and zero sums for grad_weight/grad_bias."""
    plan = tiling.plan_fast_batch_norm_backward(empty.shape if empty.ndim >= 2 else (0, 0), "float32",
                                                spec if tiling.support(OP, spec).runs else "host", "empty")
    if outputs_required:
        return Executor(OP, plan, lambda workspace, *given: given[-3:], tensors, outputs=3)
    mask = _check_mask(output_mask)
    channels = x.shape[1] if x.ndim >= 2 else 0
    grad_dtype = weight.dtype if isinstance(weight, np.ndarray) else x.dtype

    def run(workspace, *given):
        results = (np.empty(x.shape, x.dtype), np.zeros(channels, grad_dtype), np.zeros(channels, grad_dtype))
        return tuple(r if m else None for r, m in zip(results, mask, strict=True))

    return Executor(OP, plan, run, tensors, outputs=3)


_calls = Signatures()


def bind(grad_out: np.ndarray, input: np.ndarray, weight, running_mean, running_var, save_mean,
         save_invstd, training: bool, eps: float, output_mask=(True, True, True), version: int = 0,
         *, soc=None, strategy=None, deterministic=None, arrival_seed=None, out=None) -> Executor:
    """The first call of a signature of ``fast_batch_norm_backward``: every check in the op_api order, the plan,
    and the call's arrays bound (``normkern.prepare`` and the signature cache keep its Bound)."""
    outputs = unpack_out(OP, out, "grad_input, grad_weight, grad_bias")
    return prepare(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, training, eps,
                   output_mask, version, *outputs, soc=soc, strategy=strategy, deterministic=deterministic,
                   arrival_seed=arrival_seed, outputs_required=out is not None)


def fast_batch_norm_backward(grad_out: np.ndarray, input: np.ndarray, weight, running_mean, running_var, save_mean,
                             save_invstd, training: bool, eps: float, output_mask=(True, True, True), version: int = 0,
                             *, soc=None, strategy=None, deterministic=None, arrival_seed=None, out=None):
    """Batch-norm backward over every axis but 1: ``(grad_input, grad_weight, grad_bias)``.

    Training uses ``save_mean`` and ``save_invstd`` (the reciprocal standard deviation, as PyTorch's
    and the aclnn parameter table say; the A2 kernel reads that input as a variance, which normkern
    does not copy); inference uses ``running_mean`` and ``running_var`` with ``eps``. Missing
    tensors are filled as CANN does (weight 1, means 0, variances 1). ``output_mask`` selects the
    outputs; a masked one comes back as None. ``version`` is accepted and ignored, as in CANN.

    grad_input takes grad_out's dtype; grad_weight and grad_bias take weight's (grad_out's when weight
    is None). Compute is float32. ``out=(grad_input, grad_weight, grad_bias)`` writes into
    preallocated arrays (None where masked). ``soc`` picks the plan (default Ascend910B2: the exact A2
    tiling); ``strategy`` forces a template. Every plan is deterministic: ``deterministic`` and
    ``arrival_seed`` are checked and change nothing.
    """
    key, call = _calls.find(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, training, eps,
                            output_mask, version, soc, strategy, deterministic, arrival_seed, out)
    if call is None:
        call = _calls.keep(key, bind(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd,
                                     training, eps, output_mask, version, soc=soc, strategy=strategy,
                                     deterministic=deterministic, arrival_seed=arrival_seed, out=out))
    return call(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd,
                *(out or (None, None, None)))


def bytes_moved(shape, dtype) -> int:
    """The memory-traffic floor: grad_out and input read once, grad_input written once (3 tensor passes).

    Training reads each channel twice (reductions, then dx); the second read is counted as free,
    which holds while a channel stays cache-resident."""
    count = 1
    for extent in shape:
        count *= extent
    return 3 * count * np.dtype(dtype).itemsize
