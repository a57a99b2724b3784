"""FastBatchNormBackward's ``planes`` plan (the host's, normkern's own): one body, each channel reduced and its dx
written while its planes are in cache.

``dy``, ``x`` and ``dx`` are flat kernel views of (N, C, HxW) arrays; core ``k`` owns channels ``[core_start[k],
core_start[k] + core_count[k])`` and writes only their planes and their entries of ``grad_weight``/``grad_bias``.
A channel's two sums are ``kernels.planes.channel_sums`` (the plan's order; BatchNormReduceBackward's host plan
shares it); the dx of each element is the expression of ``rows.py``, written while the channel's planes are in
cache.
"""

from __future__ import annotations

import numpy as np

from ...kernels.lanes import LANES
from ...kernels.planes import channel_sums
from ...kernels.views import row_view
from ...runtime import body
from .rows import F32, _dx_row, _dx_row_infer


@body
def planes(dy, x, dx, args, mean, scale, weight, training, write_dx, grad_weight, grad_bias, begin, end):
    """``grad_bias = sum dy``, ``grad_weight = sum dy * (x - mean) * scale`` and (``write_dx``) dx, per channel."""
    acc_dy = np.empty(args.row_elems, F32)
    acc_dyx = np.empty(args.row_elems, F32)
    lanes = np.empty(LANES, F32)
    hxw = args.hxw
    count = F32(args.n * hxw)
    for core in range(begin, end):
        for c in range(args.core_start[core], args.core_start[core] + args.core_count[core]):
            m = mean[c]
            sum_dy, sum_dyx = channel_sums(dy, x, c, args, m, acc_dy, acc_dyx, lanes)
            r_c = scale[c]
            g = sum_dyx * r_c
            grad_weight[c] = g
            grad_bias[c] = sum_dy
            if write_dx:  # the factors of kernel._dx_factors
                shift = sum_dy * (F32(1.0) / count)
                k = (g * r_c) / count
                for plane in range(args.n):
                    offset = (plane * args.c + c) * hxw
                    if training:
                        _dx_row(row_view(dy, offset, hxw), row_view(x, offset, hxw), row_view(dx, offset, hxw), m,
                                shift, k, r_c, weight[c])
                    else:
                        _dx_row_infer(row_view(dy, offset, hxw), row_view(dx, offset, hxw), r_c, weight[c])
