"""normkern's runtime: everything between a public call and the compiled kernels, in the order a call meets it.

1. ``calls.py``: the op's signature cache. ``normkern.batch_norm_stats(x, eps)`` makes the key of its
   arguments (shapes, dtypes, strides, aliasing, values, this context's settings); a key seen before holds
   a ``Bound`` call, and the op runs it at once. ``normkern.prepare`` keeps one Bound for a caller.
2. On a new key, the op's ``bind``: ``checks.py`` (every rule in the CANN op_api order, each error naming
   the op, the parameter, the value and the rule), ``settings.py`` (this context's SoC, determinism and
   thread count), the ``tiling`` planner; the result is an ``executor.Executor`` around a ``Bound``: the plan
   and the op's ``run``. The aclnn layer's first phase returns that executor; its second phase
   (``executor.execute``) runs it in the caller's workspace.
3. The Bound's ``run`` (the op's own code) stages outputs (``buffers.py``), takes what it derives from
   the plan once per plan (``derived.py``: kernel arguments, each thread's run of cores from ``threads.py``,
   addition orders), and calls ``launch``.
4. ``launch.py``: a per-core **body** (:func:`body`, a serial ``nogil`` Numba function of a run of the
   plan's cores, each writing only its own rows) run over the plan's cores on as many CPU threads as the
   work pays for: the calling thread and normkern's own workers, or, where PyTorch is loaded, PyTorch's
   OpenMP team. A phase that needs every core's result (a combine in core order, the NPU's SyncAll) is a
   second launch or a serial call after the first.
5. ``cache.py``: Numba's on-disk cache of the bodies, keyed also by the shared blocks they compile in
   (``normkern.kernels``).
"""

from . import settings
from .derived import derived, kernel_args
from .launch import body, join_openmp_team, launch, launcher, pool_size, runs_of
from .settings import MAX_THREADS, get_num_threads, set_num_threads
from .threads import BYTES_PER_THREAD, call_runs, plan_spans, thread_spans, threads_for

__all__ = ["BYTES_PER_THREAD", "MAX_THREADS", "body", "call_runs", "derived", "get_num_threads", "join_openmp_team",
           "kernel_args", "launch", "launcher", "plan_spans", "pool_size", "runs_of", "set_num_threads", "settings",
           "thread_spans", "threads_for"]
