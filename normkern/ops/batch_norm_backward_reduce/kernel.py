"""BatchNormReduceBackward kernels: the two per-channel sums, one pass over ``dy`` and ``x``.

Per channel ``c`` over its ``N*HxW`` elements, in float32::

    S_dy = sum dy          S_p = sum dy * (x - shift)

with ``shift = 0`` on the NPU plans (CANN sums ``dy * x``; ``x - 0`` is ``x`` bit for bit) and
``shift = mean[c]`` on the host plans (``plan.centered``). Both sums follow the plan's tree exactly as
BatchNormStats' pass 1 does: 64 lanes per UB block, block sums in block order, and for
``split_r``/``atomic`` per-core partials in the workspace added in the given order.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..._dtypes import to_f32
from ..._lanes import LANES, STEP, fold, prefetch_row
from ..batch_norm_stats.kernel import PREFETCH_AHEAD, PREFETCH_BELOW, _add_partials, _plane_row


@njit(cache=True, inline="always", error_model="numpy")
def _accumulate_products(lanes_dy, lanes_p, dy, x, shift):
    """lanes_dy[j] += dy[i] and lanes_p[j] += dy[i] * (x[i] - shift) for i = j + 64 v, v ascending
    (each product rounded before its add)."""
    n = dy.shape[0]
    steps = n // STEP
    for v in range(steps):
        d = dy[v * STEP:(v + 1) * STEP]
        e = x[v * STEP:(v + 1) * STEP]
        for j in range(LANES):
            a = lanes_dy[j]
            p = lanes_p[j]
            for q in range(4):
                g = to_f32(d[q * LANES + j])
                a += g
                p += g * (to_f32(e[q * LANES + j]) - shift)
            lanes_dy[j] = a
            lanes_p[j] = p
    pos = steps * STEP
    while pos + LANES <= n:  # whole 64-element chunks: a constant trip count, which LLVM vectorizes
        for j in range(LANES):
            g = to_f32(dy[pos + j])
            lanes_dy[j] += g
            lanes_p[j] += g * (to_f32(x[pos + j]) - shift)
        pos += LANES
    for j in range(n - pos):
        g = to_f32(dy[pos + j])
        lanes_dy[j] += g
        lanes_p[j] += g * (to_f32(x[pos + j]) - shift)


@njit(cache=True, error_model="numpy")
def _rows_sums(dy, x, c, first_row, n_rows, args, lanes_dy, lanes_p, shift):
    """(S_dy, S_p) of channel ``c`` over rows [first_row, first_row + n_rows), blocked as the plan says."""
    sum_dy = np.float32(0.0)
    sum_p = np.float32(0.0)
    row = first_row
    end = first_row + n_rows
    while row < end:
        stop = min(row + args.rows_per_block, end)
        lanes_dy[:] = 0.0
        lanes_p[:] = 0.0
        for r in range(row, stop):
            d = _plane_row(dy, c, r, args)
            if d.shape[0] < PREFETCH_BELOW and r + PREFETCH_AHEAD < end:
                # short rows start cold at a stride of C*HxW: ask for both rows a few rows ahead
                prefetch_row(_plane_row(dy, c, r + PREFETCH_AHEAD, args))
                prefetch_row(_plane_row(x, c, r + PREFETCH_AHEAD, args))
            _accumulate_products(lanes_dy, lanes_p, d, _plane_row(x, c, r, args), shift)
        sum_dy += fold(lanes_dy)
        sum_p += fold(lanes_p)
        row = stop
    return sum_dy, sum_p


@njit(parallel=True, cache=True, error_model="numpy")
def split_c(dy, x, args, spans, shift, sum_dy, sum_p):
    """Channels over cores: core k owns channels [core_start[k], core_start[k] + core_count[k])."""
    first = np.int64(0)
    for t in prange(spans.shape[0] - 1):
        lanes_dy = np.empty(LANES, np.float32)
        lanes_p = np.empty(LANES, np.float32)
        for core in range(spans[t], spans[t + 1]):
            for c in range(args.core_start[core], args.core_start[core] + args.core_count[core]):
                sum_dy[c], sum_p[c] = _rows_sums(dy, x, c, first, args.rows_per_channel, args, lanes_dy, lanes_p,
                                                 shift[c])


@njit(parallel=True, cache=True, error_model="numpy")
def split_r(dy, x, ws, args, spans, order, shift, sum_dy, sum_p):
    """Rows over cores: per-core partials in the workspace, then added in ``order[0]`` (S_dy) and
    ``order[1]`` (S_p)."""
    channels = args.c
    for t in prange(spans.shape[0] - 1):
        lanes_dy = np.empty(LANES, np.float32)
        lanes_p = np.empty(LANES, np.float32)
        for core in range(spans[t], spans[t + 1]):
            for c in range(channels):
                a, p = _rows_sums(dy, x, c, args.core_start[core], args.core_count[core], args, lanes_dy, lanes_p,
                                  shift[c])
                ws[args.sum_offset + core * channels + c] = a
                ws[args.sqdev_offset + core * channels + c] = p
    _add_partials(ws, args.sum_offset, order[0], channels, sum_dy)
    _add_partials(ws, args.sqdev_offset, order[1], channels, sum_p)
