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
slots in core order, and computes dx for its own blocks. ``prange`` runs over the CPU threads,
each over a run of the plan's cores (``_threads``), or over the channel groups.

Rows are taken with ``row_view`` (no reference counting): on short rows (7x7 planes) Numba's slices
cost more than the arithmetic.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from tiling.fast_batch_norm_backward import PassGeometry, pass_extent, pass_step

from ..._dtypes import from_f32, to_f32
from ..._lanes import fold_capacity, fold_halves
from ..._streaming import line_span, store_fence, stream_out
from ..._views import row_view

F32 = np.float32
#: Bytes of dx computed into the L1 scratch between two runs of streaming stores (``_dx_job_streamed``).
_STREAM_PIECE_BYTES = 1024
#: Elements of each row a fused bfloat16 sweep adds before it writes their dx (``_fused_four_rows_in_pieces``).
_FUSED_PIECE = 512


@njit(cache=True, inline="always", error_model="numpy")
def _infer_dx(d, scale, weight, like):
    """The inference dx of one element, ``(dy * r) * w``, in the element type of ``like``."""
    return from_f32((d * scale) * weight, like)


@njit(cache=True, inline="always", error_model="numpy")
def _add_at(acc_dy, acc_dyx, i, d, v, first):
    """acc[i] += (d, v); the first pass adds onto +0 without reading acc."""
    if first:
        acc_dy[i] = F32(0.0) + d
        acc_dyx[i] = F32(0.0) + v
    else:
        acc_dy[i] += d
        acc_dyx[i] += v


@njit(cache=True, inline="always", error_model="numpy")
def _add_row(acc_dy, acc_dyx, dy_row, x_row, mean, first):
    """acc += (dy, (x - mean) * dy) elementwise."""
    for i in range(dy_row.shape[0]):
        d = to_f32(dy_row[i])
        _add_at(acc_dy, acc_dyx, i, d, (to_f32(x_row[i]) - mean) * d, first)


@njit(cache=True, inline="always", error_model="numpy")
def _add_two_rows(acc_dy, acc_dyx, dy_a, x_a, dy_b, x_b, mean, first):
    """``_add_row`` of row a, then of row b, with one load and one store of each accumulator."""
    for i in range(dy_a.shape[0]):
        da = to_f32(dy_a[i])
        db = to_f32(dy_b[i])
        va = (to_f32(x_a[i]) - mean) * da
        vb = (to_f32(x_b[i]) - mean) * db
        if first:
            acc_dy[i] = (F32(0.0) + da) + db
            acc_dyx[i] = (F32(0.0) + va) + vb
        else:
            acc_dy[i] = (acc_dy[i] + da) + db
            acc_dyx[i] = (acc_dyx[i] + va) + vb


@njit(cache=True, inline="always", error_model="numpy")
def _add_four_at(acc_dy, acc_dyx, i, dy_a, x_a, dy_b, x_b, dy_c, x_c, dy_d, x_d, mean, first):
    """Position ``i`` of a four-row sweep: rows a, b, c, d added onto both accumulators in turn; returns
    the four dy values."""
    da = to_f32(dy_a[i])
    db = to_f32(dy_b[i])
    dc = to_f32(dy_c[i])
    dd = to_f32(dy_d[i])
    va = (to_f32(x_a[i]) - mean) * da
    vb = (to_f32(x_b[i]) - mean) * db
    vc = (to_f32(x_c[i]) - mean) * dc
    vd = (to_f32(x_d[i]) - mean) * dd
    if first:
        acc_dy[i] = (((F32(0.0) + da) + db) + dc) + dd
        acc_dyx[i] = (((F32(0.0) + va) + vb) + vc) + vd
    else:
        acc_dy[i] = (((acc_dy[i] + da) + db) + dc) + dd
        acc_dyx[i] = (((acc_dyx[i] + va) + vb) + vc) + vd
    return da, db, dc, dd


@njit(cache=True, error_model="numpy")
def _add_four_rows(acc_dy, acc_dyx, dy_a, x_a, dy_b, x_b, dy_c, x_c, dy_d, x_d, mean, first):
    """``_add_row`` of rows a, b, c, d in turn, with one load and one store of each accumulator.

    A function of its own, called once a row: inlined it would be compiled again into every caller,
    and a call per row is cheap beside the rows that have four equal passes."""
    for i in range(dy_a.shape[0]):
        _add_four_at(acc_dy, acc_dyx, i, dy_a, x_a, dy_b, x_b, dy_c, x_c, dy_d, x_d, mean, first)


@njit(cache=True, inline="always", error_model="numpy")
def _add_four_rows_infer(acc_dy, acc_dyx, dy_a, x_a, dx_a, dy_b, x_b, dx_b, dy_c, x_c, dx_c, dy_d, x_d, dx_d, mean,
                         scale, weight, first):
    """``_add_four_rows`` that also stores the inference dx of each element it reads."""
    like = dx_a[0]
    for i in range(dy_a.shape[0]):
        da, db, dc, dd = _add_four_at(acc_dy, acc_dyx, i, dy_a, x_a, dy_b, x_b, dy_c, x_c, dy_d, x_d, mean, first)
        dx_a[i] = _infer_dx(da, scale, weight, like)
        dx_b[i] = _infer_dx(db, scale, weight, like)
        dx_c[i] = _infer_dx(dc, scale, weight, like)
        dx_d[i] = _infer_dx(dd, scale, weight, like)


@njit(cache=True, inline="always", error_model="numpy")
def _following_rows(dy, geo, c, block, last, j):
    """Where plane ``j`` of the three passes after ``block`` starts (flat indices)."""
    step = _pass_step(geo)
    plane_b, hw0_b, _, _ = _pass_extent(geo, block + step, last)
    plane_c, hw0_c, _, _ = _pass_extent(geo, block + 2 * step, last)
    plane_d, hw0_d, _, _ = _pass_extent(geo, block + 3 * step, last)
    return (_row_start(dy, plane_b + j, c, hw0_b), _row_start(dy, plane_c + j, c, hw0_c),
            _row_start(dy, plane_d + j, c, hw0_d))


def _fused_four_rows(dy, x, dx, geo, c, block, last, j, row, hw_len, acc_dy, acc_dyx, lo, mean, scale, weight, first):
    """Plane ``j`` of the four equal passes from ``block``, fused inference: the four rows added onto the
    accumulators in one sweep, with one load and one store of each, and their dx written (compiled code
    only; ``_fused_four_rows_overload`` picks the loop per dtype).

    Out of line, called once a row: inlined, it would change the code of ``_reduce_job`` for the jobs that
    never group (small planes) and compile into it again."""
    raise NotImplementedError("_fused_four_rows is only available inside @njit code")


def _fused_four_rows_in_sweep(dy, x, dx, geo, c, block, last, j, row, hw_len, acc_dy, acc_dyx, lo, mean, scale, weight,
                              first):
    """float32 and float16: the dx stores inside the sweep (``_add_four_rows_infer``)."""
    row_b, row_c, row_d = _following_rows(dy, geo, c, block, last, j)
    _add_four_rows_infer(row_view(acc_dy, lo, hw_len), row_view(acc_dyx, lo, hw_len), row_view(dy, row, hw_len),
                         row_view(x, row, hw_len), row_view(dx, row, hw_len), row_view(dy, row_b, hw_len),
                         row_view(x, row_b, hw_len), row_view(dx, row_b, hw_len), row_view(dy, row_c, hw_len),
                         row_view(x, row_c, hw_len), row_view(dx, row_c, hw_len), row_view(dy, row_d, hw_len),
                         row_view(x, row_d, hw_len), row_view(dx, row_d, hw_len), mean, scale, weight, first)


def _fused_four_rows_in_pieces(dy, x, dx, geo, c, block, last, j, row, hw_len, acc_dy, acc_dyx, lo, mean, scale,
                               weight, first):
    """bfloat16: piece by piece, the sweep (``_add_four_rows``), then each row's dx from its dy, which
    the sweep has just brought into L1."""
    row_b, row_c, row_d = _following_rows(dy, geo, c, block, last, j)
    for p0 in range(0, hw_len, _FUSED_PIECE):
        n = min(_FUSED_PIECE, hw_len - p0)
        _add_four_rows(row_view(acc_dy, lo + p0, n), row_view(acc_dyx, lo + p0, n), row_view(dy, row + p0, n),
                       row_view(x, row + p0, n), row_view(dy, row_b + p0, n), row_view(x, row_b + p0, n),
                       row_view(dy, row_c + p0, n), row_view(x, row_c + p0, n), row_view(dy, row_d + p0, n),
                       row_view(x, row_d + p0, n), mean, first)
        for r in (row, row_b, row_c, row_d):
            _dx_row_infer(row_view(dy, r + p0, n), row_view(dx, r + p0, n), scale, weight)


@overload(_fused_four_rows, jit_options={"error_model": "numpy"})
def _fused_four_rows_overload(dy, x, dx, geo, c, block, last, j, row, hw_len, acc_dy, acc_dyx, lo, mean, scale, weight,
                              first):
    """One loop per specialization: float32 and float16 store the dx inside the sweep; bfloat16, whose
    rounding to nearest-even does not vectorize four rows at a time, writes its dx piece by piece after
    the sweep, from the dy the sweep has just brought into L1."""
    return _fused_four_rows_in_pieces if dy.dtype == types.int16 else _fused_four_rows_in_sweep


@njit(cache=True, inline="always", error_model="numpy")
def _add_row_infer(acc_dy, acc_dyx, dy_row, x_row, dx_row, mean, scale, weight, first):
    """``_add_row`` that also stores the inference dx of each element it reads."""
    like = dx_row[0]
    for i in range(dy_row.shape[0]):
        d = to_f32(dy_row[i])
        _add_at(acc_dy, acc_dyx, i, d, (to_f32(x_row[i]) - mean) * d, first)
        dx_row[i] = _infer_dx(d, scale, weight, like)


@njit(cache=True, inline="always", error_model="numpy")
def _dx_row_infer(dy_row, dx_row, scale, weight):
    like = dx_row[0]
    for i in range(dy_row.shape[0]):
        dx_row[i] = _infer_dx(to_f32(dy_row[i]), scale, weight, like)


@njit(cache=True, inline="always", error_model="numpy")
def _dx_row(dy_row, x_row, dx_row, mean, shift, k, scale, weight):
    like = dx_row[0]
    for i in range(dy_row.shape[0]):
        d = to_f32(dy_row[i])
        dx_row[i] = from_f32((((d - shift) - (to_f32(x_row[i]) - mean) * k) * scale) * weight, like)


@njit(cache=True, inline="always", error_model="numpy")
def _row_start(t, plane, c, hw0):
    """Flat index of ``t[plane, c, hw0]`` in a C-contiguous (B0, C, B1) array."""
    return (plane * t.shape[1] + c) * t.shape[2] + hw0


#: The plan's own pass arithmetic, compiled into the kernels.
_pass_extent = njit(inline="always", error_model="numpy")(pass_extent)
_pass_step = njit(inline="always", error_model="numpy")(pass_step)


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


#: Positions zeroed at the end of a plane's ``b1_align`` slot before its row is added: the pads
#: (fewer than one 32-byte block of the input dtype, so at most 15) and the row's last elements,
#: which the row's first-pass ``0 + value`` then overwrites.
PAD_GROUP = 16


@njit(cache=True, inline="always", error_model="numpy")
def _zero_pad_group(acc_dy, acc_dyx, slot_end):
    """Zero ``[slot_end - PAD_GROUP, slot_end)`` of both buffers: a constant-length loop of a few vector
    stores, where a loop over just the 1 to 15 pads would cost a loop's overhead per row and buffer."""
    a = row_view(acc_dy, slot_end - PAD_GROUP, PAD_GROUP)
    for i in range(PAD_GROUP):
        a[i] = 0.0
    b = row_view(acc_dyx, slot_end - PAD_GROUP, PAD_GROUP)
    for i in range(PAD_GROUP):
        b[i] = 0.0


@njit(cache=True, error_model="numpy")
def _reduce_job(dy, x, dx, geo, c, first, count, mean, scale, weight, fuse_dx, acc_dy, acc_dyx):
    """The two sums of channel ``c`` over blocks [first, first + count), in the plan's pass order;
    ``fuse_dx`` also writes the inference dx of every element it reads.

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
        while group < 4 and block + group * step < last:
            _, _, hw_len_n, planes_n = _pass_extent(geo, block + group * step, last)
            if planes_n != planes or hw_len_n != hw_len:
                break
            group += 1
        if fuse_dx and group < 4:  # a fused pass groups by 4 only (``_fused_four_rows``; a pair lost)
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
            if fuse_dx and group == 4:
                _fused_four_rows(dy, x, dx, geo, c, block, last, j, row, hw_len, acc_dy, acc_dyx, lo, mean, scale,
                                 weight, is_first)
            elif fuse_dx:
                _add_row_infer(part_dy, part_dyx, dy_row, x_row, row_view(dx, row, hw_len), mean, scale, weight,
                               is_first)
            elif group > 1:  # the next passes add onto the same positions: all in one sweep
                row_b, row_c, row_d = _following_rows(dy, geo, c, block, last, j)
                if group == 4:
                    _add_four_rows(part_dy, part_dyx, dy_row, x_row, row_view(dy, row_b, hw_len),
                                   row_view(x, row_b, hw_len), row_view(dy, row_c, hw_len), row_view(x, row_c, hw_len),
                                   row_view(dy, row_d, hw_len), row_view(x, row_d, hw_len), mean, is_first)
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


def _dx_job_streamed(dy, x, dx, geo, c, first, count, mean, shift, k, scale, weight):
    """``_dx_job`` with the whole cache lines of each row written by streaming stores (compiled code only)."""
    raise NotImplementedError("_dx_job_streamed is only available inside @njit code")


def _dx_job_streamed_float32(dy, x, dx, geo, c, first, count, mean, shift, k, scale, weight):
    """Each row's pieces of 1 KiB computed into an L1 scratch and their lines streamed out
    (``_streaming``); the partial lines at the row's ends stored plainly; then a store fence."""
    scratch = np.empty(_STREAM_PIECE_BYTES // dx.itemsize, dx.dtype)
    for block in range(first, first + count):
        plane, hw0, hw_len, _ = _pass_extent(geo, block, block + 1)
        row = _row_start(dy, plane, c, hw0)
        lines_start, lines_end = line_span(dx, row, hw_len)
        for lo, stop in ((row, lines_start), (lines_end, row + hw_len)):
            if stop > lo:
                _dx_piece(row_view(dy, lo, stop - lo), row_view(x, lo, stop - lo), row_view(dx, lo, stop - lo), mean,
                          shift, k, scale, weight)
        for lo in range(lines_start, lines_end, scratch.size):
            length = min(scratch.size, lines_end - lo)
            _dx_piece(row_view(dy, lo, length), row_view(x, lo, length), row_view(scratch, 0, length), mean, shift, k,
                      scale, weight)
            stream_out(dx, lo, scratch, length)
    store_fence()


@njit(cache=True, error_model="numpy")
def _dx_piece(dy_row, x_row, dx_row, mean, shift, k, scale, weight):
    """``_dx_row`` as a function of its own: the streamed rows call one copy of its loop."""
    _dx_row(dy_row, x_row, dx_row, mean, shift, k, scale, weight)


@overload(_dx_job_streamed, jit_options={"error_model": "numpy"})
def _dx_job_streamed_overload(dy, x, dx, geo, c, first, count, mean, shift, k, scale, weight):
    """Compiled for float32 only, the one dtype the API streams (``api.STREAM_MIN_BYTES``): the other
    specializations compile no second dx loop, and raise if asked to stream."""
    if dx.dtype == types.float32:
        return _dx_job_streamed_float32

    def refuse(dy, x, dx, geo, c, first, count, mean, shift, k, scale, weight):
        raise ValueError("_dx_job: streaming stores are compiled for float32 dx only")

    return refuse


@njit(cache=True, error_model="numpy")
def _dx_job(dy, x, dx, geo, c, first, count, mean, shift, k, scale, weight, stream):
    """The training dx of channel ``c`` over blocks [first, first + count); ``stream`` writes it with
    streaming stores (``_dx_job_streamed``)."""
    if stream:
        _dx_job_streamed(dy, x, dx, geo, c, first, count, mean, shift, k, scale, weight)
        return
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
def _whole_jobs(dy, x, dx, args, jobs, mean, scale, weight, training, write_dx, grad_weight, grad_bias, stream):
    """A core's single-core jobs: each channel reduced, finished and (training) its dx, while it is hot."""
    acc_dy = np.empty(fold_capacity(args.fold_len), F32)
    acc_dyx = np.empty(fold_capacity(args.fold_len), F32)
    fuse_dx = write_dx and not training
    geo = _geometry(args)
    for job in jobs:
        first, count = args.job_block_start[job], args.job_block_count[job]
        for c in range(args.job_channel_start[job], args.job_channel_start[job] + args.job_channel_count[job]):
            s_dy, s_dyx = _reduce_job(dy, x, dx, geo, c, first, count, mean[c], scale[c], weight[c], fuse_dx,
                                      acc_dy, acc_dyx)
            gw = s_dyx * scale[c]
            grad_bias[c] = s_dy
            grad_weight[c] = gw
            if training and write_dx:
                shift, k = _dx_factors(s_dy, gw, scale[c], args.count)
                _dx_job(dy, x, dx, geo, c, first, count, mean[c], shift, k, scale[c], weight[c], stream)


@njit(cache=True, inline="always", error_model="numpy")
def _group(dy, x, dx, ws, args, lead, mean, scale, weight, training, write_dx, grad_weight, grad_bias, stream):
    """One cross-core channel group: every member core's partials into its workspace slot, then (the
    NPU's SyncAll) the slots added in core order, then each member's dx. Members are jobs
    ``lead .. lead + size - 1`` (one job a core in these phases, sorted by core)."""
    acc_dy = np.empty(fold_capacity(args.fold_len), F32)
    acc_dyx = np.empty(fold_capacity(args.fold_len), F32)
    geo = _geometry(args)
    size = args.job_group_size[lead]
    first_slot = args.job_group_first[lead]
    c = args.job_channel_start[lead]
    fuse_dx = write_dx and not training
    for job in range(lead, lead + size):
        s_dy, s_dyx = _reduce_job(dy, x, dx, geo, c, args.job_block_start[job], args.job_block_count[job], mean[c],
                                  scale[c], weight[c], fuse_dx, acc_dy, acc_dyx)
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
    if training and write_dx:
        shift, k = _dx_factors(s_dy, gw, scale[c], args.count)
        for job in range(lead, lead + size):
            _dx_job(dy, x, dx, geo, c, args.job_block_start[job], args.job_block_count[job], mean[c], shift, k,
                    scale[c], weight[c], stream)


@njit(cache=True, inline="always", error_model="numpy")
def _is_lead(args, job):
    """Whether ``job`` leads a cross-core group (the group's first core)."""
    return args.job_group_size[job] > 1 and args.job_group_first[job] == args.job_core[job]


@njit(parallel=True, cache=True, error_model="numpy")
def backward(dy, x, dx, ws, args, spans, mean, scale, weight, training, write_dx, grad_weight, grad_bias, stream):
    """Run every phase of the plan; ``dy``, ``x``, ``dx`` are (B0, C, B1) views in kernel dtypes.

    ``grad_weight`` / ``grad_bias`` are float32 (C,); ``write_dx`` False leaves ``dx`` untouched;
    ``stream`` writes the training dx with streaming stores (``_dx_job_streamed``), a hint: the same bits.
    A single-core phase ``p`` runs thread by thread, thread ``t`` the jobs of cores
    [spans[p, t], spans[p, t + 1]) in core order (``_threads``); a cross-core phase runs group by
    group (each group on one thread: its members' partials, the combine, then their dx, while the
    channel is in cache). The additions are the plan's either way: every member's partial is its
    own blocks in its own order, and the group's slots are added in core order.
    """
    phases = args.phase_core_jobs.shape[0]
    cores = args.phase_core_jobs.shape[1] - 1
    for phase in range(phases):
        offsets = args.phase_core_jobs[phase]
        begin, end = offsets[0], offsets[cores]
        leads = 0
        for job in range(begin, end):
            leads += _is_lead(args, job)
        bounds = spans[phase]
        lead_jobs = np.empty(leads, np.int64)
        k = 0
        for job in range(begin, end):
            if _is_lead(args, job):
                lead_jobs[k] = job
                k += 1
        # One parallel loop for both kinds of phase, its bodies inlined: each separately compiled level
        # (a function of its own, a second parfor) would compile and emit the reduction's code again.
        items = bounds.shape[0] - 1 if leads == 0 else leads
        for t in prange(items):
            if leads == 0:  # a thread's cores are adjacent, so are their jobs
                _whole_jobs(dy, x, dx, args, range(offsets[bounds[t]], offsets[bounds[t + 1]]), mean, scale, weight,
                            training, write_dx, grad_weight, grad_bias, stream)
            else:
                _group(dy, x, dx, ws, args, lead_jobs[t], mean, scale, weight, training, write_dx, grad_weight,
                       grad_bias, stream)
