"""FastBatchNormBackward kernels: the BatchNormGradV3 plans executed step by step, in float32.

Per channel ``c`` with ``n = B0*B1`` elements, ``w = weight[c]``, ``m`` the mean and ``r`` the
inverse standard deviation (training: ``save_mean``, ``save_invstd``; inference: ``running_mean``
and ``1/sqrt(running_var + eps)``, 0 where that square root is 0, as the A2 kernel)::

    sum_dy  = sum dy                       grad_bias   = sum_dy
    sum_dyx = sum (x - m) * dy             grad_weight = sum_dyx * r
    training:  k  = (grad_weight * r) / n,   s = sum_dy * (1 / n)
               dx = (((dy - s) - (x - m) * k) * r) * w
    inference: dx = (dy * r) * w           (fused into the reduction pass)

each product and sum rounded to float32 in that order (no FMA), as the A2 split-load kernels
compute it. Both sums follow the plan: a core's UB passes are added elementwise into two float32
buffers of ``fold_len`` elements (plane ``j`` of a pass at offset ``j * b1_align``), which are then
reduced by one fold-halves ReduceSum each. In a cross-core phase each core writes its two partials
to its workspace slot; after the phase (the NPU's SyncAll) every core of a group adds the group's
slots in core order, and computes dx for its own blocks. A phase is a per-core body
(``normkern.runtime``) over a run of the plan's cores, or over a run of its channel groups.

The math of one row is in ``rows.py``; ``sweeps.py`` holds the speed-only variants, which make the
same additions per position with fewer loads and stores. Rows are taken with ``row_view`` (no
reference counting): on short rows (7x7 planes) Numba's slices cost more than the arithmetic.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tiling.fast_batch_norm_backward import PassGeometry

from ...kernels.lanes import LANES, fold_capacity, fold_halves, fold_short
from ...kernels.views import row_view
from ...runtime import body, launch
from .rows import F32, _add_row, _add_row_infer, _dx_row, _pass_extent, _pass_step, _row_start
from .sweeps import (
    PAD_GROUP,
    _add_four_rows,
    _add_two_rows,
    _dx_job_streamed,
    _following_rows,
    _fused_four_rows,
    _zero_pad_group,
)


@njit(cache=True, inline="always", error_model="numpy")
def _geometry(args):
    """The ``PassGeometry`` of ``args``: a small tuple, cheap to pass to the per-channel functions where
    the whole ``args`` (arrays included) is not."""
    return PassGeometry(args.split_hw, args.hw_blocks, args.hw_block, args.b1, args.planes_per_pass, args.b1_align,
                        args.fold_len)


@njit(cache=True, inline="always", error_model="numpy")
def _zero(buf, start, stop):
    for i in range(start, stop):
        buf[i] = 0.0


@njit(cache=True, inline="always", error_model="numpy")
def _plane_passes(dy, x, dx, geo, c, first, last, mean, scale, weight, fuse_dx, acc_dy, acc_dyx):
    """``reduce_job`` where every pass is one whole plane (split HW into one chunk: the host's short
    planes): the planes added position by position onto ``[0, b1)`` (the caller folds them); ``fuse_dx``
    writes the inference dx of each row as it is added. The same additions as the general walk, without
    its per-pass bookkeeping, which costs as much as a short plane's arithmetic."""
    b1 = geo.b1
    part_dy = row_view(acc_dy, 0, b1)
    part_dyx = row_view(acc_dyx, 0, b1)
    swept = first
    if not fuse_dx:  # four planes a sweep: one load and store of each accumulator per position for four adds
        while swept + 4 <= last:
            ra = _row_start(dy, swept, c, 0)
            rb = _row_start(dy, swept + 1, c, 0)
            rc = _row_start(dy, swept + 2, c, 0)
            rd = _row_start(dy, swept + 3, c, 0)
            _add_four_rows(part_dy, part_dyx, row_view(dy, ra, b1), row_view(x, ra, b1), row_view(dy, rb, b1),
                           row_view(x, rb, b1), row_view(dy, rc, b1), row_view(x, rc, b1), row_view(dy, rd, b1),
                           row_view(x, rd, b1), mean, swept == first)
            swept += 4
    for plane in range(swept, last):
        row = _row_start(dy, plane, c, 0)
        if fuse_dx:
            _add_row_infer(part_dy, part_dyx, row_view(dy, row, b1), row_view(x, row, b1), row_view(dx, row, b1),
                           mean, scale, weight, plane == first)
        else:
            _add_row(part_dy, part_dyx, row_view(dy, row, b1), row_view(x, row, b1), mean, plane == first)


def _plane_channel_function(short: bool):
    """``_plane_channel``, for planes of at most 64 elements (``short``: both folds in registers, inlined, no
    out-of-line fold compiled) or of any length. ``short`` is a closure constant, the closure's only value."""

    def plane_channel(dy, x, dx, geo, c, first, count, mean, scale, weight, training, write_dx, n, acc_dy, acc_dyx):
        """A single-core job's channel when every pass is one whole plane: its two sums (``_plane_passes``),
        then (training) its dx, in one function: a short plane's channel costs less than the calls of the
        general path (the reduction job, ``_dx_job``), each of which passes every array again."""
        _plane_passes(dy, x, dx, geo, c, first, first + count, mean, scale, weight, write_dx and not training,
                      acc_dy, acc_dyx)
        if short:
            s_dy, s_dyx = fold_short(acc_dy, geo.b1), fold_short(acc_dyx, geo.b1)
        else:
            s_dy, s_dyx = fold_halves(acc_dy, geo.fold_len, geo.b1), fold_halves(acc_dyx, geo.fold_len, geo.b1)
        if training and write_dx:
            _plane_dx(dy, x, dx, geo, c, first, count, mean, scale, weight, n, s_dy, s_dyx)
        return s_dy, s_dyx

    return njit(cache=True, error_model="numpy")(plane_channel)


@njit(cache=True, inline="always", error_model="numpy")
def _plane_dx(dy, x, dx, geo, c, first, count, mean, scale, weight, n, s_dy, s_dyx):
    """The training dx of a whole-plane channel from its two sums."""
    shift, k = _dx_factors(s_dy, s_dyx * scale, scale, n)
    b1 = geo.b1
    for plane in range(first, first + count):
        row = _row_start(dy, plane, c, 0)
        _dx_row(row_view(dy, row, b1), row_view(x, row, b1), row_view(dx, row, b1), mean, shift, k, scale, weight)


_plane_channel = _plane_channel_function(False)
_plane_channel_short = _plane_channel_function(True)


def _passes_reduction(max_group: int, fuses: bool):
    """The reduction job of a channel, adding at most ``max_group`` equal passes in one sweep, with the
    inference dx fused into every pass if ``fuses`` (and never if not): three compiled functions
    (``_reduce_fused`` for inference with dx, ``_reduce_swept`` for inference without it and half-dtype
    training, ``_reduce_rows`` for float32 training), so that a body carries only the code its call runs
    (where the sweeps do not pay, float32 training, their code also slowed the one-row path:
    docs/performance.md). Both flags are closure constants, pruned before the job compiles."""

    def reduce_job(dy, x, dx, geo, c, first, count, mean, scale, weight, fuse_dx, acc_dy, acc_dyx):
        """The two sums of channel ``c`` over blocks [first, first + count), in the plan's pass order;
        it also writes the inference dx of every element it reads when it was made ``fuses`` (``fuse_dx``, the
        callers' flag, is then True: the reduction, not the argument, decides).

        The buffers are never zeroed as a whole: the first pass writes ``0 + value`` (the same bits as
        adding onto a zeroed buffer), the plane pads inside it and any longer later pass's extra
        positions are zeroed, and the fold reads only the ``used`` prefix."""
        last = first + count
        b1_align, fold_len = geo.b1_align, geo.fold_len
        step = _pass_step(geo)
        used = 0
        block = first
        while block < last:
            plane, hw0, hw_len, planes = _pass_extent(geo, block, last)
            is_first = block == first
            extent = (planes - 1) * b1_align + hw_len
            if not is_first and extent > used:  # a split-HW job may start on a short tail chunk
                _zero(acc_dy, used, extent)
                _zero(acc_dyx, used, extent)
            # Consecutive passes over the same positions are added in one sweep, 4 or 2 at a time (three go
            # as 2 + 1: one sweep function fewer to compile). Per position the adds keep their order.
            group = 1
            if max_group > 1:  # a closure constant: a reduction of single rows compiles no sweeps
                while group < max_group and block + group * step < last:
                    _, _, hw_len_n, planes_n = _pass_extent(geo, block + group * step, last)
                    if planes_n != planes or hw_len_n != hw_len:
                        break
                    group += 1
                if fuses and group < 4:  # a fused pass groups by 4 only (``_fused_four_rows``; a pair lost)
                    group = 1
                elif group == 3:
                    group = 2
            pads = is_first and hw_len < b1_align  # the plane pads inside the pass, zeroed once
            for j in range(planes):
                lo = j * b1_align
                if pads and j < planes - 1 and b1_align >= PAD_GROUP:
                    _zero_pad_group(acc_dy, acc_dyx, lo + b1_align)  # before the row, which overwrites its part
                row = _row_start(dy, plane + j, c, hw0)
                dy_row = row_view(dy, row, hw_len)
                x_row = row_view(x, row, hw_len)
                part_dy = row_view(acc_dy, lo, hw_len)
                part_dyx = row_view(acc_dyx, lo, hw_len)
                if fuses:  # a closure constant: the other branch is pruned before it compiles
                    if group == 4:
                        _fused_four_rows(dy, x, dx, geo, c, block, last, j, row, hw_len, acc_dy, acc_dyx, lo, mean,
                                         scale, weight, is_first)
                    else:
                        _add_row_infer(part_dy, part_dyx, dy_row, x_row, row_view(dx, row, hw_len), mean, scale,
                                       weight, is_first)
                elif max_group > 1 and group > 1:  # the next passes add onto the same positions: one sweep
                    row_b, row_c, row_d = _following_rows(dy, geo, c, block, last, j)
                    if group == 4:
                        _add_four_rows(part_dy, part_dyx, dy_row, x_row, row_view(dy, row_b, hw_len),
                                       row_view(x, row_b, hw_len), row_view(dy, row_c, hw_len),
                                       row_view(x, row_c, hw_len), row_view(dy, row_d, hw_len),
                                       row_view(x, row_d, hw_len), mean, is_first)
                    else:
                        _add_two_rows(part_dy, part_dyx, dy_row, x_row, row_view(dy, row_b, hw_len),
                                      row_view(x, row_b, hw_len), mean, is_first)
                else:
                    _add_row(part_dy, part_dyx, dy_row, x_row, mean, is_first)
                if pads and j < planes - 1 and b1_align < PAD_GROUP:
                    _zero(acc_dy, lo + hw_len, lo + b1_align)
                    _zero(acc_dyx, lo + hw_len, lo + b1_align)
            used = max(used, extent)
            block += group * step
        return fold_halves(acc_dy, fold_len, used), fold_halves(acc_dyx, fold_len, used)

    return reduce_job


_reduce_fused = njit(cache=True, error_model="numpy")(_passes_reduction(4, True))
_reduce_swept = njit(cache=True, error_model="numpy")(_passes_reduction(4, False))
_reduce_rows = njit(cache=True, error_model="numpy")(_passes_reduction(1, False))


@njit(cache=True, error_model="numpy")
def _dx_job(dy, x, dx, geo, c, first, count, mean, shift, k, scale, weight):
    """The training dx of channel ``c`` over blocks [first, first + count), stored plainly (``_dx_job_streamed``
    writes it with streaming stores)."""
    for block in range(first, first + count):
        plane, hw0, hw_len, _ = _pass_extent(geo, block, block + 1)
        row = _row_start(dy, plane, c, hw0)
        _dx_row(row_view(dy, row, hw_len), row_view(x, row, hw_len), row_view(dx, row, hw_len), mean, shift, k,
                scale, weight)


@njit(cache=True, inline="always", error_model="numpy")
def _dx_factors(sum_dy, grad_weight, scale, count):
    """(shift, k) of the training dx: sum_dy * (1/n) and (grad_weight * r) / n."""
    n = F32(count)
    return sum_dy * (F32(1.0) / n), (grad_weight * scale) / n


@njit(cache=True, inline="always", error_model="numpy")
def _whole_plane_jobs(dy, x, dx, args, jobs, mean, scale, weight, training, write_dx, grad_weight, grad_bias,
                      plane_channel):
    """``whole_jobs`` (``_phase_kernel``) when every pass is one whole plane (``plane_channel``: ``_plane_channel``
    or ``_plane_channel_short``)."""
    acc_dy = np.empty(fold_capacity(args.fold_len), F32)
    acc_dyx = np.empty(fold_capacity(args.fold_len), F32)
    geo = _geometry(args)
    for job in jobs:
        first, count = args.job_block_start[job], args.job_block_count[job]
        for c in range(args.job_channel_start[job], args.job_channel_start[job] + args.job_channel_count[job]):
            s_dy, s_dyx = plane_channel(dy, x, dx, geo, c, first, count, mean[c], scale[c], weight[c], training,
                                        write_dx, args.count, acc_dy, acc_dyx)
            grad_bias[c] = s_dy
            grad_weight[c] = s_dyx * scale[c]


def _phase_bodies(inference: bool, stream: bool, fused: bool = False, swept: bool = False):
    """The two bodies of a phase for one pass (``_phase_kernel``): each calls one reduction (an inference call
    sweeps, with the dx fused when it is asked for; a training call adds rows (float32, ``_reduce_rows``) or,
    ``swept`` (half dtypes, whose rows gain from the sweeps), sweeps) and only training's call the dx jobs,
    plain or (``stream``) with streaming stores. ``fused``: an inference call that writes dx
    (``_reduce_fused``; without, ``_reduce_swept``).
    The flags are closure constants (a branch on them is pruned before it compiles), and the closure's only
    values, as ``_phase_kernel``'s."""

    @njit(cache=True, inline="always", error_model="numpy")
    def whole_jobs(dy, x, dx, args, jobs, mean, scale, weight, write_dx, grad_weight, grad_bias):
        """A core's single-core jobs: each channel reduced, finished and (training) its dx, while it is hot."""
        acc_dy = np.empty(fold_capacity(args.fold_len), F32)
        acc_dyx = np.empty(fold_capacity(args.fold_len), F32)
        geo = _geometry(args)
        for job in jobs:
            first, count = args.job_block_start[job], args.job_block_count[job]
            for c in range(args.job_channel_start[job], args.job_channel_start[job] + args.job_channel_count[job]):
                if inference and fused:
                    s_dy, s_dyx = _reduce_fused(dy, x, dx, geo, c, first, count, mean[c], scale[c], weight[c],
                                                True, acc_dy, acc_dyx)
                elif inference:
                    s_dy, s_dyx = _reduce_swept(dy, x, dx, geo, c, first, count, mean[c], scale[c], weight[c],
                                                False, acc_dy, acc_dyx)
                elif swept:
                    s_dy, s_dyx = _reduce_swept(dy, x, dx, geo, c, first, count, mean[c], scale[c], weight[c],
                                                False, acc_dy, acc_dyx)
                else:
                    s_dy, s_dyx = _reduce_rows(dy, x, dx, geo, c, first, count, mean[c], scale[c], weight[c],
                                               False, acc_dy, acc_dyx)
                gw = s_dyx * scale[c]
                grad_bias[c] = s_dy
                grad_weight[c] = gw
                if not inference and write_dx:
                    shift, k = _dx_factors(s_dy, gw, scale[c], args.count)
                    if stream:
                        _dx_job_streamed(dy, x, dx, geo, c, first, count, mean[c], shift, k, scale[c], weight[c])
                    else:
                        _dx_job(dy, x, dx, geo, c, first, count, mean[c], shift, k, scale[c], weight[c])

    @njit(cache=True, inline="always", error_model="numpy")
    def group(dy, x, dx, ws, args, lead, mean, scale, weight, write_dx, grad_weight, grad_bias):
        """One cross-core channel group: every member core's partials into its workspace slot, then (the
        NPU's SyncAll) the slots added in core order, then each member's dx. Members are jobs
        ``lead .. lead + size - 1`` (one job a core in these phases, sorted by core)."""
        acc_dy = np.empty(fold_capacity(args.fold_len), F32)
        acc_dyx = np.empty(fold_capacity(args.fold_len), F32)
        geo = _geometry(args)
        size = args.job_group_size[lead]
        first_slot = args.job_group_first[lead]
        c = args.job_channel_start[lead]
        for job in range(lead, lead + size):
            first, count = args.job_block_start[job], args.job_block_count[job]
            if inference and fused:
                s_dy, s_dyx = _reduce_fused(dy, x, dx, geo, c, first, count, mean[c], scale[c], weight[c], True,
                                            acc_dy, acc_dyx)
            elif inference:
                s_dy, s_dyx = _reduce_swept(dy, x, dx, geo, c, first, count, mean[c], scale[c], weight[c], False,
                                            acc_dy, acc_dyx)
            elif swept:
                s_dy, s_dyx = _reduce_swept(dy, x, dx, geo, c, first, count, mean[c], scale[c], weight[c], False,
                                            acc_dy, acc_dyx)
            else:
                s_dy, s_dyx = _reduce_rows(dy, x, dx, geo, c, first, count, mean[c], scale[c], weight[c], False,
                                           acc_dy, acc_dyx)
            slot = first_slot + job - lead
            ws[args.dbias_offset + slot * 8] = s_dy
            ws[args.dweight_offset + slot * 8] = s_dyx
        s_dy = F32(0.0)
        s_dyx = F32(0.0)
        for slot in range(first_slot, first_slot + size):
            s_dy += ws[args.dbias_offset + slot * 8]
        for slot in range(first_slot, first_slot + size):
            s_dyx += ws[args.dweight_offset + slot * 8]
        gw = s_dyx * scale[c]
        grad_bias[c] = s_dy
        grad_weight[c] = gw
        if not inference and write_dx:
            shift, k = _dx_factors(s_dy, gw, scale[c], args.count)
            for job in range(lead, lead + size):
                first, count = args.job_block_start[job], args.job_block_count[job]
                if stream:
                    _dx_job_streamed(dy, x, dx, geo, c, first, count, mean[c], shift, k, scale[c], weight[c])
                else:
                    _dx_job(dy, x, dx, geo, c, first, count, mean[c], shift, k, scale[c], weight[c])

    return whole_jobs, group


_whole_jobs_training, _group_training = _phase_bodies(False, False)
_whole_jobs_training_swept, _group_training_swept = _phase_bodies(False, False, swept=True)
_whole_jobs_streamed, _group_streamed = _phase_bodies(False, True)
_whole_jobs_inference, _group_inference = _phase_bodies(True, False)
_whole_jobs_inference_dx, _group_inference_dx = _phase_bodies(True, False, True)


def _phase_kernel(inference: bool, stream: bool, fused: bool = False, swept: bool = False):
    """The two bodies of a phase for one pass and store (``channels`` for a phase of single-core jobs,
    ``groups`` for one of cross-core groups): a call compiles only the bodies its plan runs. Their closures
    hold only the flags: Numba's cache key holds the closure's values, and a dispatcher's pickle differs
    from process to process (a closure over the bodies would never load from the cache)."""

    def channels(dy, x, dx, ws, args, offsets, leads, mean, scale, weight, write_dx, grad_weight, grad_bias, begin,
                 end):
        """A phase of single-core jobs (core ``k``'s are ``offsets[k]:offsets[k + 1]``): the jobs of cores
        [begin, end) in core order (adjacent cores, adjacent jobs)."""
        jobs = range(offsets[begin], offsets[end])
        if inference and fused:  # closure constants: the other bodies' branches are pruned before they compile
            _whole_jobs_inference_dx(dy, x, dx, args, jobs, mean, scale, weight, write_dx, grad_weight, grad_bias)
        elif inference:
            _whole_jobs_inference(dy, x, dx, args, jobs, mean, scale, weight, write_dx, grad_weight, grad_bias)
        elif stream:
            _whole_jobs_streamed(dy, x, dx, args, jobs, mean, scale, weight, write_dx, grad_weight, grad_bias)
        elif swept:
            _whole_jobs_training_swept(dy, x, dx, args, jobs, mean, scale, weight, write_dx, grad_weight, grad_bias)
        else:
            _whole_jobs_training(dy, x, dx, args, jobs, mean, scale, weight, write_dx, grad_weight, grad_bias)

    def groups(dy, x, dx, ws, args, offsets, leads, mean, scale, weight, write_dx, grad_weight, grad_bias, begin,
               end):
        """A phase of cross-core groups: the groups [begin, end), ``leads`` their first jobs (a group on one
        thread: its members' partials, the combine, then their dx, while the channel is in cache)."""
        for t in range(begin, end):
            if inference and fused:
                _group_inference_dx(dy, x, dx, ws, args, leads[t], mean, scale, weight, write_dx, grad_weight,
                                    grad_bias)
            elif inference:
                _group_inference(dy, x, dx, ws, args, leads[t], mean, scale, weight, write_dx, grad_weight, grad_bias)
            elif stream:
                _group_streamed(dy, x, dx, ws, args, leads[t], mean, scale, weight, write_dx, grad_weight, grad_bias)
            elif swept:
                _group_training_swept(dy, x, dx, ws, args, leads[t], mean, scale, weight, write_dx, grad_weight,
                                      grad_bias)
            else:
                _group_training(dy, x, dx, ws, args, leads[t], mean, scale, weight, write_dx, grad_weight, grad_bias)

    return body(channels), body(groups)


channels_training, groups_training = _phase_kernel(False, False)
channels_training_swept, groups_training_swept = _phase_kernel(False, False, swept=True)
channels_streamed, groups_streamed = _phase_kernel(False, True)
channels_inference, groups_inference = _phase_kernel(True, False)
channels_inference_dx, groups_inference_dx = _phase_kernel(True, False, True)


def phase_bodies(training: bool, stream: bool, write_dx: bool, swept: bool):
    """The (single-core phase, cross-core phase) bodies of a call, by its pass, its dx store, (inference)
    whether it writes dx and (training) whether its rows sweep (``swept``: half dtypes; streaming is float32
    only); module attributes, looked up per call."""
    if training:
        if stream:
            return channels_streamed, groups_streamed
        return (channels_training_swept, groups_training_swept) if swept else (channels_training, groups_training)
    return (channels_inference_dx, groups_inference_dx) if write_dx else (channels_inference, groups_inference)


def _whole_planes_body(short: bool):
    """``whole_planes`` for planes of at most 64 elements (``short``) or of any length; the flag a closure
    constant, the closure's only value."""

    def whole_planes(dy, x, dx, args, offsets, mean, scale, weight, training, write_dx, grad_weight, grad_bias,
                     begin, end):
        """A single-core phase of a plan whose every pass is one whole plane (the host's short planes), as
        ``channels`` runs one: a body of its own, so such a plan compiles only its one-plane channel code
        (and, for planes of at most 64 elements, no out-of-line fold)."""
        jobs = range(offsets[begin], offsets[end])
        if short:  # pruned before it compiles: each body compiles one channel function
            _whole_plane_jobs(dy, x, dx, args, jobs, mean, scale, weight, training, write_dx, grad_weight, grad_bias,
                              _plane_channel_short)
        else:
            _whole_plane_jobs(dy, x, dx, args, jobs, mean, scale, weight, training, write_dx, grad_weight, grad_bias,
                              _plane_channel)

    return body(whole_planes)


whole_planes = _whole_planes_body(False)
whole_planes_short = _whole_planes_body(True)


def phase_leads(args) -> tuple[np.ndarray, ...]:
    """Each phase's cross-core groups, by their first jobs (empty for a single-core phase)."""
    cores = args.phase_core_jobs.shape[1] - 1
    leads = []
    for offsets in args.phase_core_jobs:
        jobs = np.arange(offsets[0], offsets[cores])
        leads.append(jobs[(args.job_group_size[jobs] > 1) & (args.job_group_first[jobs] == args.job_core[jobs])])
    return tuple(leads)


def backward(leads, dy, x, dx, ws, args, spans, mean, scale, weight, training, write_dx, grad_weight, grad_bias,
             stream):
    """Run every phase of the plan; ``dy``, ``x``, ``dx`` are (B0, C, B1) views in kernel dtypes, ``leads``
    the plan's ``phase_leads``, ``spans[phase]`` the phase's thread spans (over its cores, or over its groups
    for a cross-core phase).

    ``grad_weight`` / ``grad_bias`` are float32 (C,); ``write_dx`` False leaves ``dx`` untouched;
    ``stream`` writes the training dx with streaming stores (``_dx_job_streamed``), a hint: the same bits.
    The single-core phases of a one-plane plan run ``whole_planes`` (``whole_planes_short`` for planes of at
    most 64 elements), every other phase one of ``phase_bodies`` (by pass and store, single-core or cross-core):
    a call compiles only the bodies its plan, its pass and its store use. The additions are the plan's either
    way: every member's partial is its own blocks in its own order, and a group's slots are added in core
    order.
    """
    planes = args.split_hw and args.hw_blocks == 1
    for phase, phase_leads in enumerate(leads):
        offsets = args.phase_core_jobs[phase]
        if planes and not phase_leads.size:
            launch(whole_planes_short if args.b1 <= LANES else whole_planes, spans[phase], dy, x, dx, args, offsets,
                   mean, scale, weight, training, write_dx, grad_weight, grad_bias)
        else:
            channels, groups = phase_bodies(training, stream, write_dx, dy.dtype != np.float32)
            launch(groups if phase_leads.size else channels, spans[phase], dy, x, dx, ws, args, offsets, phase_leads,
                   mean, scale, weight, write_dx, grad_weight, grad_bias)
