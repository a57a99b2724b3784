"""Settings of the calling context: the determinism switch and the default SoC.

``set_deterministic`` mirrors ``aclrtCtxSetSysParamOpt(ACL_OPT_DETERMINISTIC, v)``: level 0 is off
(the default), 1 deterministic, 2 strong consistency, 3 batch consistency (levels 2 and 3 imply 1
here). Both setters act at once and also work as context managers that restore the old value.

The settings are context-local (``contextvars``), as an ACL context's options belong to the thread that
made it current: one thread's setting, with or without ``with``, never changes another thread's calls, and
``with`` blocks in several threads restore each its own value. A thread starts from the defaults
(determinism off, ``Ascend910B2``); asyncio tasks inherit their creator's settings.
"""

from __future__ import annotations

import contextvars

import tiling

from .errors import InvalidParameterError

_settings = {"deterministic": contextvars.ContextVar("normkern_deterministic", default=0),
             "soc": contextvars.ContextVar("normkern_default_soc", default=tiling.DEFAULT_SOC)}


class _Restore:
    """Returned by the setters: ``with set_x(v): ...`` puts this context's previous value back on exit."""

    def __init__(self, var: contextvars.ContextVar, value) -> None:
        self._var, self._token = var, var.set(value)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._var.reset(self._token)


def _set(key: str, value) -> _Restore:
    return _Restore(_settings[key], value)


def check_deterministic_level(value, op: str = "set_deterministic") -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and 0 <= value <= 3:
        return value
    raise InvalidParameterError(op, "value", "must be a bool or an ACL_OPT_DETERMINISTIC level 0-3", repr(value))


def set_deterministic(value: bool | int = True) -> _Restore:
    """Turn deterministic computation on (True/1..3) or off (False/0) for every later call of this thread
    (context)."""
    return _set("deterministic", check_deterministic_level(value))


def get_deterministic() -> int:
    """The current ACL_OPT_DETERMINISTIC level (0 = off)."""
    return _settings["deterministic"].get()


def resolve_deterministic(override: bool | None, op: str) -> bool:
    if override is None:
        return _settings["deterministic"].get() > 0
    if not isinstance(override, bool):
        raise InvalidParameterError(op, "deterministic", "must be True, False or None", repr(override))
    return override


def resolve_soc(soc, op: str) -> tiling.SocSpec:
    if soc is None:
        soc = _settings["soc"].get()
    try:
        return tiling.get_soc(soc)
    except ValueError:
        raise InvalidParameterError(op, "soc", f"must be a SocSpec or one of {', '.join(tiling.soc_names())}",
                                    repr(soc)) from None


def set_default_soc(soc: str | tiling.SocSpec) -> _Restore:
    """Make ``soc`` (a name or a SocSpec) the SoC used when a call of this thread (context) names none."""
    return _set("soc", resolve_soc(soc, "set_default_soc"))


def get_default_soc() -> tiling.SocSpec:
    return resolve_soc(None, "get_default_soc")
