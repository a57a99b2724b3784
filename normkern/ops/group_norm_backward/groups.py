"""GroupNormBackward's ``groups`` plan (the host's, normkern's own): one body, each task's rows summed and its dx
written while they are in cache (``tiling.group_norm_backward_groups`` has the order and the formulas).

``dy``, ``x`` and ``dx`` are flat kernel views of (N, C, HxW) arrays; core ``k`` owns groups ``[core_start[k],
core_start[k] + core_count[k])`` and writes only their channels' planes and their entries of ``grad_gamma`` and
``grad_beta`` (float32 (C,)). ``mean`` and ``rstd`` are float32 per task ``n * G + g``, ``gamma`` float32 (C,).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...kernels.dtypes import from_f32, to_f32
from ...kernels.lanes import LANES, accumulate_products, fold, pair_lane_sums_64, pair_lane_sums_128, pair_lane_sums_256
from ...kernels.views import row_view
from ...runtime import body

F32 = np.float32


@njit(cache=True, inline="always", error_model="numpy")
def _segment_sums(dy, x, offset, length, m, lanes, flat):
    """``(sum dy, sum dy * (x - m))`` of ``length`` elements at ``offset``: 64 lanes each, folded; the lanes (zero
    on entry) are zeroed again through their flat view: a slice assignment of the 3-D array costs more than a short
    row's arithmetic."""
    accumulate_products(lanes, 0, row_view(dy, offset, length), row_view(x, offset, length), m)
    s_dy = fold(row_view(flat, 0, LANES))
    s_ds = fold(row_view(flat, LANES, LANES))
    for i in range(2 * LANES):
        flat[i] = 0.0
    return s_dy, s_ds


@njit(cache=True, inline="always", error_model="numpy")
def _row_sums(dy, x, offset, args, m, lanes, flat):
    """``(sum dy, sum dy * (x - m))`` of the row at ``offset``: a segment at a time, the segments' sums in order."""
    if args.segs_per_row == 1:
        return _segment_sums(dy, x, offset, args.hxw, m, lanes, flat)
    s_dy = F32(0.0)
    s_ds = F32(0.0)
    for seg in range(args.segs_per_row):
        start = seg * args.row_elems
        a, b = _segment_sums(dy, x, offset + start, min(args.row_elems, args.hxw - start), m, lanes, flat)
        s_dy += a
        s_ds += b
    return s_dy, s_ds


@njit(cache=True, error_model="numpy")
def _task_dx(dy, x, dx, args, n, first, m, r, e, f, gamma):
    """Task ``(n, g)``'s dx, ``dy * (gamma[c] * r) - ((x - m) * f + e)``, channel row by channel row. Not inlined:
    inside the body's row walk, the dx loop changed how the walk compiled and slowed it, even where it did not run."""
    like = dx[0]
    hxw = args.hxw
    for j in range(args.c_g):
        c = first + j
        k = gamma[c] * r
        offset = (n * args.c + c) * hxw
        ds, xs, gs = row_view(dy, offset, hxw), row_view(x, offset, hxw), row_view(dx, offset, hxw)
        for i in range(hxw):
            gs[i] = from_f32(to_f32(ds[i]) * k - ((to_f32(xs[i]) - m) * f + e), like)


def _groups_body(width: int):
    """The ``groups`` body for rows of at most ``width`` elements (64, 128, 256: in vector registers,
    ``lanes.pair_lane_sums_*``; 0: any row, through the lanes array). The width is a closure constant: each body
    compiles one row walk, and a call compiles only its own (``body_for``)."""

    def groups(dy, x, dx, args, mean, rstd, gamma, write_dx, grad_gamma, grad_beta, begin, end):
        """Per task ``(n, g)`` of the core's groups, n in order: the rows' sums, grad_gamma and grad_beta added in
        batch order, then (``write_dx``) the task's dx."""
        lanes = np.zeros((1, 2, LANES), F32)
        flat = row_view(lanes, 0, 2 * LANES)
        hxw = args.hxw
        count = F32(args.c_g * hxw)
        for core in range(begin, end):
            groups_first = args.core_start[core] * args.c_g
            for c in range(groups_first, groups_first + args.core_count[core] * args.c_g):
                grad_gamma[c] = 0.0
                grad_beta[c] = 0.0
            for n in range(args.n):  # batch order; each batch's groups in memory order
                for g in range(args.core_start[core], args.core_start[core] + args.core_count[core]):
                    first = g * args.c_g
                    t = n * args.g + g
                    m = mean[t]
                    r = rstd[t]
                    a = F32(0.0)
                    b = F32(0.0)
                    for j in range(args.c_g):
                        c = first + j
                        offset = (n * args.c + c) * hxw
                        if width == LANES:
                            s_dy, s_ds = pair_lane_sums_64(row_view(dy, offset, hxw), row_view(x, offset, hxw), m)
                        elif width == 2 * LANES:
                            s_dy, s_ds = pair_lane_sums_128(row_view(dy, offset, hxw), row_view(x, offset, hxw), m)
                        elif width:
                            s_dy, s_ds = pair_lane_sums_256(row_view(dy, offset, hxw), row_view(x, offset, hxw), m)
                        else:
                            s_dy, s_ds = _row_sums(dy, x, offset, args, m, lanes, flat)
                        a += gamma[c] * s_dy
                        b += gamma[c] * s_ds
                        grad_beta[c] += s_dy
                        grad_gamma[c] += s_ds * r
                    if write_dx:
                        _task_dx(dy, x, dx, args, n, first, m, r, (r * a) / count, (((r * r) * r) * b) / count, gamma)

    return body(groups)


groups_64 = _groups_body(LANES)
groups_128 = _groups_body(2 * LANES)
groups_256 = _groups_body(4 * LANES)
groups_rows = _groups_body(0)


def body_for(hxw: int):
    """The body for rows of ``hxw`` elements."""
    if hxw <= LANES:
        return groups_64
    if hxw <= 2 * LANES:
        return groups_128
    return groups_256 if hxw <= 4 * LANES else groups_rows
