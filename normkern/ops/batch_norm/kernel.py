"""BatchNorm kernels: the training forward and the evaluation forward, each one body over the plan's cores.

``x`` and ``y`` are flat kernel views of (N, C, HxW) arrays; core ``k`` owns channels ``[core_start[k],
core_start[k] + core_count[k])`` and writes only their planes and their entries of every (C,) array.
A channel's *stream* is its N planes end to end (element ``s`` is ``x[s // HxW, c, s % HxW]``). Training
(``tiling.batch_norm``): the stream staged in float32 (whole, or a chunk at a time when longer than the
stage), pass 1 and pass 2 sum each chunk with 64 lanes (``kernels.lanes``) and add the chunk sums in stream
order, pass 3 writes ``y = (x - mean) * (invstd * weight) + bias``; then the running statistics. ``train_direct`` is
the same on the direct walk of ``kernels.streams`` (float32 planes of whole lane steps, where they lie).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...kernels.dtypes import from_f32, to_f32
from ...kernels.streams import channel_stats, channel_stats_direct, scratch, stage, write_direct, write_stream
from ...kernels.views import row_view
from ...runtime import body


@njit(cache=True, inline="always", error_model="numpy")
def _finish(c, mean, sqdev, invstd, length, momentum, mean_out, invstd_out, running_mean, running_var):
    """Channel ``c``'s saved and running statistics."""
    keep = np.float32(1.0) - momentum
    mean_out[c] = mean
    invstd_out[c] = invstd
    running_mean[c] = running_mean[c] * keep + mean * momentum
    running_var[c] = running_var[c] * keep + sqdev / np.float32(length - 1) * momentum


@body
def train(x, args, eps, momentum, weight, bias, running_mean, running_var, y, mean_out, invstd_out, begin, end):
    """The batch's statistics, the output and the running statistics, channel by channel, on the staged walk."""
    length = args.n * args.hxw
    buf, lanes, staged = scratch(args)
    for core in range(begin, end):
        for c in range(args.core_start[core], args.core_start[core] + args.core_count[core]):
            mean, sqdev, invstd = channel_stats(x, c, args, buf, lanes, staged, eps)
            scale = invstd * weight[c]
            if staged:
                write_stream(y, c, 0, length, args, buf, mean, scale, bias[c])
            else:
                pos = 0
                while pos < length:
                    k = min(args.chunk_elems, length - pos)
                    stage(x, c, pos, k, args, buf)
                    write_stream(y, c, pos, k, args, buf, mean, scale, bias[c])
                    pos += k
            _finish(c, mean, sqdev, invstd, length, momentum, mean_out, invstd_out, running_mean, running_var)


@body
def train_direct(x, args, eps, momentum, weight, bias, running_mean, running_var, y, mean_out, invstd_out, begin,
                 end):
    """``train`` on the direct walk (``args.direct``): the planes summed and normalized where they lie."""
    _, lanes, _ = scratch(args)
    for core in range(begin, end):
        for c in range(args.core_start[core], args.core_start[core] + args.core_count[core]):
            mean, sqdev, invstd = channel_stats_direct(x, c, args, lanes, eps)
            write_direct(x, y, c, args, mean, invstd * weight[c], bias[c])
            _finish(c, mean, sqdev, invstd, args.n * args.hxw, momentum, mean_out, invstd_out, running_mean,
                    running_var)


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
