"""Speed-only variants of FastBatchNormBackward's row math (``rows.py``): the same additions in the same
order at every position, with fewer loads and stores, or stores that skip the cache.

- Equal UB passes over the same positions are added in one sweep, four or two rows at a time: one
  load and one store of each accumulator per position instead of one per row (half dtypes and fused
  inference; float32 training adds its rows one at a time, ``kernel._reduce_rows``).
- Fused inference adds four rows and writes their dx in the same sweep (float32, float16), or piece
  by piece after it (bfloat16, whose rounding does not vectorize four rows at a time).
- The plane pads of a pass are zeroed as one constant group of 16 positions.
- A large float32 training dx is written with streaming stores.

The kernel tests hold every variant to the simulator bit for bit.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

from ...kernels.streaming import line_span, store_fence, stream_out
from ...kernels.views import row_view
from .rows import F32, _dx_row, _dx_row_infer, _infer_dx, _pass_extent, _pass_step, _row_start, to_f32

#: Bytes of dx computed into the L1 scratch between two runs of streaming stores (``_dx_job_streamed``).
_STREAM_PIECE_BYTES = 1024
#: Elements of each row a fused bfloat16 sweep adds before it writes their dx (``_fused_four_rows_in_pieces``).
_FUSED_PIECE = 512
#: Positions zeroed at the end of a plane's ``b1_align`` slot before its row is added: the pads
#: (fewer than one 32-byte block of the input dtype, so at most 15) and the row's last elements,
#: which the row's first-pass ``0 + value`` then overwrites.
PAD_GROUP = 16


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
def _zero_pad_group(acc_dy, acc_dyx, slot_end):
    """Zero ``[slot_end - PAD_GROUP, slot_end)`` of both buffers: a constant-length loop of a few vector
    stores, where a loop over just the 1 to 15 pads would cost a loop's overhead per row and buffer."""
    a = row_view(acc_dy, slot_end - PAD_GROUP, PAD_GROUP)
    for i in range(PAD_GROUP):
        a[i] = 0.0
    b = row_view(acc_dyx, slot_end - PAD_GROUP, PAD_GROUP)
    for i in range(PAD_GROUP):
        b[i] = 0.0


def _dx_job_streamed(dy, x, dx, geo, c, first, count, mean, shift, k, scale, weight):
    """``_dx_job`` with the whole cache lines of each row written by streaming stores (compiled code only)."""
    raise NotImplementedError("_dx_job_streamed is only available inside @njit code")


def _dx_job_streamed_float32(dy, x, dx, geo, c, first, count, mean, shift, k, scale, weight):
    """Each row's pieces of 1 KiB computed into an L1 scratch and their lines streamed out
    (``kernels.streaming``); the partial lines at the row's ends stored plainly; then a store fence."""
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
