"""normkern's threads under several ranks on one machine.

Each rank is a process with its own threads; with every rank using as many as the machine has, ranks on
one machine oversubscribe its cores. A rank therefore runs its kernels on its share of the cores:
``os.cpu_count() // LOCAL_WORLD_SIZE`` (torchrun sets ``LOCAL_WORLD_SIZE``; otherwise the process group's
size, which is right when every rank is on this machine), at least one. ``NORMKERN_THREADS_PER_RANK`` or
:func:`set_threads_per_rank` override it. normkern's thread count is a setting of the calling thread
(``normkern.set_num_threads``), so the share is applied on each layer call (a look-up and a compare when it
is already set). normkern's worker threads sleep between calls, so the threads a rank does not use take no
core from the others.
"""

from __future__ import annotations

import os

from .. import runtime

_override: int | None = None


def set_threads_per_rank(threads: int | None) -> None:
    """normkern threads for each rank's kernels (None: the share of the cores)."""
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
    return max(1, min(wanted, runtime.MAX_THREADS))


def share_cores(world_size: int) -> None:
    """Set the calling thread's normkern thread count to this rank's share."""
    wanted = threads_for(world_size)
    if runtime.get_num_threads() != wanted:
        runtime.set_num_threads(wanted)
