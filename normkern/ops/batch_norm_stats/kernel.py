"""BatchNormStats kernels: one function per strategy, each executing its plan exactly.

Per channel ``c`` over the ``R = N*HxW`` elements (float32 throughout)::

    mean[c]   = S1 / R,  S1 = sum x
    invstd[c] = 1 / sqrt(S2 / R + eps),  S2 = sum (x - mean[c])^2

Each sum follows the plan's tree: 64 lanes per UB block (``kernels.lanes``), block sums in block order,
and for ``split_r``/``atomic`` per-core partials in the workspace, added in the given order
(core order, or the arrival order of an atomic plan). The bodies run a run of the plan's cores
``[begin, end)`` (``normkern.runtime``); each core writes only its own channels or its own workspace
row. ``split_r`` is two launches, each followed by its combine. The host's ``channels`` plan is BatchNorm's
statistics (``kernels.streams.channel_stats``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...kernels.lanes import LANES, accumulate, accumulate_prefetching, accumulate_sqdev, fold, prefetch_row
from ...kernels.planes import combine_partials, plane_row, plane_segment
from ...kernels.streams import channel_stats, channel_stats_direct, scratch
from ...runtime import body

#: Pass 1 prefetches rows shorter than this many elements PREFETCH_AHEAD rows ahead, whole, into
#: every cache level; a longer row asks for the next one into L2 piece by piece as it sums. Each plane
#: row starts cold at a stride of C*HxW, where the hardware prefetcher starts afresh.
PREFETCH_BELOW = 1024
PREFETCH_AHEAD = 8


@njit(cache=True, error_model="numpy")
def _rows_sum(x, c, first_row, n_rows, args, lanes, mean, squared):
    """Sum of channel ``c`` over rows [first_row, first_row + n_rows), blocked as the plan says.

    The rows summed are ``row_view``s: a slice costs an atomic reference-count update, which on short
    rows (7x7 planes) costs more than their arithmetic."""
    total = np.float32(0.0)
    row = first_row
    end = first_row + n_rows
    while row < end:
        stop = min(row + args.rows_per_block, end)
        lanes[:] = 0.0
        for r in range(row, stop):
            data = plane_row(x, c, r, args)
            length = data.shape[0]
            if not squared and length < PREFETCH_BELOW and r + PREFETCH_AHEAD < end:
                # pass 1 comes from memory; pass 2 finds the channel in cache. A plain slice here, not a
                # row_view, which made this prefetch slower.
                n_ahead, seg_ahead = plane_segment(r + PREFETCH_AHEAD, args)
                prefetch_row(x[n_ahead, c, seg_ahead * args.seg_elems:seg_ahead * args.seg_elems + length])
            if squared:
                accumulate_sqdev(lanes, data, mean)
            elif length >= PREFETCH_BELOW and r + 1 < end:
                accumulate_prefetching(lanes, data, plane_row(x, c, r + 1, args))
            else:
                accumulate(lanes, data)
        total += fold(lanes)
        row = stop
    return total


@njit(cache=True, error_model="numpy")
def _invstd(sqdev_sum, count, eps):
    return np.float32(1.0) / np.sqrt(sqdev_sum / count + eps)


@body
def split_c(x, args, eps, mean_out, invstd_out, begin, end):
    """Channels over cores: core k owns channels [core_start[k], core_start[k] + core_count[k])."""
    count = np.float32(args.count)
    first = np.int64(0)  # a literal 0 would compile _rows_sum a second time, apart from split_r's int64
    lanes = np.empty(LANES, np.float32)
    for core in range(begin, end):
        for c in range(args.core_start[core], args.core_start[core] + args.core_count[core]):
            mean = _rows_sum(x, c, first, args.rows_per_channel, args, lanes, np.float32(0.0), np.bool_(False)) / count
            sqdev = _rows_sum(x, c, first, args.rows_per_channel, args, lanes, mean, np.bool_(True))
            mean_out[c] = mean
            invstd_out[c] = _invstd(sqdev, count, eps)


@body
def split_r_sums(x, ws, args, mean, squared, begin, end):
    """Rows over cores, one pass: core k's partial of every channel into workspace row k (the sums, or with
    ``squared`` the squared deviations from ``mean``)."""
    channels = args.c
    offset = args.sqdev_offset if squared else args.sum_offset
    lanes = np.empty(LANES, np.float32)
    for core in range(begin, end):
        for c in range(channels):
            ws[offset + core * channels + c] = _rows_sum(x, c, args.core_start[core], args.core_count[core], args,
                                                         lanes, mean[c], squared)


@njit(cache=True, error_model="numpy")
def split_r_mean(ws, args, order, mean_out):
    """The pass-1 partials added in ``order``, over the count: the mean."""
    combine_partials(ws, args.sum_offset, order, args.c, mean_out)
    count = np.float32(args.count)
    for c in range(args.c):
        mean_out[c] = mean_out[c] / count


@njit(cache=True, error_model="numpy")
def split_r_invstd(ws, args, order, eps, invstd_out):
    """The pass-2 partials added in ``order``: the inverse standard deviation."""
    combine_partials(ws, args.sqdev_offset, order, args.c, invstd_out)
    count = np.float32(args.count)
    for c in range(args.c):
        invstd_out[c] = _invstd(invstd_out[c], count, eps)


@body
def channels(x, args, eps, mean_out, invstd_out, begin, end):
    """The ``channels`` plan: core k's channels, each its stream's two passes (``x`` flat; ``args`` BatchNormArgs)."""
    buf, lanes, staged = scratch(args)
    for core in range(begin, end):
        for c in range(args.core_start[core], args.core_start[core] + args.core_count[core]):
            mean, _, invstd = channel_stats(x, c, args, buf, lanes, staged, eps)
            mean_out[c] = mean
            invstd_out[c] = invstd


@body
def channels_direct(x, args, eps, mean_out, invstd_out, begin, end):
    """``channels`` on the direct walk (``args.direct``)."""
    _, lanes, _ = scratch(args)
    for core in range(begin, end):
        for c in range(args.core_start[core], args.core_start[core] + args.core_count[core]):
            mean, _, invstd = channel_stats_direct(x, c, args, lanes, eps)
            mean_out[c] = mean
            invstd_out[c] = invstd
