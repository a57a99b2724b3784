"""Which CPU thread runs which of a plan's cores.

A plan has the SoC's cores (48 on an A2); the CPU runs them on ``numba.get_num_threads()`` threads.
A ``prange`` over the cores hands each thread the same *number* of cores, and when cores carry
unequal work the threads do not finish together: BatchNormStats 64x128x56x56 on the A2 plan has 32
cores of 3 channels and 16 of 2, and with two threads the first ran 72 channels, the second 56.

Instead each thread takes one contiguous run of cores of about equal work (:func:`thread_spans`),
and the kernels run ``prange`` over the threads, each thread its cores in order. Every core still
does exactly its plan share and writes only its own rows, so which thread runs it changes no bit.
"""

from __future__ import annotations

import numba
import numpy as np

import tiling


def thread_spans(work, threads: int) -> np.ndarray:
    """Boundaries ``b`` (``threads + 1`` int64): thread ``t`` runs cores ``[b[t], b[t + 1])``.

    ``work[k]`` is core k's share (channels, rows, tasks). Boundary ``t`` is the core boundary whose
    work prefix is nearest to ``t / threads`` of the total, so no thread is more than one core's work
    off its share. Threads beyond the cores get empty runs.
    """
    prefix = np.concatenate(([0], np.cumsum(np.asarray(work, np.int64))))
    cores = prefix.shape[0] - 1
    bounds = np.empty(threads + 1, np.int64)
    bounds[0] = 0
    for t in range(1, threads):
        target = prefix[-1] * t / threads
        k = int(np.searchsorted(prefix, target))
        if k > 0 and target - prefix[k - 1] <= prefix[k] - target:
            k -= 1
        bounds[t] = min(max(k, bounds[t - 1]), cores)
    bounds[threads] = cores
    return bounds


def plan_spans(plan: tiling.Plan, work) -> np.ndarray:
    """:func:`thread_spans` of ``work()`` for the current thread count, kept per plan and count.

    ``work()`` gives the cores' work, (cores,), or (phases, cores) for a plan whose phases each
    spread over the cores (then one row of boundaries a phase). It is a callable so that it runs
    once per plan and thread count, not per call."""
    threads = numba.get_num_threads()

    def spans() -> np.ndarray:
        table = np.asarray(work())
        if table.ndim == 1:
            return thread_spans(table, threads)
        return np.stack([thread_spans(row, threads) for row in table])

    return plan.memo(("thread_spans", threads), spans)
