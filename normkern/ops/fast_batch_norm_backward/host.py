"""FastBatchNormBackward's ``planes`` plan (the host's, normkern's own): one body, each channel reduced and its dx
written while its planes are in cache.

``dy``, ``x`` and ``dx`` are flat kernel views of (N, C, HxW) arrays; core ``k`` owns channels ``[core_start[k],
core_start[k] + core_count[k])`` and writes only their planes and their entries of ``grad_weight``/``grad_bias``.
A plane is cut into segments of at most ``row_elems`` elements. For each segment position, the N planes' values are
added position by position in plane order into two float32 rows (``dy`` and ``dy * (x - mean)``), four planes a
sweep (one load and store of a row's element per four adds: the same additions in the same order as one plane at
a time); each row is then summed by 64 lanes (``lanes.accumulate``) and folded pairwise, and the segments' sums
are added in order. The dx of each element is the expression of ``rows.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...kernels.dtypes import to_f32
from ...kernels.lanes import LANES, lane_sum
from ...kernels.views import row_view
from ...runtime import body
from .rows import F32, _dx_row, _dx_row_infer


@njit(cache=True, inline="always", error_model="numpy")
def _add_four(acc_dy, acc_dyx, d0, d1, d2, d3, x0, x1, x2, x3, m):
    for i in range(acc_dy.shape[0]):
        s = acc_dy[i]
        p = acc_dyx[i]
        v = to_f32(d0[i])
        s += v
        p += v * (to_f32(x0[i]) - m)
        v = to_f32(d1[i])
        s += v
        p += v * (to_f32(x1[i]) - m)
        v = to_f32(d2[i])
        s += v
        p += v * (to_f32(x2[i]) - m)
        v = to_f32(d3[i])
        s += v
        p += v * (to_f32(x3[i]) - m)
        acc_dy[i] = s
        acc_dyx[i] = p


@njit(cache=True, inline="always", error_model="numpy")
def _add_one(acc_dy, acc_dyx, d0, x0, m):
    for i in range(acc_dy.shape[0]):
        v = to_f32(d0[i])
        acc_dy[i] += v
        acc_dyx[i] += v * (to_f32(x0[i]) - m)


@njit(cache=True, inline="always", error_model="numpy")
def _segment_sums(dy, x, c, start, length, args, m, acc_dy, acc_dyx, lanes):
    """(sum dy, sum dy * (x - m)) of channel ``c``'s segment ``[start, start + length)`` of every plane."""
    a = row_view(acc_dy, 0, length)
    b = row_view(acc_dyx, 0, length)
    a[:] = 0.0
    b[:] = 0.0
    stride = args.c * args.hxw
    base = c * args.hxw + start
    plane = 0
    while plane + 4 <= args.n:
        o = base + plane * stride
        _add_four(a, b, row_view(dy, o, length), row_view(dy, o + stride, length), row_view(dy, o + 2 * stride, length),
                  row_view(dy, o + 3 * stride, length), row_view(x, o, length), row_view(x, o + stride, length),
                  row_view(x, o + 2 * stride, length), row_view(x, o + 3 * stride, length), m)
        plane += 4
    while plane < args.n:
        o = base + plane * stride
        _add_one(a, b, row_view(dy, o, length), row_view(x, o, length), m)
        plane += 1
    return lane_sum(lanes, a), lane_sum(lanes, b)


@body
def planes(dy, x, dx, args, mean, scale, weight, training, write_dx, grad_weight, grad_bias, begin, end):
    """``grad_bias = sum dy``, ``grad_weight = sum dy * (x - mean) * scale`` and (``write_dx``) dx, per channel."""
    acc_dy = np.empty(args.row_elems, F32)
    acc_dyx = np.empty(args.row_elems, F32)
    lanes = np.empty(LANES, F32)
    hxw = args.hxw
    count = F32(args.n * hxw)
    for core in range(begin, end):
        for c in range(args.core_start[core], args.core_start[core] + args.core_count[core]):
            m = mean[c]
            sum_dy = F32(0.0)
            sum_dyx = F32(0.0)
            for seg in range(args.segs_per_plane):
                start = seg * args.row_elems
                s_dy, s_dyx = _segment_sums(dy, x, c, start, min(args.row_elems, hxw - start), args, m, acc_dy,
                                            acc_dyx, lanes)
                sum_dy += s_dy
                sum_dyx += s_dyx
            r_c = scale[c]
            g = sum_dyx * r_c
            grad_weight[c] = g
            grad_bias[c] = sum_dy
            if write_dx:  # the factors of kernel._dx_factors
                shift = sum_dy * (F32(1.0) / count)
                k = (g * r_c) / count
                for plane in range(args.n):
                    offset = (plane * args.c + c) * hxw
                    if training:
                        _dx_row(row_view(dy, offset, hxw), row_view(x, offset, hxw), row_view(dx, offset, hxw), m,
                                shift, k, r_c, weight[c])
                    else:
                        _dx_row_infer(row_view(dy, offset, hxw), row_view(dx, offset, hxw), r_c, weight[c])
