"""Kernel calls in a process forked after a kernel ran (a PyTorch DataLoader's workers, ``multiprocessing`` with
fork).

Numba's OpenMP threading layer cannot run in a child forked after the parent used it: the child's first
parallel call is killed ("fork() called from a process already using GNU OpenMP, this is unsafe"). The other
layers cost too much here (workqueue is slower on every call, docs/reliability.md has the figures; TBB is not
one of normkern's dependencies). So the parent keeps OpenMP, and a child forked
after it ran swaps each parallel kernel for a serial twin of the same function: ``prange`` runs as ``range``
over the same per-core shares, so the results are the same bits, on one thread. A twin compiles the first
time a child calls it and is cached beside its kernel under a key of its own.
"""

from __future__ import annotations

import os
import sys

import numba
import numba.np.ufunc.parallel as _parallel
from numba.core.dispatcher import Dispatcher

from . import _cache


def _omp_in_use() -> bool:
    if not _parallel._is_initialized:
        return False
    try:
        return numba.threading_layer() == "omp"
    except ValueError:
        return False


if _cache.internals_present():
    class SerialTwinCache(_cache.HelperKeyedCache):
        """The helper-keyed cache of a serial twin: its index entries are apart from its kernel's."""

        def _index_key(self, sig, codegen):
            return (*super()._index_key(sig, codegen), "serial")


def serial_twin(kernel: Dispatcher) -> Dispatcher:
    """``kernel`` compiled without ``parallel`` (its ``prange`` loops run in order), cached apart."""
    options = {k: v for k, v in kernel.targetoptions.items() if k not in ("parallel", "cache", "nopython")}
    twin = numba.njit(cache=True, **options)(kernel.py_func)
    if _cache.internals_present():
        twin._cache = SerialTwinCache(kernel.py_func)
    return twin


def _swap_in_child() -> None:
    if not _omp_in_use():
        return
    for name, module in list(sys.modules.items()):
        if not (name.startswith("normkern.ops.") and name.endswith(".kernel")):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, Dispatcher) and value.targetoptions.get("parallel"):
                setattr(module, attr, serial_twin(value))


def install() -> None:
    """Register the swap for every fork of this process (normkern does it at import)."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_swap_in_child)
