"""The BatchNormElemt kernels.

The host's ``channels`` plan: each core owns whole channels and walks plane ``n`` of its every channel, then plane
``n + 1`` (memory order within its share). The NPU plans' model: each core of the plan owns one flat element range
(``core_start``, ``core_count``); the range crosses planes of ``HxW`` elements, and each plane takes its channel's
float32 coefficients. Every element is one fixed float32 expression, so neither the split nor the thread count
changes a bit; a body runs a run of the plan's cores ``[begin, end)`` (``normkern.runtime``).
"""

from __future__ import annotations

from numba import njit

from ...kernels.dtypes import from_f32, to_f32
from ...kernels.planes import plane_end
from ...kernels.views import row_view
from ...runtime import body


@njit(cache=True, error_model="numpy")
def _elemt_core(x, args, core, mean, scale, weight, bias, out):
    """Core ``core``'s range (BatchNormElemtBackward's body walks its cores the same way)."""
    like = out[0]
    pos = args.core_start[core]
    end = pos + args.core_count[core]
    while pos < end:
        plane, stop = plane_end(pos, end, args.hxw)
        c = plane % args.c
        m, k, w, b = mean[c], scale[c], weight[c], bias[c]
        # Views from 0, not global indices: an index loop from ``pos`` keeps Numba's negative-index
        # wraparound in the body, and LLVM then leaves it scalar (five times slower).
        xs = row_view(x, pos, stop - pos)
        ys = row_view(out, pos, stop - pos)
        for i in range(stop - pos):
            ys[i] = from_f32(((to_f32(xs[i]) - m) * k) * w + b, like)
        pos = stop


@body
def elemt(x, args, mean, scale, weight, bias, out, begin, end):
    """out = ((x - mean) * scale) * weight + bias, per element; x and out flat, the rest (C,) float32."""
    for core in range(begin, end):
        _elemt_core(x, args, core, mean, scale, weight, bias, out)


@body
def channels(x, args, mean, scale, weight, bias, out, begin, end):
    """The ``channels`` plan: the same expression per element as ``elemt``, core k's channels plane by plane."""
    like = out[0]
    hxw = args.hxw
    for core in range(begin, end):
        first = args.core_start[core]
        for n in range(args.n):
            for c in range(first, first + args.core_count[core]):
                m, k, w, b = mean[c], scale[c], weight[c], bias[c]
                xs = row_view(x, (n * args.c + c) * hxw, hxw)
                ys = row_view(out, (n * args.c + c) * hxw, hxw)
                for i in range(hxw):  # from 0: see _elemt_core
                    ys[i] = from_f32(((to_f32(xs[i]) - m) * k) * w + b, like)
