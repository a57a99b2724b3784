"""``group_norm_backward``: validation in the op_api order, the cached plan, the two stages."""

from __future__ import annotations

import math

import numpy as np

import tiling
from tiling import GroupNormBackwardPlan, GroupNormBackwardStrategy

from ...errors import InvalidParameterError
from ...kernels.dtypes import dtype_name, kernel_view
from ...kernels.streaming import worth_streaming
from ...runtime import launch, plan_spans, settings
from ...runtime.buffers import f32_buffer, in_order, write_back
from ...runtime.calls import Signatures
from ...runtime.checks import (
    check_array,
    check_arrival_seed,
    check_int,
    check_not_null,
    check_output_mask,
    check_overlaps,
    check_supported,
    parse_strategy,
    planned,
    unpack_out,
)
from ...runtime.derived import derived, kernel_args
from ...runtime.executor import Executor
from . import groups, kernel

OP = "group_norm_backward"
#: Bytes read and written a thread must have to pay for its launch (docs/performance.md,
#: "The runtime").
THREAD_BYTES = 1 << 20
F32 = np.float32
#: mean dtypes allowed beside each grad_out dtype where the support table allows mixed precision.
MIXED = {"float32": ("float32",), "float16": ("float16", "float32"), "bfloat16": ("bfloat16", "float32")}
OUTPUTS = ("gradInput", "gradGammaOut", "gradBetaOut")
S = GroupNormBackwardStrategy
#: Stage 1 prefetches ahead of its fill (``kernel._fill_ahead``) when grad_out and input together are
#: larger than this: then they come from memory on every call. Smaller ones stay in this CPU's caches
#: between calls, where the prefetching pieces cost more than they save.
PREFETCH_MIN_BYTES = 16 * 2**20
#: Stage 1 writes a float32 grad_input with streaming stores (``kernel._dx_streamed``) when it is at least
#: this large: it cannot stay in this CPU's caches, and a plain store would first read each of its lines
#: from memory. Half dtypes are not streamed: their conversion, not the traffic, bounds their dx pass.
STREAM_MIN_BYTES = 16 * 2**20


def arrival_order(plan: GroupNormBackwardPlan, seed: int | None = None) -> np.ndarray:
    """(G, N): the order in which each group's N task partials reach the outputs.

    Batch order for the ``cann`` plan (at most two addends meet there); for ``atomic`` a random
    permutation per group, drawn from ``seed`` (fresh entropy when None), which replays a run."""
    if plan.strategy is not S.ATOMIC:
        return in_order(plan, plan.g, plan.n)
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(plan.n) for _ in range(plan.g)]).astype(np.int64).reshape(plan.g, plan.n)


def _numel(value) -> int:
    return math.prod(value.shape)


def _check_mask(output_mask, outputs, outputs_required) -> tuple[bool, bool, bool]:
    """CheckMaskNotNull, which the op_api maps to ACLNN_ERR_PARAM_INVALID (161002) for every case,
    a null required output included (the doc says 161001)."""
    mask = check_output_mask(OP, output_mask, OUTPUTS, missing=InvalidParameterError)
    if outputs_required:
        for name, out, m in zip(OUTPUTS, outputs, mask, strict=True):
            if m and out is None:
                raise InvalidParameterError(OP, name, "must not be None when its outputMask entry is true "
                                            "(the op_api returns 161002 here)", None)
    return mask


def _check_dtypes(spec, entry, dy, x, mean, rstd, gamma, outputs, mask) -> None:
    """CheckDtypeValid: gradOut in the product's list (``entry``, the support table's); then equal
    dtypes (A2/A3), or the mixed pairs (mean float32 beside half activations) where the op supports them
    (950, host)."""
    allowed = entry.dtypes
    for name, value in (("gradOut", dy), ("input", x), ("mean", mean), ("rstd", rstd), ("gamma", gamma)):
        if value is not None:
            check_array(OP, name, value)
    dyt = dtype_name(dy.dtype)
    if dyt not in allowed:
        raise InvalidParameterError(OP, "gradOut", f"dtype must be one of {', '.join(allowed)} on {spec.name}", dyt)
    mixed = entry.mixed
    mean_t = dtype_name(mean.dtype)
    if mixed and mean_t not in MIXED[dyt]:
        raise InvalidParameterError(OP, "mean", f"dtype must be one of {', '.join(MIXED[dyt])} beside a {dyt} gradOut",
                                    mean_t)
    by_grad, by_mean = (dyt, "gradOut"), ((mean_t, "mean") if mixed else (dyt, "gradOut"))
    checks = (("input", x, by_grad), ("mean", mean, by_mean), ("rstd", rstd, by_mean), ("gamma", gamma, by_mean),
              (OUTPUTS[0], outputs[0] if mask[0] else None, by_grad),
              (OUTPUTS[1], outputs[1] if mask[1] else None, by_mean),
              (OUTPUTS[2], outputs[2] if mask[2] else None, by_mean))
    for name, value, (want, source) in checks:
        if value is not None and dtype_name(check_array(OP, name, value).dtype) != want:
            raise InvalidParameterError(OP, name, f"dtype must be {want} (as {source})", dtype_name(value.dtype))


def prepare(grad_out, input, mean, rstd, gamma, N, C, HxW, group, output_mask, grad_input, grad_gamma, grad_beta, *,
            soc=None, strategy=None, deterministic=None, arrival_seed=None, outputs_required=True) -> Executor:
    """All checks in the op_api order (``CheckParams`` of aclnn_group_norm_backward.cpp), then the plan.

    Order: gradOut/input/mean/rstd null (161001); outputMask and required outputs (161002, as the
    code); dtypes (161002); group > 0 and C % group == 0, and on A2/A3 C/group <= 8000 and
    C <= 240000 (161002); gradOut rank <= 8 and the numel rules of gradOut, input, mean, rstd,
    gamma and the output shapes (161002). An empty gradOut or input then returns success with no
    workspace. A SoC without the op gives 561003; a tiling the planner refuses 561002.
    """
    check_not_null(OP, (("gradOut", grad_out), ("input", input), ("mean", mean), ("rstd", rstd)))
    spec = settings.resolve_soc(soc, OP)
    entry = check_supported(OP, spec)
    outputs = (grad_input, grad_gamma, grad_beta)
    mask = _check_mask(output_mask, outputs, outputs_required)
    _check_dtypes(spec, entry, grad_out, input, mean, rstd, gamma, outputs, mask)
    n, c, hxw, g = (check_int(OP, name, v) for name, v in (("N", N), ("C", C), ("HxW", HxW), ("group", group)))
    if g <= 0:
        raise InvalidParameterError(OP, "group", "must be greater than 0", g)
    if c % g:
        raise InvalidParameterError(OP, "group", f"must divide C={c}", g)
    if spec.arch == tiling.A2_A3:  # the op_api's own limits there
        if c // g > tiling.group_norm_backward.UPPER_CARRYING_LIMIT:
            raise InvalidParameterError(OP, "group", f"must leave C/group <= 8000 on {spec.name} (C={c})", g)
        if c > tiling.group_norm_backward.MAX_C:
            raise InvalidParameterError(OP, "C", f"must not exceed 240000 on {spec.name}", c)
    if min(n, c, hxw) < 0:
        raise InvalidParameterError(OP, "N, C, HxW", "must be non-negative", (n, c, hxw))
    if grad_out.ndim > 8:
        raise InvalidParameterError(OP, "gradOut", "must have rank <= 8", f"rank {grad_out.ndim}")
    for name, value, what, want in (("gradOut", grad_out, "N*C*HxW", n * c * hxw),
                                    ("input", input, "N*C*HxW", n * c * hxw), ("mean", mean, "N*group", n * g),
                                    ("rstd", rstd, "N*group", n * g), ("gamma", gamma, "C", c)):
        if value is not None and _numel(value) != want:
            raise InvalidParameterError(OP, name, f"must have {what} = {want} elements", f"shape {value.shape}")
    gamma_shape = gamma.shape if gamma is not None else (c,)
    for name, out, m, shape in zip(OUTPUTS, outputs, mask, (input.shape, gamma_shape, gamma_shape), strict=True):
        if m and out is not None:
            if out.shape != shape:
                raise InvalidParameterError(OP, name, f"shape must be {shape}", out.shape)
            if not out.flags.writeable:
                raise InvalidParameterError(OP, name, "must be writeable", "a read-only array")
    live = tuple((name, out if m else None) for name, out, m in zip(OUTPUTS, outputs, mask, strict=True))
    overlaps = check_overlaps(OP, live, (("gradOut", grad_out), ("input", input)))
    forced = parse_strategy(OP, S, strategy)
    want_deterministic = settings.resolve_deterministic(deterministic, OP)
    check_arrival_seed(OP, arrival_seed)
    empty = grad_out.size == 0 or input.size == 0
    if empty:  # the 950's arch35 code tiles an empty input itself (key 500: the gradient columns zeroed)
        arch35 = spec.arch == tiling.ASCEND950 and forced in (None, S.ARCH35)
        forced = S.ARCH35 if arch35 else S.EMPTY
    plan = planned(OP, lambda: tiling.plan_group_norm_backward(n, c, hxw, g, dtype_name(grad_out.dtype), spec,
                                                               forced, out_dtype=dtype_name(mean.dtype),
                                                               output_mask=mask),
                   want_deterministic, f"each channel's {n} task partials")
    stats_dtype = mean.dtype

    def run(workspace: np.ndarray, grad_out, input, mean, rstd, gamma, grad_input, grad_gamma, grad_beta):
        gi = grad_input if grad_input is not None or not mask[0] else np.empty(input.shape, grad_out.dtype)
        gg = grad_gamma if grad_gamma is not None or not mask[1] else np.empty(gamma_shape, stats_dtype)
        gb = grad_beta if grad_beta is not None or not mask[2] else np.empty(gamma_shape, stats_dtype)
        if plan.strategy is S.ARCH35 and plan.mode == tiling.group_norm_backward_arch35.EMPTY_KEY:
            for out, m in ((gg, mask[1]), (gb, mask[2])):  # key 500: the empty kernel zeroes the C columns
                if m:
                    out[...] = 0
        elif plan.strategy is not S.EMPTY:
            _execute(plan, grad_out, input, mean, rstd, gamma, mask, gi, gg, gb, workspace, arrival_seed)
        elif not outputs_required:  # the Pythonic layer answers an empty input with zero sums
            for out, m in ((gg, mask[1]), (gb, mask[2])):
                if m:
                    out[...] = 0
        return tuple(o if m else None for o, m in zip((gi, gg, gb), mask, strict=True))

    return Executor(OP, plan, run, (("gradOut", grad_out), ("input", input), ("mean", mean), ("rstd", rstd),
                                    ("gamma", gamma), *zip(OUTPUTS, outputs, strict=True)), outputs=3,
                    overlaps=overlaps)


def task_views(plan: GroupNormBackwardPlan, *tensors: np.ndarray) -> list[np.ndarray]:
    """Each N*C*HxW tensor as the contiguous (N*G, C_G, HxW) array of tasks the kernels walk."""
    return [np.ascontiguousarray(t).reshape(plan.n * plan.g, plan.c_g, plan.hxw) for t in tensors]


def task_statistics(plan: GroupNormBackwardPlan, mean, rstd, gamma) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32 mean and rstd per task (N*G,) and gamma (C,) (ones when None), widened exactly."""
    gam = np.ones(plan.c, F32) if gamma is None else np.array(gamma, dtype=F32).reshape(plan.c)
    # copies: an output may be one of these very arrays (see checks.check_overlaps)
    return np.array(mean, dtype=F32).reshape(-1), np.array(rstd, dtype=F32).reshape(-1), gam


def _execute(plan, grad_out, input, mean, rstd, gamma, mask, gi, gg, gb, workspace, arrival_seed) -> None:
    """The plan's kernels into the caller's arrays: the host's ``groups`` plan in one body; the A2/host two stages,
    or an arch35 plan's (``kernel_arch35``, imported on first use: A2 and host calls never compile it)."""
    dy3, x3 = task_views(plan, grad_out, input)
    direct = mask[0] and gi.dtype == grad_out.dtype and gi.flags.c_contiguous
    dx3 = gi.reshape(dy3.shape) if direct else np.empty(dy3.shape if mask[0] else (0, 0, 0), grad_out.dtype)
    m32, r32, g32 = task_statistics(plan, mean, rstd, gamma)
    dgamma, dbeta = f32_buffer(gg if mask[1] else None, plan.c), f32_buffer(gb if mask[2] else None, plan.c)
    if plan.strategy is S.GROUPS:
        args = kernel_args(plan)
        spans = plan_spans(plan, lambda: args.core_count, 3 * dy3.nbytes, THREAD_BYTES)
        launch(groups.body_for(plan.hxw), spans, *(kernel_view(t).reshape(-1) for t in (dy3, x3, dx3)), args, m32,
               r32, g32, mask[0], dgamma.reshape(-1), dbeta.reshape(-1))
    else:
        partials = np.empty((plan.n * plan.g, 2, plan.c_g), F32)
        if plan.strategy is S.ARCH35:
            from . import kernel_arch35

            params = derived(plan, "arch35_params", lambda: kernel_arch35.params(plan))
            kernel_arch35.stage1(kernel_view(dy3), kernel_view(x3), kernel_view(dx3), m32, r32, g32, params,
                                 mask[0], partials)
            kernel_arch35.stage2(partials, params, workspace, dgamma.reshape(-1), dbeta.reshape(-1))
        else:
            _stage1(plan, dy3, x3, dx3, direct, m32, r32, g32, mask[0], partials)
            second_stage(plan, partials, workspace, arrival_order(plan, arrival_seed), dgamma.reshape(-1),
                         dbeta.reshape(-1))
    if mask[0] and not direct:
        gi[...] = dx3.reshape(gi.shape)
    write_back(((gg if mask[1] else None, dgamma.reshape(gg.shape) if mask[1] else dgamma),
                (gb if mask[2] else None, dbeta.reshape(gb.shape) if mask[2] else dbeta)))


def _stage1(plan, dy3, x3, dx3, direct, m32, r32, g32, write_dx, partials) -> None:
    """The A2/host stage 1 over the threads: the body for the plan's row shape, prefetching and streaming
    stores by size."""
    args = kernel_args(plan)
    spans = plan_spans(plan, lambda: args.core_count, dy3.nbytes + x3.nbytes + dx3.nbytes, THREAD_BYTES)
    stream = direct and worth_streaming(dx3, STREAM_MIN_BYTES)
    ahead = dy3.nbytes + x3.nbytes > PREFETCH_MIN_BYTES
    body = kernel.stage1_body(args, ahead, stream)
    if body is not kernel.stage1:
        launch(body, spans, kernel_view(dy3), kernel_view(x3), kernel_view(dx3), m32, r32, g32, args, write_dx,
               partials)
    else:
        launch(kernel.stage1, spans, kernel_view(dy3), kernel_view(x3), kernel_view(dx3), m32, r32, g32, args,
               write_dx, partials, ahead, stream)


def second_stage(plan, partials, workspace, order, dgamma, dbeta) -> None:
    """The task partials to grad_gamma / grad_beta (float32 (C,)), through the workspace as the plan says."""
    args = kernel_args(plan)
    fp32_out = plan.out_dtype == "float32"
    if args.pair_rows:
        kernel.stage2_rows(partials, workspace, args, fp32_out, dgamma, dbeta)
        return
    if not fp32_out and plan.n == 1 and plan.strategy is S.CANN:  # N == 1: each task casts its own partials
        dgamma[:] = partials[:, 0].reshape(-1)
        dbeta[:] = partials[:, 1].reshape(-1)
        return
    if fp32_out:
        kernel.add_in_order(partials, args, order, dgamma, dbeta)
        return
    ws_gamma = workspace[args.dgamma_offset:args.dgamma_offset + plan.c]
    ws_beta = workspace[args.dbeta_offset:args.dbeta_offset + plan.c]
    kernel.add_in_order(partials, args, order, ws_gamma, ws_beta)
    dgamma[:], dbeta[:] = ws_gamma, ws_beta


_calls = Signatures()


def bind(grad_out, input, mean, rstd, gamma, N: int, C: int, HxW: int, group: int,
         output_mask=(True, True, True), *, soc=None, strategy=None, deterministic=None,
         arrival_seed=None, out=None) -> Executor:
    """The first call of a signature of ``group_norm_backward``: every check in the op_api order, the plan,
    and the call's arrays bound (``normkern.prepare`` and the signature cache keep its Bound)."""
    outputs = unpack_out(OP, out, "grad_input, grad_gamma, grad_beta")
    return prepare(grad_out, input, mean, rstd, gamma, N, C, HxW, group, output_mask, *outputs, soc=soc,
                   strategy=strategy, deterministic=deterministic, arrival_seed=arrival_seed,
                   outputs_required=out is not None)


def group_norm_backward(grad_out, input, mean, rstd, gamma, N: int, C: int, HxW: int, group: int,
                        output_mask=(True, True, True), *, soc=None, strategy=None, deterministic=None,
                        arrival_seed=None, out=None):
    """Group-norm backward: ``(grad_input, grad_gamma, grad_beta)``, masked outputs None.

    ``grad_out`` and ``input`` hold N*C*HxW elements in any shape (grad_input takes input's shape);
    ``mean`` and ``rstd`` N*group elements; ``gamma`` C elements or None (ones). grad_gamma and
    grad_beta take mean's dtype and gamma's shape. Compute is float32.

    ``soc`` picks the plan (default Ascend910B2: the exact A2 GroupNormGrad tiling; Ascend950: its exact
    arch35 tiling and kernel order, ``strategy="arch35"``); ``strategy``
    ``"atomic"`` adds every task's partials onto the outputs in an arrival order (``arrival_seed``
    replays one; without it each call draws a fresh order): non-deterministic once N > 2, refused
    while determinism is on (``deterministic=`` or :func:`normkern.set_deterministic`).
    ``out=(grad_input, grad_gamma, grad_beta)`` writes into preallocated arrays.
    """
    key, call = _calls.find(grad_out, input, mean, rstd, gamma, N, C, HxW, group, output_mask, soc, strategy,
                            deterministic, arrival_seed, out)
    if call is None:
        call = _calls.keep(key, bind(grad_out, input, mean, rstd, gamma, N, C, HxW, group, output_mask, soc=soc,
                                     strategy=strategy, deterministic=deterministic, arrival_seed=arrival_seed,
                                     out=out))
    return call(grad_out, input, mean, rstd, gamma, *(out or (None, None, None)))


def bytes_moved(n: int, c: int, hxw: int, dtype) -> int:
    """The memory-traffic floor: grad_out and input read once, grad_input written once (3 tensor passes);
    each task's group is re-read for dx while it is cache-resident, which is not counted."""
    return 3 * n * c * hxw * np.dtype(dtype).itemsize
