"""BatchNorm kernels: the training forward and the evaluation forward, each one body over the plan's cores.

``x`` and ``y`` are flat kernel views of (N, C, HxW) arrays; core ``k`` owns channels ``[core_start[k],
core_start[k] + core_count[k])`` and writes only their planes and their entries of every (C,) array.
A channel's *stream* is its N planes end to end (element ``s`` is ``x[s // HxW, c, s % HxW]``). Training
(``tiling.batch_norm``): the stream staged in float32 (whole, or a chunk at a time when longer than the
stage), pass 1 and pass 2 sum each chunk with 64 lanes (``kernels.lanes``) and add the chunk sums in stream
order, pass 3 writes ``y = (x - mean) * (invstd * weight) + bias``; then the running statistics.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...kernels.dtypes import from_f32, to_f32
from ...kernels.lanes import LANES, lane_sum
from ...kernels.views import row_view
from ...runtime import body


@njit(cache=True, inline="always", error_model="numpy")
def _stage(x, c, start, length, args, buf):
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
def _write(y, c, start, length, args, buf, mean, scale, shift):
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
def _stream_sum(x, c, args, buf, staged, lanes, squares, mean, squared):
    """The chunk sums of channel ``c``'s stream added in stream order: from ``buf`` when the whole stream is
    staged there, else each chunk staged in turn. Each chunk: 64 lanes, folded pairwise; ``squared``, of the
    chunk's ``(v - mean)^2`` (each rounded, as ``lanes.accumulate_sqdev`` adds them) made in ``squares`` first:
    one lane loop to compile, not two."""
    length = args.n * args.hxw
    total = np.float32(0.0)
    pos = 0
    while pos < length:
        k = min(args.chunk_elems, length - pos)
        if staged:
            data = row_view(buf, pos, k)
        else:
            _stage(x, c, pos, k, args, buf)
            data = row_view(buf, 0, k)
        if squared:
            out = row_view(squares, 0, k)
            for i in range(k):
                d = data[i] - mean
                out[i] = d * d
            data = out
        total += lane_sum(lanes, data)
        pos += k
    return total


@body
def train(x, args, eps, momentum, weight, bias, running_mean, running_var, y, mean_out, invstd_out, begin, end):
    """The batch's statistics, the output and the running statistics, channel by channel."""
    length = args.n * args.hxw
    count = np.float32(length)
    staged = length <= args.stage_elems
    buf = np.empty(length if staged else args.chunk_elems, np.float32)
    lanes = np.empty(LANES, np.float32)
    squares = np.empty(min(length, args.chunk_elems), np.float32)
    keep = np.float32(1.0) - momentum
    for core in range(begin, end):
        for c in range(args.core_start[core], args.core_start[core] + args.core_count[core]):
            if staged:
                _stage(x, c, 0, length, args, buf)
            mean = _stream_sum(x, c, args, buf, staged, lanes, squares, np.float32(0.0), False) / count
            sqdev = _stream_sum(x, c, args, buf, staged, lanes, squares, mean, True)
            invstd = np.float32(1.0) / np.sqrt(sqdev / count + eps)
            scale = invstd * weight[c]
            if staged:
                _write(y, c, 0, length, args, buf, mean, scale, bias[c])
            else:
                pos = 0
                while pos < length:
                    k = min(args.chunk_elems, length - pos)
                    _stage(x, c, pos, k, args, buf)
                    _write(y, c, pos, k, args, buf, mean, scale, bias[c])
                    pos += k
            mean_out[c] = mean
            invstd_out[c] = invstd
            running_mean[c] = running_mean[c] * keep + mean * momentum
            running_var[c] = running_var[c] * keep + sqdev / np.float32(length - 1) * momentum


@body
def evaluate(x, args, mean, invstd, weight, bias, y, begin, end):
    """``y = (x - mean) * (invstd * weight) + bias`` with given (C,) statistics, plane by plane in memory order
    within each core's channels."""
    like = y[0]
    hxw = args.hxw
    for core in range(begin, end):
        first = args.core_start[core]
        for n in range(args.n):
            for c in range(first, first + args.core_count[core]):
                m, k, b = mean[c], invstd[c] * weight[c], bias[c]
                src = row_view(x, (n * args.c + c) * hxw, hxw)
                dst = row_view(y, (n * args.c + c) * hxw, hxw)
                for i in range(hxw):
                    dst[i] = from_f32((to_f32(src[i]) - m) * k + b, like)
