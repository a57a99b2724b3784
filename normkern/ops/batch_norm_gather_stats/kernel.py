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
order. The kernel runs on the calling thread, the plan's cores in order (its work, D x C statistics,
is below what a second thread pays for, ``normkern.runtime.threads``); each core writes only its channels
or its own row.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy")
def _finish(var_sum, mean_all, total, eps, momentum, invstd_out, run_mean, run_var, update):
    """invstd and the running statistics of a run of channels (the arrays are views of it)."""
    for j in range(var_sum.shape[0]):
        invstd_out[j] = np.float32(1.0) / np.sqrt(var_sum[j] / total + eps)
    if update:
        keep = np.float32(1.0) - momentum
        bessel = total - np.float32(1.0)
        for j in range(var_sum.shape[0]):
            run_mean[j] = keep * run_mean[j] + momentum * mean_all[j]
            run_var[j] = keep * run_var[j] + momentum * (var_sum[j] / bessel)


@njit(cache=True, error_model="numpy")
def _deviation_term(mean, invstd, weight, mean_all, eps):
    inv = np.float32(1.0) / invstd
    var = inv * inv - eps
    d = mean - mean_all
    return (var + d * d) * weight


@njit(cache=True, error_model="numpy")
def _add_block_rows(partials, blocks, pitch, total):
    """total = the blocks' partial rows added in block order, onto zero."""
    total[:] = 0.0
    for k in range(blocks):
        _add_row(total, partials[k * pitch:k * pitch + total.shape[0]])


@njit(cache=True, error_model="numpy", inline="always")
def _weighted_into(acc, row, weight):
    for j in range(acc.shape[0]):
        acc[j] += row[j] * weight


@njit(cache=True, error_model="numpy", inline="always")
def _deviations_into(acc, row, inv, weight, mean_all, eps):
    for j in range(acc.shape[0]):
        acc[j] += _deviation_term(row[j], inv[j], weight, mean_all[j], eps)


# The row loops are functions of their own: with only their arrays in scope LLVM vectorizes them
# (inlined into the kernel, the aliasing checks between all its arrays kept them scalar).
@njit(cache=True, error_model="numpy", inline="never")
def _add_row(acc, row):
    for j in range(acc.shape[0]):
        acc[j] += row[j]


@njit(cache=True, error_model="numpy", inline="never")
def _add_weighted(acc, row, weight):
    _weighted_into(acc, row, weight)


@njit(cache=True, error_model="numpy", inline="never")
def _add_deviations(acc, row, inv, weight, mean_all, eps):
    _deviations_into(acc, row, inv, weight, mean_all, eps)


@njit(cache=True, error_model="numpy", inline="never")
def _channel_sums(acc, mean_all, mean, invstd, counts, c0, c1, total, eps):
    """Channels c0:c1 of a channel-split core: mean_all, then the deviation sums in acc (zero on
    entry), devices in order. A function of its own, called once a core: with only these arrays in
    scope LLVM vectorizes the row loops (inlined into the kernel they stayed scalar)."""
    for n in range(mean.shape[0]):
        _weighted_into(acc, mean[n, c0:c1], counts[n])
    for j in range(acc.shape[0]):
        mean_all[j] = acc[j] / total
        acc[j] = 0.0
    for n in range(mean.shape[0]):
        _deviations_into(acc, mean[n, c0:c1], invstd[n, c0:c1], counts[n], mean_all, eps)


@njit(cache=True, error_model="numpy")
def gather_stats(mean, invstd, counts, ws, args, eps, momentum, mean_out, invstd_out, run_mean, run_var, update):
    """``args`` is the plan's ``inline_kernel_args()``."""
    eps = np.float32(eps)
    momentum = np.float32(momentum)
    devices = args.n
    channels = args.c
    core_start = args.core_start
    core_count = args.core_count
    cores = core_start.shape[0]
    total = np.float32(0.0)
    for n in range(devices):
        total += counts[n]
    if args.split_n == 0:
        sums = np.zeros(channels, np.float32)  # one slice per core: each core writes only its channels
        for core in range(cores):
            c0 = core_start[core]
            c1 = c0 + core_count[core]
            acc = sums[c0:c1]
            out = mean_out[c0:c1]
            _channel_sums(acc, out, mean, invstd, counts, c0, c1, total, eps)
            _finish(acc, out, total, eps, momentum, invstd_out[c0:c1], run_mean[c0:c1], run_var[c0:c1], update)
        return
    pitch = args.partial_pitch
    blocks = 0
    for core in range(cores):
        if core_count[core] > 0:
            blocks += 1
    offset = args.partial_offset
    partials = ws[offset:offset + (blocks + 2) * pitch]
    mean_row = partials[blocks * pitch:blocks * pitch + channels]      # the two rows after the block partials
    var_row = partials[(blocks + 1) * pitch:(blocks + 1) * pitch + channels]
    for core in range(blocks):  # cores past the device split are idle: they own no row
        part = partials[core * pitch:core * pitch + channels]
        part[:] = 0.0
        for n in range(core_start[core], core_start[core] + core_count[core]):
            _add_weighted(part, mean[n], counts[n])
    _add_block_rows(partials, blocks, pitch, mean_row)
    for c in range(channels):
        mean_row[c] = mean_row[c] / total
        mean_out[c] = mean_row[c]
    for core in range(blocks):
        part = partials[core * pitch:core * pitch + channels]
        part[:] = 0.0
        for n in range(core_start[core], core_start[core] + core_count[core]):
            _add_deviations(part, mean[n], invstd[n], counts[n], mean_row, eps)
    _add_block_rows(partials, blocks, pitch, var_row)
    _finish(var_row, mean_row, total, eps, momentum, invstd_out, run_mean, run_var, update)

