"""How many CPU threads a call runs on, and which thread runs which of a plan's cores.

A plan has the SoC's cores (48 on an A2); the CPU runs them on up to ``settings.get_num_threads()`` threads.
Each thread takes one contiguous run of cores of about equal work (:func:`thread_spans`): with cores
of unequal work (BatchNormStats 64x128x56x56 on the A2 plan: 32 cores of 3 channels and 16 of 2) an
equal *number* of cores a thread would not finish together. Every core still does exactly its plan
share and writes only its own rows, so which thread runs it changes no bit, and a deterministic plan
gives the same bits at any thread count.

Handing work to another thread costs more than a small call's whole work (``launch.py``), so a call
uses one more thread only for each ``per_thread`` bytes it touches (:func:`threads_for`; each op passes
the figure measured for its kernels: docs/performance.md, "The runtime"); a smaller call runs on the
calling thread alone. The default thread count is Numba's configured one (``NUMBA_NUM_THREADS``, else the
CPU's), which is also the ``host`` SoC's vector-core count.
"""

from __future__ import annotations

import numpy as np

import tiling

from .derived import derived
from .launch import runs_of
from .settings import THREADS

#: One more thread per this many bytes read and written, where an op names no figure of its own.
BYTES_PER_THREAD = 2 * 1024 * 1024


def threads_for(nbytes: int, per_thread: int = BYTES_PER_THREAD) -> int:
    """The threads a call touching ``nbytes`` uses: one per ``per_thread`` bytes, at least one, at most
    ``get_num_threads()`` (exactly that many when it was set ``exact``)."""
    threads, exact = THREADS.get()
    return threads if exact else max(1, min(threads, nbytes // per_thread))


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


def plan_spans(plan: tiling.Plan, work, nbytes: int, per_thread: int = BYTES_PER_THREAD) -> tuple:
    """The runs of :func:`thread_spans` of ``work()`` (``launch.runs_of``) for the threads a call of ``nbytes``
    uses (:func:`threads_for`), kept per plan and count (``derived``): what ``launch`` takes.

    ``work()`` gives the cores' work, (cores,), or a tuple of such rows, one a phase, for a plan whose phases
    each spread over their own items (cores, or a phase's groups of cores; then a tuple of runs a phase).
    It is a callable so that it runs once per plan and thread count, not per call."""
    threads, exact = THREADS.get()
    if not exact:
        threads = max(1, min(threads, nbytes // per_thread))
    table = derived(plan, "thread_spans", dict)
    runs = table.get(threads)
    if runs is None:
        rows = work()
        if isinstance(rows, tuple):
            runs = tuple(runs_of(thread_spans(row, threads)) for row in rows)
        else:
            runs = runs_of(thread_spans(rows, threads))
        table[threads] = runs
    return runs


def call_runs(plan: tiling.Plan, work, nbytes: int, per_thread: int = BYTES_PER_THREAD):
    """What a Bound call asks for its launch's runs: a function of no arguments giving :func:`plan_spans` for
    this context's thread setting. A Bound's arrays have fixed shapes, so ``nbytes`` is fixed when it is bound;
    the function keeps the runs per setting, so a repeated call pays one context read and one look-up."""
    by_setting: dict = {}

    def runs() -> tuple:
        setting = THREADS.get()
        found = by_setting.get(setting)
        if found is None:
            found = by_setting[setting] = plan_spans(plan, work, nbytes, per_thread)
        return found

    return runs
