"""A channel's *stream*, in compiled code: its N planes end to end (element ``s`` is ``x[s // HxW, c, s % HxW]`` of a
flat (N, C, HxW) kernel view), summed a chunk at a time (``tiling.batch_norm``'s order: 64 lanes over each chunk of
``chunk_elems``, folded pairwise, chunk sums in stream order). BatchNorm's training forward and BatchNormStats' host
plan share it, so the two give the same statistics bit for bit.

Two walks give those bits. Where a plane is a whole number of 64-element lane steps and the input is float32
(``args.direct``), every piece of a plane in a chunk starts at a lane boundary, so the lanes add the planes where they
lie (``channel_stats_direct``): no copy, and the second pass finds them in cache. Otherwise the stream is staged in
float32 (``channel_stats``): whole when it fits ``stage_elems``, else a chunk at a time. A body compiles one walk (the
plan's) and two compiled lane loops, shared with every kernel that sums rows (``lanes.lane_add`` and
``lanes.lane_add_sqdev``: each square rounded, then added, with no buffer of squares written and read back).

``args`` is a ``tiling.BatchNormArgs``: ``n``, ``c``, ``hxw``, ``chunk_elems``, ``stage_elems``, ``direct``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .dtypes import from_f32, to_f32
from .lanes import LANES, fold, lane_add, lane_add_sqdev, lane_sum, lane_sum_sqdev
from .views import row_view


@njit(cache=True, inline="always", error_model="numpy")
def scratch(args):
    """A core's float32 scratch: ``(buf, lanes, staged)``; ``buf`` the stage of a whole stream when it fits
    ``stage_elems`` (``staged``), else of one chunk (empty on the direct walk)."""
    length = args.n * args.hxw
    staged = length <= args.stage_elems and not args.direct
    size = 0 if args.direct else length if staged else args.chunk_elems
    return np.empty(size, np.float32), np.empty(LANES, np.float32), staged


@njit(cache=True, inline="always", error_model="numpy")
def stage(x, c, start, length, args, buf):
    """Elements ``[start, start + length)`` of channel ``c``'s stream, as float32, into ``buf[0:length]``."""
    hxw = args.hxw
    n = start // hxw
    h = start - n * hxw
    pos = 0
    while pos < length:
        take = min(hxw - h, length - pos)
        src = row_view(x, (n * args.c + c) * hxw + h, take)
        dst = row_view(buf, pos, take)
        for i in range(take):
            dst[i] = to_f32(src[i])
        pos += take
        n += 1
        h = 0


@njit(cache=True, inline="always", error_model="numpy")
def write_stream(y, c, start, length, args, buf, mean, scale, shift):
    """``y`` over stream elements ``[start, start + length)`` of channel ``c`` from their staged values."""
    like = y[0]
    hxw = args.hxw
    n = start // hxw
    h = start - n * hxw
    pos = 0
    while pos < length:
        take = min(hxw - h, length - pos)
        src = row_view(buf, pos, take)
        dst = row_view(y, (n * args.c + c) * hxw + h, take)
        for i in range(take):
            dst[i] = from_f32((src[i] - mean) * scale + shift, like)
        pos += take
        n += 1
        h = 0


@njit(cache=True, inline="always", error_model="numpy")
def write_direct(x, y, c, args, mean, scale, shift):
    """``y`` of channel ``c``'s every plane from ``x`` where it lies."""
    like = y[0]
    hxw = args.hxw
    for n in range(args.n):
        src = row_view(x, (n * args.c + c) * hxw, hxw)
        dst = row_view(y, (n * args.c + c) * hxw, hxw)
        for i in range(hxw):
            dst[i] = from_f32((to_f32(src[i]) - mean) * scale + shift, like)


@njit(cache=True, inline="always", error_model="numpy")
def _stream_sum(x, c, args, buf, staged, lanes, mean, squared):
    """The chunk sums of channel ``c``'s stream added in stream order: from ``buf`` when the whole stream is staged
    there, else each chunk staged in turn; ``squared``: of the chunk's ``(v - mean)^2``."""
    length = args.n * args.hxw
    total = np.float32(0.0)
    pos = 0
    while pos < length:
        k = min(args.chunk_elems, length - pos)
        if staged:
            data = row_view(buf, pos, k)
        else:
            stage(x, c, pos, k, args, buf)
            data = row_view(buf, 0, k)
        total += lane_sum_sqdev(lanes, data, mean) if squared else lane_sum(lanes, data)
        pos += k
    return total


@njit(cache=True, inline="always", error_model="numpy")
def _direct_sum(x, c, args, lanes, mean, squared):
    """``_stream_sum`` over the planes where they lie (``args.direct``)."""
    hxw = args.hxw
    total = np.float32(0.0)
    lanes[:] = 0.0
    filled = 0
    for n in range(args.n):
        h = 0
        while h < hxw:
            k = min(hxw - h, args.chunk_elems - filled)
            row = row_view(x, (n * args.c + c) * hxw + h, k)
            if squared:
                lane_add_sqdev(lanes, row, mean)
            else:
                lane_add(lanes, row)
            filled += k
            h += k
            if filled == args.chunk_elems:
                total += fold(lanes)
                lanes[:] = 0.0
                filled = 0
    if filled:
        total += fold(lanes)
    return total


@njit(cache=True, inline="always", error_model="numpy")
def channel_stats(x, c, args, buf, lanes, staged, eps):
    """Channel ``c``'s ``(mean, S2, invstd)`` in float32 on the staged walk: ``mean = S1 / R``, ``S2 = sum (x -
    mean)^2``, ``invstd = 1 / sqrt(S2 / R + eps)``; the stream staged whole into ``buf`` first when ``staged``."""
    count = np.float32(args.n * args.hxw)
    if staged:
        stage(x, c, 0, args.n * args.hxw, args, buf)
    mean = _stream_sum(x, c, args, buf, staged, lanes, np.float32(0.0), False) / count
    sqdev = _stream_sum(x, c, args, buf, staged, lanes, mean, True)
    return mean, sqdev, np.float32(1.0) / np.sqrt(sqdev / count + eps)


@njit(cache=True, inline="always", error_model="numpy")
def channel_stats_direct(x, c, args, lanes, eps):
    """``channel_stats`` on the direct walk: the same values, bit for bit."""
    count = np.float32(args.n * args.hxw)
    mean = _direct_sum(x, c, args, lanes, np.float32(0.0), False) / count
    sqdev = _direct_sum(x, c, args, lanes, mean, True)
    return mean, sqdev, np.float32(1.0) / np.sqrt(sqdev / count + eps)
