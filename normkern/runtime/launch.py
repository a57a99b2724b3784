"""The launch: a per-core body run over a plan's cores on normkern's own threads.

A body is a serial ``nogil`` Numba function whose last two parameters are a run of cores ``[begin, end)``
(the Ascend model: a core runs its share; :func:`body` compiles it). :func:`launch` gives thread ``t``
the cores ``[spans[t], spans[t + 1])``: the calling thread runs the first run itself, a worker of the
pool each of the others, and the call returns when every run is done. One run is a plain call on the
calling thread.

The workers are Python threads that call the body, which releases the GIL while it runs. Between launches
a worker waits for the next one in native code, spinning (``wait_for``) for :data:`SPIN_US` and then
sleeping on a condition, so an idle pool takes no CPU from PyTorch's threads or another rank's; the
launching thread waits for the workers the same way. Spinning first matters where waking a sleeping
thread is slow (virtual machines; docs/performance.md, "The runtime", has the figures): a layer's calls
come in bursts, each launch a few microseconds after the last.

Nothing of the pool survives a fork: the child starts with an empty pool and makes its own workers when it
first needs them. A launch that finds the pool busy (another Python thread's launch) runs every run on its
own thread, in order; which thread runs a core changes no bit.

Beside PyTorch (loaded before or after normkern: the first launch that finds it joins; ``normkern.torch`` joins at
import), the runs go to the OpenMP thread team of the GNU OpenMP runtime PyTorch loaded, through its public ABI
(``GOMP_parallel``): after each of its ops PyTorch's team spins, waiting for the next parallel region, and a
second pool of threads would share the cores with those spinning threads; normkern's runs become that next
region instead. The team is used for at most ``torch.get_num_threads()`` threads (a DataLoader worker's one
thread runs every run itself), never in a process forked from one that had PyTorch loaded (GNU OpenMP does not
survive a fork), and a busy team (another Python thread's launch) leaves the launch to the pool.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
import time
from collections.abc import Callable

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

#: How long a waiting thread spins before it sleeps [microseconds].
SPIN_US = 100


def body(function=None, **options):
    """A per-core body: ``njit`` with normkern's options (cached, ``nogil``, NumPy's error model)."""
    options = {"cache": True, "nogil": True, "error_model": "numpy", **options}
    if function is None:
        return lambda f: njit(**options)(f)
    return njit(**options)(function)


#: x86's spin-wait hint (``pause``), where there is one.
_PAUSE = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


@intrinsic
def _load_flag(typingctx, flags, index):
    """``flags[index]`` as an atomic (sequentially consistent) load of an int64, then a spin-wait hint: read
    from memory on every round, never hoisted out of a loop."""
    if not (isinstance(flags, types.Array) and flags.dtype == types.int64 and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        pointer = _element(context, builder, signature, args)
        value = builder.load_atomic(pointer, "seq_cst", 8)
        if _PAUSE:
            pause = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                   "llvm.x86.sse2.pause")
            builder.call(pause, [])
        return value

    return types.int64(flags, index), codegen


@intrinsic
def _store_flag(typingctx, flags, index, value):
    """``flags[index] = value`` as an atomic (sequentially consistent) store of an int64."""
    if not (isinstance(flags, types.Array) and flags.dtype == types.int64 and isinstance(index, types.Integer)
            and isinstance(value, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        pointer = _element(context, builder, signature, args)
        builder.store_atomic(context.cast(builder, args[2], signature.args[2], types.int64), pointer, "seq_cst", 8)
        return context.get_dummy_value()

    return types.none(flags, index, value), codegen


def _element(context, builder, signature, args):
    array = make_array(signature.args[0])(context, builder, args[0])
    return builder.gep(array.data, [context.cast(builder, args[1], signature.args[1], types.intp)])


@njit(cache=True, nogil=True, error_model="numpy")
def wait_for(flags, index, value, spins):
    """Spin until ``flags[index] >= value`` or ``spins`` rounds have passed; whether it got there."""
    for _ in range(spins):
        if _load_flag(flags, index) >= value:
            return True
    return _load_flag(flags, index) >= value


@njit(cache=True, nogil=True, error_model="numpy")
def post(flags, index, value, watch):
    """``flags[index] = value``, then whether ``flags[watch]`` is set: the two sides of a sleeper's handshake
    (each posts its own flag, then reads the other's), in this order on every CPU."""
    _store_flag(flags, index, value)
    return _load_flag(flags, watch) != 0


def _spins_per_us() -> int:
    """Rounds of ``wait_for`` in a microsecond, measured once (the first multi-threaded launch)."""
    never = np.zeros(1, np.int64)
    wait_for(never, 0, 1, 1)  # compiled (or loaded) before it is timed
    rounds = 20000
    start = time.perf_counter()
    wait_for(never, 0, 1, rounds)
    return max(1, int(rounds / max((time.perf_counter() - start) * 1e6, 1e-3)))


#: The flags of worker ``i``: ``flags[STRIDE * i + k]``.
STRIDE = 8
_START, _DONE, _SLEEPING = 0, 1, 2


class _Worker:
    """One pool thread and its flags: the number of the launch handed to it (``_START``, with ``task``) and
    of the last one it finished (``_DONE``), and whether the launching thread sleeps on ``done`` for it
    (``_SLEEPING``). ``wake`` is the condition the worker sleeps on when no launch came while it spun."""

    def __init__(self, pool: Pool, index: int) -> None:
        self.pool = pool
        self.base = STRIDE * index
        self.task = None
        self.error: BaseException | None = None
        self.wake = threading.Condition(threading.Lock())
        self.done = threading.Condition(threading.Lock())
        self.thread = threading.Thread(target=self._serve, name=f"normkern-worker-{index}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        flags, base = self.pool.flags, self.base
        seen = 0
        while True:
            if not wait_for(flags, base + _START, seen + 1, self.pool.spins):
                with self.wake:
                    while flags[base + _START] <= seen:
                        self.wake.wait()
            seen = int(flags[base + _START])
            function, args, begin, end = self.task
            self.task = None
            try:
                function(*args, begin, end)
            except BaseException as exc:  # handed to the launching thread
                self.error = exc
            function = args = None  # the launch's arrays are not kept alive while the worker waits for the next
            # posted from native code, with the GIL released: a launching thread that sees it finds the GIL free
            if post(flags, base + _DONE, seen, base + _SLEEPING):
                with self.done:
                    self.done.notify()

    def hand(self, number: int, task) -> None:
        """Give the worker launch ``number``."""
        self.task = task
        with self.wake:
            self.pool.flags[self.base + _START] = number
            self.wake.notify()

    def wait(self, number: int) -> None:
        """Until the worker has finished launch ``number``: spinning, the GIL released, then asleep on ``done``
        (announced in ``_SLEEPING`` before the last look at ``_DONE``, which the worker posts before it looks
        at ``_SLEEPING``: one of the two sees the other)."""
        flags, done = self.pool.flags, self.base + _DONE
        if wait_for(flags, done, number, self.pool.spins):
            return
        with self.done:
            post(flags, self.base + _SLEEPING, 1, done)
            while flags[done] < number:
                self.done.wait(0.01)  # the timeout only guards against a lost wake-up
            flags[self.base + _SLEEPING] = 0


class Pool:
    """The worker threads of this process, made as launches first need them."""

    #: Workers a pool can hold: its flags are made once.
    CAPACITY = 256

    def __init__(self) -> None:
        self._workers: list[_Worker] = []
        self._busy = threading.Lock()
        self._launches = 0
        self.flags = np.zeros(STRIDE * self.CAPACITY, np.int64)
        self.spins = 0

    @property
    def size(self) -> int:
        return len(self._workers)

    def launch(self, function, runs: tuple, args: tuple) -> None:
        if len(runs) <= 1 or len(runs) > self.CAPACITY or not self._busy.acquire(blocking=False):
            for begin, end in runs:
                function(*args, begin, end)
            return
        try:
            if not self.spins:
                self.spins = SPIN_US * _spins_per_us()
            while len(self._workers) < len(runs) - 1:
                self._workers.append(_Worker(self, len(self._workers)))
            self._launches += 1
            number = self._launches
            workers = self._workers[:len(runs) - 1]
            for worker, (begin, end) in zip(workers, runs[1:], strict=True):
                worker.hand(number, (function, args, begin, end))
            try:
                function(*args, *runs[0])
            finally:
                for worker in workers:  # every run finishes before the call returns or raises
                    worker.wait(number)
            for worker in workers:
                if worker.error is not None:
                    error, worker.error = worker.error, None
                    raise error
        finally:
            self._busy.release()


#: ``void (*)(void *)``: the function each member of an OpenMP team runs (``GOMP_parallel``'s first argument).
_TEAM_FUNCTION = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class OpenMPTeam:
    """Launches on the thread team of a GNU OpenMP runtime loaded in this process: ``GOMP_parallel`` (called
    with the GIL released) runs :meth:`_member` on ``team`` threads, the calling thread among them; member
    ``i`` of ``n`` runs runs ``i, i + n, ...`` and keeps any error for the caller."""

    def __init__(self, library: str, limit: Callable[[], int]) -> None:
        self.library = library
        self._omp = ctypes.CDLL(library)
        self._omp.omp_get_thread_num.restype = ctypes.c_int
        self._omp.omp_get_num_threads.restype = ctypes.c_int
        self._parallel = self._omp.GOMP_parallel
        self._parallel.argtypes = [_TEAM_FUNCTION, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
        self._parallel.restype = None
        self._member_function = _TEAM_FUNCTION(self._member)
        self._busy = threading.Lock()
        self._task = None
        self.limit = limit

    def _member(self, _) -> None:
        function, args, runs, errors = self._task
        member, team = self._omp.omp_get_thread_num(), self._omp.omp_get_num_threads()
        for i in range(member, len(runs), team):
            try:
                function(*args, *runs[i])
            except BaseException as exc:  # an exception must not cross the C frames: handed to the caller
                errors.append(exc)

    def launch(self, function, runs: tuple, args: tuple) -> bool:
        """Run every run on the team; False (nothing run) when the team is busy with another thread's launch."""
        if not self._busy.acquire(blocking=False):
            return False
        try:
            team = min(len(runs), self.limit())
            if team <= 1:
                for begin, end in runs:
                    function(*args, begin, end)
                return True
            errors: list[BaseException] = []
            self._task = (function, args, runs, errors)
            try:
                self._parallel(self._member_function, None, team, 0)
            finally:
                self._task = None
            if errors:
                raise errors[0]
            return True
        finally:
            self._busy.release()


_pool = Pool()
_team: OpenMPTeam | None = None
#: Whether a launch may still join PyTorch's team when it finds PyTorch loaded (False once looked for in vain,
#: and in a child forked from a process that had PyTorch).
_may_join = True


def loaded_openmp() -> str | None:
    """The path of the GNU OpenMP runtime (``libgomp``) mapped into this process, if one is (Linux)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if "/libgomp" in path and ".so" in path:
                    return path
    except OSError:
        pass
    return None


def join_openmp_team(limit: Callable[[], int]) -> bool:
    """Launch on the team of the GNU OpenMP runtime already in this process (PyTorch's) from now on, on at most
    ``limit()`` threads; whether there is one to join."""
    global _team
    if _team is None:
        library = loaded_openmp()
        if library is None:
            return False
        _team = OpenMPTeam(library, limit)
    return True


def launcher() -> str:
    """Who runs a launch's runs: ``"openmp"`` (the joined OpenMP team) or ``"pool"`` (normkern's own threads)."""
    return "pool" if _team is None else "openmp"


def runs_of(spans) -> tuple[tuple[int, int], ...]:
    """The non-empty runs ``(spans[t], spans[t + 1])`` of thread boundaries, as Python ints (at least one)."""
    bounds = [int(b) for b in spans]
    runs = tuple((bounds[t], bounds[t + 1]) for t in range(len(bounds) - 1) if bounds[t] < bounds[t + 1])
    return runs or ((bounds[0], bounds[-1]),)


def launch(function, spans, *args) -> None:
    """Run ``function(*args, spans[t], spans[t + 1])`` for every thread ``t`` whose run of cores is not empty.
    ``spans`` are thread boundaries (``threads.thread_spans``) or their :func:`runs_of` (what
    ``threads.plan_spans`` keeps per plan, so that a call does not convert them again)."""
    runs = spans if type(spans) is tuple else runs_of(spans)
    if len(runs) == 1:  # the calling thread alone
        function(*args, *runs[0])
        return
    team = _team if _team is not None or not _may_join else _torch_team()
    if team is not None and team.launch(function, runs, args):
        return
    _pool.launch(function, runs, args)


def _torch_team() -> OpenMPTeam | None:
    """PyTorch's OpenMP team, joined when PyTorch is loaded (looked for once it is)."""
    global _may_join
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_num_threads"):
        return None
    _may_join = False
    return _team if join_openmp_team(torch.get_num_threads) else None


def pool_size() -> int:
    """The worker threads this process has made (the calling thread is not one)."""
    return _pool.size


def _after_fork_in_child() -> None:
    global _pool, _team, _may_join
    _may_join = _may_join and "torch" not in sys.modules
    _pool = Pool()
    _team = None  # GNU OpenMP's team does not survive a fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
