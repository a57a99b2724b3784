"""GroupNormBackward kernels: the GroupNormGrad plans executed step by step, in float32.

Per task ``t = (n, g)`` with ``m = mean[t]``, ``r = rstd[t]``, ``M = C_G * HxW`` and, for each of its
channels, ``x_hat = x * r + ((-1 * m) * r)`` (the A2 ``Adds_Muls`` template: a product, then a sum)::

    dbeta_c  = ReduceSum(dy)              dgamma_c = ReduceSum(x_hat * dy)      (over HxW)
    c1 = ReduceSum(gamma * dbeta) / M     c2 = ReduceSum(gamma * dgamma) / M     (over the group)

each ReduceSum in the A2 fold-halves order (mode 3: per HxW chunk, the chunk sums combined with
Kahan compensation, as ``CopyIn_x`` / ``Copyout_dgamma``). dx in the formula of the plan's mode:

    mode 0, channel start 32-byte aligned:  dy * (r * gamma) - (x_hat * (r * c2) + r * c1)
    mode 0, unaligned channel:              dy * (r * gamma) - (x * ((r * r) * c2) + (r * c1 - ((m * r) * r) * c2))
    modes 1, 2, 3:                          (dy * gamma - (x * (r * c2) + -1 * ((m * r) * c2 - c1))) * r
    mode 5 (HxW == 1):                      (dy * gamma) * r - (x_hat * (r * c2) + r * c1)

every operation rounded to float32 in that order. The task partials then reach grad_gamma /
grad_beta through the plan's second stage (pairs of batches onto workspace rows, the rows folded in
UB batches, halves or arrival order), see ``stage2_rows`` and ``add_in_order``
below. Stage 1 is a per-core body: it runs a run of the plan's cores and their tasks
(``normkern.runtime``). Stage 2 runs its cores' channel chunks one after another on the calling
thread: it adds ceil(N/2) rows of C partials, about 1/HxW of stage 1's work.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

from ...kernels.dtypes import from_f32, to_f32
from ...kernels.lanes import (
    LANES,
    SHORT_ROW_MAX,
    fold_capacity,
    fold_halves,
    fold_short,
    prefetch_l2_piece,
    short_row_dx_x,
    short_row_dx_x_hat,
    short_row_sums,
    short_row_sums_128,
    short_row_sums_256,
    short_row_width,
)
from ...kernels.streaming import line_span, store_fence, stream_out
from ...kernels.views import row_view
from ...runtime import body

F32 = np.float32


@njit(cache=True, inline="always", error_model="numpy")
def _fill(buf_dy, buf_dg, dy_row, x_row, r, neg_mr):
    """UB-like scratch of a row, both at once: ``buf_dy = dy`` and ``buf_dg = x_hat * dy``."""
    for i in range(dy_row.shape[0]):
        d = to_f32(dy_row[i])
        buf_dy[i] = d
        buf_dg[i] = (to_f32(x_row[i]) * r + neg_mr) * d


#: Bytes of a row filled between two rounds of prefetches (``_fill_ahead``), and how far ahead of the
#: fill those rounds ask: far enough for memory to answer before the fill arrives, near enough that
#: the lines are still in L2 then.
_PIECE_BYTES = 512
_AHEAD_BYTES = 8192
#: Bytes of dx computed into the L1 scratch between two runs of streaming stores (``_dx_streamed``).
_STREAM_PIECE_BYTES = 1024


@njit(cache=True, error_model="numpy")
def _fill_ahead(buf_dy, buf_dg, dy, x, start, n, r, neg_mr):
    """``_fill`` of the row ``[start, start + n)`` of the flat arrays in pieces, each after asking for the
    lines ``_AHEAD_BYTES`` on into L2: a thread's rows, channels and tasks lie one after another, so
    that is the data it reads next, and the hardware prefetcher alone keeps one thread's fill well
    below the read bandwidth. A function of its own: inlined beside the plain fill it would be a
    second copy of the fill loop to compile, and one function for both fills would cost the plain
    fill (short rows, from cache) a call a row."""
    size = dy.itemsize
    piece = _PIECE_BYTES // size
    ahead = _AHEAD_BYTES // size
    dy_flat = row_view(dy, 0, dy.size)
    x_flat = row_view(x, 0, x.size)
    for lo in range(start, start + n, piece):
        length = min(piece, start + n - lo)
        prefetch_l2_piece(dy_flat, lo + ahead, lo + ahead + piece)
        prefetch_l2_piece(x_flat, lo + ahead, lo + ahead + piece)
        _fill(row_view(buf_dy, lo - start, length), row_view(buf_dg, lo - start, length), row_view(dy_flat, lo, length),
              row_view(x_flat, lo, length), r, neg_mr)


@njit(cache=True, inline="always", error_model="numpy")
def _fill_row(buf_dy, buf_dg, dy, x, start, n, r, neg_mr, ahead):
    """``_fill`` of the row ``[start, start + n)`` of the flat arrays, prefetching (``_fill_ahead``) if asked."""
    if ahead:
        _fill_ahead(buf_dy, buf_dg, dy, x, start, n, r, neg_mr)
    else:
        _fill(buf_dy, buf_dg, row_view(dy, start, n), row_view(x, start, n), r, neg_mr)


@njit(cache=True, error_model="numpy")
def _channel_sums(dy, x, row, n, r, neg_mr, mode, chunk, buf_dy, buf_dg, ahead):
    """(dbeta, dgamma) of the channel at flat offset ``row`` (``n`` elements): the row (mode 3: each
    chunk) copied to two UB-like buffers in one pass, then each folded; ``ahead`` prefetches while
    filling (``_fill_ahead``). One pass reads dy once instead of twice."""
    if mode == 5:
        d = to_f32(row_view(dy, row, 1)[0])
        return d, (to_f32(row_view(x, row, 1)[0]) * r + neg_mr) * d
    if mode != 3:
        _fill_row(buf_dy, buf_dg, dy, x, row, n, r, neg_mr, ahead)
        return fold_halves(buf_dy, n, n), fold_halves(buf_dg, n, n)
    total_dy = F32(0.0)
    total_dg = F32(0.0)
    corr_dy = F32(0.0)
    corr_dg = F32(0.0)
    for start in range(0, n, chunk):
        length = min(chunk, n - start)
        _fill_row(buf_dy, buf_dg, dy, x, row + start, length, r, neg_mr, ahead)
        adjusted = fold_halves(buf_dy, length, length) - corr_dy
        summed = adjusted + total_dy
        corr_dy = (summed - total_dy) - adjusted
        total_dy = summed
        adjusted = fold_halves(buf_dg, length, length) - corr_dg
        summed = adjusted + total_dg
        corr_dg = (summed - total_dg) - adjusted
        total_dg = summed
    return total_dy, total_dg


@njit(cache=True, error_model="numpy")
def _task_sums(dy, x, first, c_g, hxw, r, neg_mr, mode, chunk, buf_dy, buf_dg, ahead, dbeta, dgamma):
    """(dbeta, dgamma) of a task's ``c_g`` channels (flat channel index ``first`` on), into ``dbeta`` /
    ``dgamma``. Modes 0-2 without prefetching fill each row here, inlined (and fold it inlined too when it
    has at most 64 elements, ``fold_halves``): on short rows (7x7 planes) a call per row
    (``_channel_sums``, passing every array again) costs as much as the row."""
    if mode in (0, 1, 2) and not ahead:
        for j in range(c_g):
            row = (first + j) * hxw
            _fill(buf_dy, buf_dg, row_view(dy, row, hxw), row_view(x, row, hxw), r, neg_mr)
            dbeta[j] = fold_halves(buf_dy, hxw, hxw)
            dgamma[j] = fold_halves(buf_dg, hxw, hxw)
        return
    for j in range(c_g):
        dbeta[j], dgamma[j] = _channel_sums(dy, x, (first + j) * hxw, hxw, r, neg_mr, mode, chunk, buf_dy, buf_dg,
                                            ahead)


@njit(cache=True, inline="always", error_model="numpy")
def _group_factor(gamma, sums, count, scale, small):
    """ReduceSum(gamma * sums) / M over the group's channels (``Mul_ReduceSum_template``)."""
    for j in range(count):
        small[j] = gamma[j] * sums[j]
    return fold_halves(small, count, count) / scale


@njit(cache=True, error_model="numpy")
def _dx_rows(dy_row, x_row, dx_row, n, mode, aligned, m, r, neg_mr, gamma, c1, c2):
    """dx of ``n`` elements of one channel, in the formula of the plan's mode (module docstring)."""
    like = dx_row[0]
    if mode == 0 and aligned:
        a, b, gr = r * c2, r * c1, r * gamma
        for i in range(n):
            x_hat = to_f32(x_row[i]) * r + neg_mr
            dx_row[i] = from_f32(to_f32(dy_row[i]) * gr - (x_hat * a + b), like)
    elif mode == 0:
        a, b, gr = (r * r) * c2, r * c1 - ((m * r) * r) * c2, r * gamma
        for i in range(n):
            dx_row[i] = from_f32(to_f32(dy_row[i]) * gr - (to_f32(x_row[i]) * a + b), like)
    elif mode == 5:
        a, b = r * c2, r * c1
        for i in range(n):
            x_hat = to_f32(x_row[i]) * r + neg_mr
            dx_row[i] = from_f32((to_f32(dy_row[i]) * gamma) * r - (x_hat * a + b), like)
    else:
        a, b = r * c2, F32(-1.0) * ((m * r) * c2 - c1)
        for i in range(n):
            dx_row[i] = from_f32((to_f32(dy_row[i]) * gamma - (to_f32(x_row[i]) * a + b)) * r, like)


@njit(cache=True, inline="always", error_model="numpy")
def _short_dx(dy_row, x_row, dx_row, aligned, m, r, neg_mr, gamma, c1, c2):
    """``_dx_rows`` of a mode-0 row of at most 256 elements in vector registers (``lanes.short_row_dx_*``):
    the same formulas, factors and rounding; a short row's scalar remainder after a vector loop cost more
    than its vector part."""
    if aligned:
        short_row_dx_x_hat(dy_row, x_row, dx_row, r * gamma, r * c2, r * c1, r, neg_mr)
    else:
        short_row_dx_x(dy_row, x_row, dx_row, r * gamma, (r * r) * c2, r * c1 - ((m * r) * r) * c2, r, neg_mr)


@njit(cache=True, error_model="numpy")
def _dx_channel(dy, x, dx, row, n, mode, aligned, m, r, neg_mr, gamma, c1, c2):
    """dx of the channel at flat offset ``row``, stored plainly."""
    _dx_rows(row_view(dy, row, n), row_view(x, row, n), row_view(dx, row, n), n, mode, aligned, m, r, neg_mr, gamma,
             c1, c2)


def _dx_streamed(dy, x, dx, row, n, mode, aligned, m, r, neg_mr, gamma, c1, c2, scratch):
    """``_dx_channel`` with the whole cache lines of dx written by streaming stores (compiled code only)."""
    raise NotImplementedError("_dx_streamed is only available inside @njit code")


def _dx_streamed_float32(dy, x, dx, row, n, mode, aligned, m, r, neg_mr, gamma, c1, c2, scratch):
    """``_dx_channel`` with the whole cache lines of dx written by streaming stores (``kernels.streaming``):
    pieces of ``scratch.size`` elements computed into the L1 scratch, each of their lines streamed out;
    the elements before the row's first line boundary and after its last one stored plainly."""
    lines_start, lines_end = line_span(dx, row, n)
    for lo, stop in ((row, lines_start), (lines_end, row + n)):
        if stop > lo:
            _dx_rows(row_view(dy, lo, stop - lo), row_view(x, lo, stop - lo), row_view(dx, lo, stop - lo), stop - lo,
                     mode, aligned, m, r, neg_mr, gamma, c1, c2)
    for lo in range(lines_start, lines_end, scratch.size):
        length = min(scratch.size, lines_end - lo)
        _dx_rows(row_view(dy, lo, length), row_view(x, lo, length), scratch, length, mode, aligned, m, r, neg_mr, gamma,
                 c1, c2)
        stream_out(dx, lo, scratch, length)


@overload(_dx_streamed, jit_options={"error_model": "numpy"})
def _dx_streamed_overload(dy, x, dx, row, n, mode, aligned, m, r, neg_mr, gamma, c1, c2, scratch):
    """Streamed in float32 only, where the API asks for it (``api.STREAM_MIN_BYTES``); other dtypes get
    the plain ``_dx_channel``, so their specializations compile no second dx loop."""
    if dx.dtype == types.float32:
        return _dx_streamed_float32
    return lambda dy, x, dx, row, n, mode, aligned, m, r, neg_mr, gamma, c1, c2, scratch: _dx_channel(
        dy, x, dx, row, n, mode, aligned, m, r, neg_mr, gamma, c1, c2)


@njit(cache=True, error_model="numpy")
def _dx_task(dy, x, dx, first, c_g, hxw, mode, align, m, r, neg_mr, gamma, c1, c2, scratch, stream):
    """dx of a task's ``c_g`` channels (flat channel index ``first`` on), streamed if ``stream``."""
    for j in range(c_g):
        aligned = (j * hxw) % align == 0
        row = (first + j) * hxw
        if stream:
            _dx_streamed(dy, x, dx, row, hxw, mode, aligned, m, r, neg_mr, gamma[j], c1, c2, scratch)
        else:
            _dx_rows(row_view(dy, row, hxw), row_view(x, row, hxw), row_view(dx, row, hxw), hxw, mode, aligned, m, r,
                     neg_mr, gamma[j], c1, c2)


@njit(cache=True, inline="always", error_model="numpy")
def _task(mean, rstd, partials, t):
    """Task ``t``'s statistics, ``-mean * rstd`` and its (dgamma, dbeta) partial rows."""
    m, r = mean[t], rstd[t]
    return m, r, (F32(-1.0) * m) * r, partials[t, 0], partials[t, 1]


@body
def stage1(dy, x, dx, mean, rstd, gamma, args, write_dx, partials, ahead, stream, begin, end):
    """Every task's (dgamma, dbeta) partials of its C_G channels into ``partials[t]``, and its dx.

    ``dy``, ``x``, ``dx`` are (N*G, C_G, HxW) views in kernel dtypes; ``mean``, ``rstd`` (N*G,) and
    ``gamma`` (C,) are float32. ``partials`` is (N*G, 2, C_G): what each core's UB holds before its
    atomic copy-out (a CPU has no atomic float add, so the adds are made afterwards, in order).
    The body runs the tasks of cores [begin, end), core by core (``normkern.runtime``).
    ``ahead`` prefetches while filling (``_fill_ahead``) and ``stream`` writes dx with streaming stores
    (``_dx_streamed``): hints, the same bits either way.
    """
    c_g = args.c_g
    scale = F32(c_g * args.hxw)
    width = fold_capacity(args.chunk if args.mode == 3 else args.hxw)
    buf_dy = np.empty(width, F32)
    buf_dg = np.empty(width, F32)
    small = np.empty(fold_capacity(c_g), F32)
    scratch = np.empty(_STREAM_PIECE_BYTES // dx.itemsize if stream else 0, dx.dtype)
    for core in range(begin, end):
        for t in range(args.core_start[core], args.core_start[core] + args.core_count[core]):
            m, r, neg_mr, dgamma, dbeta = _task(mean, rstd, partials, t)
            _task_sums(dy, x, t * c_g, c_g, args.hxw, r, neg_mr, args.mode, args.chunk, buf_dy, buf_dg, ahead,
                       dbeta, dgamma)
            if not write_dx:
                continue
            gam = gamma[(t % args.g) * c_g:(t % args.g + 1) * c_g]
            c1 = _group_factor(gam, dbeta, c_g, scale, small)
            c2 = _group_factor(gam, dgamma, c_g, scale, small)
            _dx_task(dy, x, dx, t * c_g, c_g, args.hxw, args.mode, args.align, m, r, neg_mr, gam, c1, c2, scratch,
                     stream)
    if stream:
        store_fence()


def _stage1_rows(width: int):
    """``stage1`` of a plan whose rows are filled and folded whole, as in modes 0-2 without prefetching and
    with plain dx stores (``stage1_body``): the same additions in the same order, with none of the general
    body's chunked rows, prefetching fill and streamed dx compiled in. A ``width`` (64, 128, 256: mode 0, rows
    of at most that many elements and more than half of it, ``lanes.short_row_width``; C_G of at most 64):
    each row's two sums and its dx straight between the rows and vector registers
    (``lanes.short_row_sums*``, ``_short_dx``: no UB-like buffer), the group's folds in registers, no
    out-of-line fold compiled; 0: rows of any length through the UB-like buffers. The width is a closure
    constant, the closure's only value."""
    short = width > 0

    def stage1_rows(dy, x, dx, mean, rstd, gamma, args, write_dx, partials, begin, end):
        c_g = args.c_g
        hxw = args.hxw
        scale = F32(c_g * hxw)
        buf_dy = np.empty(0 if short else fold_capacity(hxw), F32)
        buf_dg = np.empty(0 if short else fold_capacity(hxw), F32)
        small = np.empty(fold_capacity(c_g), F32)
        for core in range(begin, end):
            for t in range(args.core_start[core], args.core_start[core] + args.core_count[core]):
                m, r, neg_mr, dgamma, dbeta = _task(mean, rstd, partials, t)
                for j in range(c_g):
                    row = (t * c_g + j) * hxw
                    # closure constants: each body compiles one of these
                    if width == LANES:
                        dbeta[j], dgamma[j] = short_row_sums(row_view(dy, row, hxw), row_view(x, row, hxw), r,
                                                             neg_mr)
                    elif width == 2 * LANES:
                        dbeta[j], dgamma[j] = short_row_sums_128(row_view(dy, row, hxw), row_view(x, row, hxw), r,
                                                                 neg_mr)
                    elif width:
                        dbeta[j], dgamma[j] = short_row_sums_256(row_view(dy, row, hxw), row_view(x, row, hxw), r,
                                                                 neg_mr)
                    else:
                        _fill(buf_dy, buf_dg, row_view(dy, row, hxw), row_view(x, row, hxw), r, neg_mr)
                        dbeta[j], dgamma[j] = fold_halves(buf_dy, hxw, hxw), fold_halves(buf_dg, hxw, hxw)
                if not write_dx:
                    continue
                gam = gamma[(t % args.g) * c_g:(t % args.g + 1) * c_g]
                for j in range(c_g):
                    small[j] = gam[j] * dbeta[j]
                c1 = (fold_short(small, c_g) if short else fold_halves(small, c_g, c_g)) / scale
                for j in range(c_g):
                    small[j] = gam[j] * dgamma[j]
                c2 = (fold_short(small, c_g) if short else fold_halves(small, c_g, c_g)) / scale
                for j in range(c_g):
                    row = (t * c_g + j) * hxw
                    if short:
                        _short_dx(row_view(dy, row, hxw), row_view(x, row, hxw), row_view(dx, row, hxw),
                                  (j * hxw) % args.align == 0, m, r, neg_mr, gam[j], c1, c2)
                    else:
                        _dx_rows(row_view(dy, row, hxw), row_view(x, row, hxw), row_view(dx, row, hxw), hxw,
                                 args.mode, (j * hxw) % args.align == 0, m, r, neg_mr, gam[j], c1, c2)

    return body(stage1_rows)


stage1_rows = _stage1_rows(0)
stage1_short = _stage1_rows(LANES)
stage1_short_128 = _stage1_rows(2 * LANES)
stage1_short_256 = _stage1_rows(SHORT_ROW_MAX)


def stage1_body(args, ahead: bool, stream: bool):
    """The stage-1 body of a call: for rows filled and folded whole (modes 0-2, no prefetch, plain dx stores)
    ``stage1_short`` / ``stage1_short_128`` / ``stage1_short_256`` (mode 0, rows of up to 64 / 128 / 256
    elements, C_G of up to 64) or ``stage1_rows``, else the general ``stage1``."""
    if args.mode in (0, 1, 2) and not ahead and not stream:
        width = short_row_width(args.hxw) if args.mode == 0 and args.c_g <= LANES else 0
        return {LANES: stage1_short, 2 * LANES: stage1_short_128, SHORT_ROW_MAX: stage1_short_256}.get(width,
                                                                                                      stage1_rows)
    return stage1


@njit(cache=True, error_model="numpy")
def _batch_fold(ws, first_row, rows, c0, count, pitch, batch_rows, acc, scratch):
    """acc[0:count] = rows [first_row, first_row + rows) of channels c0.. folded as ``reduce_axis_n_WSP2UB``:
    UB batches of ``batch_rows`` rows, a halving tree inside a batch, batches added in order."""
    acc[:count] = 0.0
    for b0 in range(0, rows, batch_rows):
        repeat = min(batch_rows, rows - b0)
        for k in range(repeat):
            src = ws[(first_row + b0 + k) * pitch + c0:(first_row + b0 + k) * pitch + c0 + count]
            dst = scratch[k]
            for i in range(count):
                dst[i] = src[i]
        end = repeat
        mid = repeat
        while mid >= 2:
            mid >>= 1
            end -= mid
            for k in range(mid):
                lo = scratch[k]
                hi = scratch[end + k]
                for i in range(count):
                    lo[i] = hi[i] + lo[i]
            mid = end
        row0 = scratch[0]
        for i in range(count):
            acc[i] = row0[i] + acc[i]


@njit(cache=True, error_model="numpy")
def _pair_rows(partials, ws, args):
    """Stage-1 copy-out of the workspace path: task (n, g) adds its partials onto row n // 2 (zeroed by
    core 0); the two addends of a row commute, so any arrival order gives these bits."""
    rows = args.pair_rows
    for which, offset in ((0, args.dgamma_offset), (1, args.dbeta_offset)):
        for k in range(rows):
            for g in range(args.g):
                out = ws[offset + k * args.c + g * args.c_g:offset + k * args.c + (g + 1) * args.c_g]
                first = partials[(2 * k) * args.g + g, which]
                for j in range(args.c_g):
                    out[j] = F32(0.0) + first[j]
                if 2 * k + 1 < args.n:
                    second = partials[(2 * k + 1) * args.g + g, which]
                    for j in range(args.c_g):
                        out[j] += second[j]


@njit(cache=True, error_model="numpy")
def _stage2_rows(ws, args, halves):
    """The workspace rows folded per channel chunk on the plan's stage-2 cores: ``halves`` (row_halves, 2, C)
    receives each half's (dgamma, dbeta) sums (fp32: two halves of the rows; fp16/bf16: one)."""
    cores = args.stage2_cores
    acc = np.empty(args.cast_elems, F32)  # the UB of each core in turn (every read is written first)
    scratch = np.empty((args.batch_rows, args.cast_elems), F32)
    for s in range(args.row_halves * cores):
        half = s // cores
        chunk = s - half * cores
        c0 = chunk * args.cast_elems
        count = min(args.cast_elems, args.c - c0)
        first = 0 if half == 0 else args.first_half_rows
        rows = args.first_half_rows if half == 0 else args.pair_rows - args.first_half_rows
        for which, offset in ((0, args.dgamma_offset), (1, args.dbeta_offset)):
            _batch_fold(ws[offset:offset + args.ws_elems], first, rows, c0, count, args.c, args.batch_rows, acc,
                        scratch)
            out = halves[half, which]
            for i in range(count):  # a slice assignment would compile a shape-mismatch error path
                out[c0 + i] = acc[i]


@njit(cache=True, error_model="numpy")
def stage2_rows(partials, ws, args, fp32_out, dgamma, dbeta):
    """The workspace path's second stage in one call: the task partials paired onto the workspace rows
    (``_pair_rows``), the rows folded per channel chunk (``_stage2_rows``), then the halves onto the outputs:
    in fp32 both halves' atomic adds onto the zeroed outputs (two addends commute), else the one half's
    cast."""
    _pair_rows(partials, ws, args)
    halves = np.empty((args.row_halves, 2, args.c), F32)
    _stage2_rows(ws, args, halves)
    for i in range(args.c):
        if fp32_out:
            dgamma[i] = (F32(0.0) + halves[0, 0, i]) + halves[1, 0, i]
            dbeta[i] = (F32(0.0) + halves[0, 1, i]) + halves[1, 1, i]
        else:
            dgamma[i] = halves[0, 0, i]
            dbeta[i] = halves[0, 1, i]


@njit(cache=True, error_model="numpy")
def add_in_order(partials, args, order, out_dgamma, out_dbeta):
    """``out[c] = 0 + p[t1] + p[t2] + ...``: the tasks of each channel's group added onto the zeroed
    output in ``order`` ((G, N): the batches of each group, in arrival order)."""
    for which in range(2):
        out = out_dgamma if which == 0 else out_dbeta
        for g in range(args.g):
            acc = out[g * args.c_g:(g + 1) * args.c_g]
            acc[:] = 0.0
            for k in range(order.shape[1]):
                p = partials[order[g, k] * args.g + g, which]
                for j in range(args.c_g):
                    acc[j] += p[j]
