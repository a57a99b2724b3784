"""Settings of the calling context: the determinism switch, the default SoC and the thread count.

``set_deterministic`` mirrors ``aclrtCtxSetSysParamOpt(ACL_OPT_DETERMINISTIC, v)``: level 0 is off
(the default), 1 deterministic, 2 strong consistency, 3 batch consistency (levels 2 and 3 imply 1
here). ``set_num_threads`` bounds the CPU threads a call runs on (``threads.py``). Every setter acts at once
and also works as a context manager that restores the old value.

The settings are context-local (``contextvars``), as an ACL context's options belong to the thread that
made it current: one thread's setting, with or without ``with``, never changes another thread's calls, and
``with`` blocks in several threads restore each its own value. A thread starts from the defaults
(determinism off, ``Ascend910B2``, every thread Numba has); asyncio tasks inherit their creator's settings.
"""

from __future__ import annotations

import contextvars

import numba
import numpy as np

import tiling

from ..errors import InvalidParameterError

#: The most threads a call may use: Numba's configured count (read once; the ``host`` SoC reads the same).
MAX_THREADS = max(1, int(numba.config.NUMBA_NUM_THREADS))

DETERMINISTIC = contextvars.ContextVar("normkern_deterministic", default=0)
SOC = contextvars.ContextVar("normkern_default_soc", default=tiling.DEFAULT_SOC)
#: (threads, exact): the most threads a call uses, and whether every call uses that many whatever its size.
THREADS = contextvars.ContextVar("normkern_threads", default=(MAX_THREADS, False))


class Restore:
    """Returned by the setters: ``with set_x(v): ...`` puts this context's previous value back on exit."""

    def __init__(self, var: contextvars.ContextVar, value) -> None:
        self._var, self._token = var, var.set(value)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._var.reset(self._token)


def check_deterministic_level(value, op: str = "set_deterministic") -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and 0 <= value <= 3:
        return value
    raise InvalidParameterError(op, "value", "must be a bool or an ACL_OPT_DETERMINISTIC level 0-3", repr(value))


def set_deterministic(value: bool | int = True) -> Restore:
    """Turn deterministic computation on (True/1..3) or off (False/0) for every later call of this thread
    (context)."""
    return Restore(DETERMINISTIC, check_deterministic_level(value))


def get_deterministic() -> int:
    """The current ACL_OPT_DETERMINISTIC level (0 = off)."""
    return DETERMINISTIC.get()


def resolve_deterministic(override: bool | None, op: str) -> bool:
    if override is None:
        return DETERMINISTIC.get() > 0
    if not isinstance(override, bool):
        raise InvalidParameterError(op, "deterministic", "must be True, False or None", repr(override))
    return override


def resolve_soc(soc, op: str) -> tiling.SocSpec:
    if soc is None:
        soc = SOC.get()
    try:
        return tiling.get_soc(soc)
    except ValueError:
        raise InvalidParameterError(op, "soc", f"must be a SocSpec or one of {', '.join(tiling.soc_names())}",
                                    repr(soc)) from None


def set_default_soc(soc: str | tiling.SocSpec) -> Restore:
    """Make ``soc`` (a name or a SocSpec) the SoC used when a call of this thread (context) names none."""
    return Restore(SOC, resolve_soc(soc, "set_default_soc"))


def get_default_soc() -> tiling.SocSpec:
    return resolve_soc(None, "get_default_soc")


def check_threads(value, caller: str = "set_num_threads") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= MAX_THREADS:
        raise ValueError(f"{caller}: threads must be an int in 1..{MAX_THREADS} (NUMBA_NUM_THREADS), got {value!r}")
    return int(value)


def set_num_threads(threads: int, *, exact: bool = False) -> Restore:
    """Run this thread's (context's) later calls on at most ``threads`` CPU threads (``exact``: on exactly
    ``threads``, however small the call, as the determinism checker runs them); as a context manager,
    restore the previous setting on exit."""
    return Restore(THREADS, (check_threads(threads), bool(exact)))


def get_num_threads() -> int:
    """The most CPU threads this thread's (context's) calls run on."""
    return THREADS.get()[0]
