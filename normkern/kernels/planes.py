"""How a core walks its share of an NCHW tensor, and how core partials are combined: the compiled helpers the
op slices share.

- A channel's rows (``plane_row``): the plan cuts each of the channel's N planes of ``HxW`` elements into
  ``segs_per_plane`` segments (the last ``tail_seg_elems`` long); row ``r`` is segment ``r % segs`` of plane
  ``r // segs`` (BatchNormStats, BatchNormReduceBackward).
- A flat element range (``plane_end``): a core's ``[pos, end)`` crosses planes, each taking its channel's
  coefficients (BatchNormElemt, BatchNormElemtBackward).
- Core partials (``combine_partials``): one workspace row a core, added channel by channel in a given order.
"""

from __future__ import annotations

import numpy as np
from numba import njit

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
