"""BatchNormReduceBackward kernels: the two per-channel sums, one pass over ``dy`` and ``x``.

Per channel ``c`` over its ``N*HxW`` elements, in float32::

    S_dy = sum dy          S_p = sum dy * (x - shift)

with ``shift = 0`` on the NPU plans (CANN sums ``dy * x``; ``x - 0`` is ``x`` bit for bit) and
``shift = mean[c]`` on the host plans (``plan.centered``). Both sums follow the plan's tree exactly as
BatchNormStats' pass 1 does: 64 lanes per UB block, block sums in block order, and for
``split_r``/``atomic`` per-core partials in the workspace added in the given order; the host's ``planes`` plan
sums in FastBatchNormBackward's ``planes`` order (``kernels.planes.channel_sums``).

The lanes live in one array of the kernel's own, ``lanes[k, 0 or 1, j]`` (``lanes.accumulate_products``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...kernels.lanes import LANES, accumulate_products, fold
from ...kernels.planes import channel_sums, combine_partials, plane_row
from ...kernels.views import row_view
from ...runtime import body


@njit(cache=True, inline="always", error_model="numpy")
def _fold_into(lanes, k, sum_dy, sum_p, c):
    """Fold channel slot ``k``'s two lane sets onto the running sums of channel ``c``, then zero them."""
    sum_dy[c] += fold(row_view(lanes, 2 * k * LANES, LANES))
    sum_p[c] += fold(row_view(lanes, (2 * k + 1) * LANES, LANES))
    lanes[k, :, :] = 0.0


#: Channels walked together: their lanes (512 bytes a channel) stay in L1; a core's every channel at once
#: (1024 at 8x2048x7x7: 512 KiB of lanes) went out to L2 on every row.
CHANNEL_GROUP = 32


@njit(cache=True, error_model="numpy")
def _channels_sums(dy, x, args, first_c, count_c, first_row, n_rows, shift, sum_dy, sum_p):
    """(S_dy, S_p) of channels [first_c, first_c + count_c) over rows [first_row, first_row + n_rows), into
    ``sum_dy``/``sum_p`` at the channel index.

    ``CHANNEL_GROUP`` channels at a time, each group walked in memory order, row r of its every channel before
    row r + 1; each channel keeps its own lanes, reset and folded at the plan's block boundaries, so each channel
    adds the same values in the same order as a channel-by-channel walk (same bits), and reads the rows of one
    plane index, which lie side by side in memory, one after the other: the hardware prefetchers follow that walk
    (a software prefetch of rows ahead, which BatchNormStats' channel walk needs, slowed it)."""
    lanes = np.zeros((min(count_c, CHANNEL_GROUP), 2, LANES), np.float32)
    block = args.rows_per_block
    end = first_row + n_rows
    for group in range(first_c, first_c + count_c, CHANNEL_GROUP):
        width = min(CHANNEL_GROUP, first_c + count_c - group)
        for k in range(width):
            sum_dy[group + k] = 0.0
            sum_p[group + k] = 0.0
        for r in range(first_row, end):
            for k in range(width):
                c = group + k
                accumulate_products(lanes, k, plane_row(dy, c, r, args), plane_row(x, c, r, args), shift[c])
            if (r + 1 - first_row) % block == 0 or r + 1 == end:
                for k in range(width):
                    _fold_into(lanes, k, sum_dy, sum_p, group + k)


@body
def split_c(dy, x, args, shift, sum_dy, sum_p, begin, end):
    """Channels over cores: core k owns channels [core_start[k], core_start[k] + core_count[k])."""
    first = np.int64(0)
    for core in range(begin, end):
        _channels_sums(dy, x, args, args.core_start[core], args.core_count[core], first, args.rows_per_channel,
                       shift, sum_dy, sum_p)


@body
def split_r(dy, x, ws, args, shift, begin, end):
    """Rows over cores: core k sums its rows of every channel into its workspace rows (``sum_offset`` for
    S_dy, ``sqdev_offset`` for S_p); ``add_partials`` then adds them in the plan's order."""
    channels = args.c
    first = np.int64(0)
    for core in range(begin, end):
        _channels_sums(dy, x, args, first, channels, args.core_start[core], args.core_count[core], shift,
                       ws[args.sum_offset + core * channels:args.sum_offset + (core + 1) * channels],
                       ws[args.sqdev_offset + core * channels:args.sqdev_offset + (core + 1) * channels])


@njit(cache=True, error_model="numpy")
def add_partials(ws, args, order, sum_dy, sum_p):
    """The two sums' core partials added in ``order[0]`` and ``order[1]`` (core order, or arrival order)."""
    combine_partials(ws, args.sum_offset, order[0], args.c, sum_dy)
    combine_partials(ws, args.sqdev_offset, order[1], args.c, sum_p)


@body
def planes(dy, x, args, mean, sum_dy, sum_p, begin, end):
    """The host's ``planes`` plan (``args`` a PlanesArgs, ``dy``/``x`` flat): core k's channels, each channel's two
    sums in FastBatchNormBackward's ``planes`` order (``kernels.planes.channel_sums``)."""
    acc_dy = np.empty(args.row_elems, np.float32)
    acc_dyx = np.empty(args.row_elems, np.float32)
    lanes = np.empty(LANES, np.float32)
    for core in range(begin, end):
        for c in range(args.core_start[core], args.core_start[core] + args.core_count[core]):
            sum_dy[c], sum_p[c] = channel_sums(dy, x, c, args, mean[c], acc_dy, acc_dyx, lanes)
