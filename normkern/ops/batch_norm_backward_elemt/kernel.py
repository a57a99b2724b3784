"""The BatchNormElemtBackward kernels, one fixed float32 expression per element: the host's ``channels`` plan walks
each core's channels plane by plane (``batch_norm_elemt.kernel.channels``' walk), the NPU plans' model the flat ranges
of ``kernels.planes.plane_end``."""

from __future__ import annotations

from numba import njit

from ...kernels.dtypes import from_f32, to_f32
from ...kernels.planes import plane_end
from ...kernels.views import row_view
from ...runtime import body


@njit(cache=True, error_model="numpy")
def _core(dy, x, args, core, mean, mean_dy, factor, scale, out):
    """Core ``core``'s range."""
    like = out[0]
    pos = args.core_start[core]
    end = pos + args.core_count[core]
    while pos < end:
        plane, stop = plane_end(pos, end, args.hxw)
        c = plane % args.c
        m, mdy, f, s = mean[c], mean_dy[c], factor[c], scale[c]
        length = stop - pos
        ds, xs, gs = row_view(dy, pos, length), row_view(x, pos, length), row_view(out, pos, length)
        for i in range(length):  # from 0: see batch_norm_elemt.kernel
            gs[i] = from_f32(((to_f32(ds[i]) - mdy) - (to_f32(xs[i]) - m) * f) * s, like)
        pos = stop


@body
def elemt_backward(dy, x, args, mean, mean_dy, factor, scale, out, begin, end):
    """out = ((dy - mean_dy) - (x - mean) * factor) * scale, per element (the SyncBatchNormBackwardElemt
    DAG with its per-channel products ``factor = mean_dy_xmu * (invstd * invstd)`` and
    ``scale = invstd * weight`` formed once per channel: the same float32 values it forms per element)."""
    for core in range(begin, end):
        _core(dy, x, args, core, mean, mean_dy, factor, scale, out)


@body
def channels(dy, x, args, mean, mean_dy, factor, scale, out, begin, end):
    """The ``channels`` plan: ``elemt_backward``'s expression, core k's channels plane by plane."""
    like = out[0]
    hxw = args.hxw
    for core in range(begin, end):
        first = args.core_start[core]
        for n in range(args.n):
            for c in range(first, first + args.core_count[core]):
                m, mdy, f, s = mean[c], mean_dy[c], factor[c], scale[c]
                offset = (n * args.c + c) * hxw
                ds, xs, gs = row_view(dy, offset, hxw), row_view(x, offset, hxw), row_view(out, offset, hxw)
                for i in range(hxw):
                    gs[i] = from_f32(((to_f32(ds[i]) - mdy) - (to_f32(xs[i]) - m) * f) * s, like)
