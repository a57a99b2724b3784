"""normkern's execution runtime: how a plan runs on the CPU.

- ``tiling`` plans a call: the SoC's cores, each core's share, the reduction order.
- A kernel is a **per-core body** (:func:`body`): a serial ``nogil`` Numba function that runs the cores
  ``[begin, end)`` of a plan, each core exactly its share, each writing only its own rows. Bodies compile
  apart and cache apart.
- The **launch** (:func:`launch`, ``launch.py``) runs a body over the plan's cores on as many CPU threads
  as the work pays for (:func:`threads_for`, ``threads.py``): the calling thread and normkern's own worker
  threads, which sleep when idle and are made afresh after a fork, or, beside PyTorch, PyTorch's OpenMP team
  (:func:`join_openmp_team`). A phase that needs every core's result
  (a combine in core order, the NPU's SyncAll) is a second launch or a serial call after the first.
- The **cache** (``cache.py``): Numba's on-disk cache, keyed also by the helpers each body compiles in.
"""

from .launch import body, join_openmp_team, launch, launcher, pool_size, runs_of
from .threads import (
    BYTES_PER_THREAD,
    MAX_THREADS,
    get_num_threads,
    plan_spans,
    set_num_threads,
    thread_spans,
    threads_for,
)

__all__ = ["BYTES_PER_THREAD", "MAX_THREADS", "body", "get_num_threads", "join_openmp_team", "launch", "launcher",
           "plan_spans", "pool_size", "runs_of", "set_num_threads", "thread_spans", "threads_for"]
