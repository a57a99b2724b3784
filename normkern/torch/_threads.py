"""Numba threads under several ranks on one machine.

Each rank is a process with its own Numba thread pool; with every pool as large as the machine, ranks on one
machine oversubscribe its cores. A rank therefore runs its kernels on its share of the cores:
``os.cpu_count() // LOCAL_WORLD_SIZE`` (torchrun sets ``LOCAL_WORLD_SIZE``; otherwise the process group's
size, which is right when every rank is on this machine), at least one. ``NORMKERN_THREADS_PER_RANK`` or
:func:`set_threads_per_rank` override it. Numba's thread count is per calling thread, so the share is applied
on each layer call (a look-up and a compare when it is already set).

The pool itself is sized to the share when the first layer call comes before any parallel kernel has
run: with Numba's OpenMP layer, pool threads left idle by ``set_num_threads`` still spin between calls
and take the other rank's core (docs/torch.md has the step times of each choice).
"""

from __future__ import annotations

import os

import numba
import numba.np.ufunc.parallel as _parallel

_override: int | None = None


def set_threads_per_rank(threads: int | None) -> None:
    """Numba threads for each rank's kernels (None: the share of the cores)."""
    global _override
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    _override = threads


def threads_for(world_size: int) -> int:
    """The thread count a rank of a ``world_size`` group uses."""
    if _override is not None:
        wanted = _override
    elif os.environ.get("NORMKERN_THREADS_PER_RANK"):
        wanted = int(os.environ["NORMKERN_THREADS_PER_RANK"])
    else:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        wanted = (os.cpu_count() or 1) // max(1, local)
    return max(1, min(wanted, numba.config.NUMBA_NUM_THREADS))


def share_cores(world_size: int) -> None:
    """Set the calling thread's Numba thread count to this rank's share (and, before Numba has started its
    thread pool, the pool's size)."""
    wanted = threads_for(world_size)
    if not _parallel._is_initialized and wanted < numba.config.NUMBA_NUM_THREADS:
        # Numba launches its pool with parallel.NUM_THREADS (read from the config at import) and checks
        # set_num_threads against the config: both, before the launch. Private to Numba: the pinned
        # range's layout, guarded.
        if hasattr(_parallel, "NUM_THREADS"):
            _parallel.NUM_THREADS = wanted
        numba.config.NUMBA_NUM_THREADS = wanted
    if numba.get_num_threads() != wanted:
        numba.set_num_threads(wanted)
