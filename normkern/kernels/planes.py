"""How a core walks its share of an NCHW tensor, and how core partials are combined: the compiled helpers the
op slices share.

- A channel's rows (``plane_row``): the plan cuts each of the channel's N planes of ``HxW`` elements into
  ``segs_per_plane`` segments (the last ``tail_seg_elems`` long); row ``r`` is segment ``r % segs`` of plane
  ``r // segs`` (BatchNormStats, BatchNormReduceBackward).
- A flat element range (``plane_end``): a core's ``[pos, end)`` crosses planes, each taking its channel's
  coefficients (BatchNormElemt, BatchNormElemtBackward).
- Core partials (``combine_partials``): one workspace row a core, added channel by channel in a given order.
- A channel's ``planes`` sums (``channel_sums``: ``tiling.fast_batch_norm_backward.planes_tree``): for each segment
  of at most ``row_elems`` elements, the N planes' values added position by position in plane order into two
  float32 rows (``dy`` and ``dy * (x - mean)``), four planes a sweep (one load and store of a row's element per four
  adds: the same additions in the same order as one plane at a time); each row summed by 64 lanes
  (``lanes.lane_sum``), the segments' sums added in order (FastBatchNormBackward's and BatchNormReduceBackward's host
  plans).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .dtypes import to_f32
from .lanes import lane_sum
from .views import row_view


@njit(cache=True, inline="always", error_model="numpy")
def plane_segment(r, args):
    """(plane, segment) of a channel's row ``r``: segment ``r % segs`` of plane ``r // segs``."""
    n = r // args.segs_per_plane
    return n, r - n * args.segs_per_plane


@njit(cache=True, inline="always", error_model="numpy")
def plane_row(x, c, r, args):
    """Row ``r`` of channel ``c`` of ``x`` (N, C, HxW) as a ``row_view``."""
    n, seg = plane_segment(r, args)
    length = args.seg_elems if seg < args.segs_per_plane - 1 else args.tail_seg_elems
    return row_view(x, (n * x.shape[1] + c) * x.shape[2] + seg * args.seg_elems, length)


@njit(cache=True, inline="always", error_model="numpy")
def plane_end(pos, end, hxw):
    """(channel plane index, end of the plane's part of [pos, end))."""
    plane = pos // hxw
    return plane, min((plane + 1) * hxw, end)


@njit(cache=True, error_model="numpy")
def combine_partials(ws, offset, order, channels, totals):
    """totals[c] = sum of the core partials ws[offset + k*C + c], added in ``order``."""
    for c in range(channels):
        total = np.float32(0.0)
        for k in range(order.shape[0]):
            total += ws[offset + order[k] * channels + c]
        totals[c] = total


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
def segment_sums(dy, x, c, start, length, args, m, acc_dy, acc_dyx, lanes):
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


@njit(cache=True, inline="always", error_model="numpy")
def channel_sums(dy, x, c, args, m, acc_dy, acc_dyx, lanes):
    """Channel ``c``'s ``(sum dy, sum dy * (x - m))`` over its N planes (``args``: a ``tiling.PlanesArgs``), segment by
    segment in order; ``acc_dy``/``acc_dyx`` hold ``row_elems`` float32, ``lanes`` 64."""
    sum_dy = np.float32(0.0)
    sum_dyx = np.float32(0.0)
    for seg in range(args.segs_per_plane):
        start = seg * args.row_elems
        s_dy, s_dyx = segment_sums(dy, x, c, start, min(args.row_elems, args.hxw - start), args, m, acc_dy, acc_dyx,
                                   lanes)
        sum_dy += s_dy
        sum_dyx += s_dyx
    return sum_dy, sum_dyx
