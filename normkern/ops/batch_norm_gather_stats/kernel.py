"""BatchNormGatherStatsWithCounts kernels: per-device statistics to global ones, in float32.

With ``w[n] = counts[n]``, ``W = sum_n w[n]`` (devices in order), per channel ``c``::

    mean_all  = (sum_n mean[n] * w[n]) / W                                   pass 1
    var[n]    = (1 / invstd[n])^2 - eps
    var_sum   = sum_n (var[n] + (mean[n] - mean_all)^2) * w[n]                pass 2
    invstd_all = 1 / sqrt(var_sum / W + eps)
    running_mean = (1 - momentum) * running_mean + momentum * mean_all        (in place)
    running_var  = (1 - momentum) * running_var + momentum * var_sum / (W - 1)

Channel-split plans add devices in order inside one core; device-split plans give each core a
block of devices, write one partial row per block to the workspace, and add the rows in block
order. ``prange`` runs over the plan's cores; each writes only its channels or its own row.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, error_model="numpy")
def _finish(c, var_sum, mean_all, total, eps, momentum, invstd_out, run_mean, run_var, update):
    invstd_out[c] = np.float32(1.0) / np.sqrt(var_sum / total + eps)
    if update:
        keep = np.float32(1.0) - momentum
        run_mean[c] = keep * run_mean[c] + momentum * mean_all
        run_var[c] = keep * run_var[c] + momentum * (var_sum / (total - np.float32(1.0)))


@njit(cache=True, error_model="numpy")
def _deviation_term(mean, invstd, weight, mean_all, eps):
    inv = np.float32(1.0) / invstd
    var = inv * inv - eps
    d = mean - mean_all
    return (var + d * d) * weight


@njit(parallel=True, cache=True, error_model="numpy")
def gather_stats(mean, invstd, counts, ws, args, eps, momentum, mean_out, invstd_out, run_mean, run_var, update):
    total = np.float32(0.0)
    for n in range(args.n):
        total += counts[n]
    cores = args.core_start.shape[0]
    if args.split_n == 0:
        for core in prange(cores):
            c0 = args.core_start[core]
            cn = args.core_count[core]
            acc = np.zeros(cn, np.float32)
            for n in range(args.n):
                for j in range(cn):
                    acc[j] += mean[n, c0 + j] * counts[n]
            for j in range(cn):
                mean_out[c0 + j] = acc[j] / total
                acc[j] = 0.0
            for n in range(args.n):
                for j in range(cn):
                    acc[j] += _deviation_term(mean[n, c0 + j], invstd[n, c0 + j], counts[n], mean_out[c0 + j], eps)
            for j in range(cn):
                _finish(c0 + j, acc[j], mean_out[c0 + j], total, eps, momentum, invstd_out, run_mean, run_var,
                        update)
        return
    pitch = args.partial_pitch
    base = args.partial_offset
    blocks = 0
    for core in range(cores):
        if args.core_count[core] > 0:
            blocks += 1
    mean_row = base + blocks * pitch          # the two rows after the block partials
    var_row = mean_row + pitch
    for core in prange(blocks):  # cores past the device split are idle: they own no row
        row = base + core * pitch
        for c in range(args.c):
            ws[row + c] = 0.0
        for n in range(args.core_start[core], args.core_start[core] + args.core_count[core]):
            for c in range(args.c):
                ws[row + c] += mean[n, c] * counts[n]
    for c in range(args.c):
        t = np.float32(0.0)
        for k in range(blocks):
            t += ws[base + k * pitch + c]
        ws[mean_row + c] = t / total
        mean_out[c] = ws[mean_row + c]
    for core in prange(blocks):
        row = base + core * pitch
        for c in range(args.c):
            ws[row + c] = 0.0
        for n in range(args.core_start[core], args.core_start[core] + args.core_count[core]):
            for c in range(args.c):
                ws[row + c] += _deviation_term(mean[n, c], invstd[n, c], counts[n], ws[mean_row + c], eps)
    for c in range(args.c):
        t = np.float32(0.0)
        for k in range(blocks):
            t += ws[base + k * pitch + c]
        ws[var_row + c] = t
        _finish(c, t, ws[mean_row + c], total, eps, momentum, invstd_out, run_mean, run_var, update)
