"""Process-wide settings: the determinism switch and the default SoC.

``set_deterministic`` mirrors ``aclrtCtxSetSysParamOpt(ACL_OPT_DETERMINISTIC, v)``: level 0 is off
(the default), 1 deterministic, 2 strong consistency, 3 batch consistency (levels 2 and 3 imply 1
here). Both setters act at once and also work as context managers that restore the old value.
"""

from __future__ import annotations

import threading

import tiling

from .errors import InvalidParameterError

_lock = threading.Lock()
_state: dict = {"deterministic": 0, "soc": tiling.DEFAULT_SOC}


class _Restore:
    """Returned by the setters: ``with set_x(v): ...`` puts the previous value back on exit."""

    def __init__(self, key: str, previous) -> None:
        self._key, self._previous = key, previous

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        with _lock:
            _state[self._key] = self._previous


def _set(key: str, value) -> _Restore:
    with _lock:
        previous = _state[key]
        _state[key] = value
    return _Restore(key, previous)


def check_deterministic_level(value, op: str = "set_deterministic") -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and 0 <= value <= 3:
        return value
    raise InvalidParameterError(op, "value", "must be a bool or an ACL_OPT_DETERMINISTIC level 0-3", repr(value))


def set_deterministic(value: bool | int = True) -> _Restore:
    """Turn deterministic computation on (True/1..3) or off (False/0) for every later call."""
    return _set("deterministic", check_deterministic_level(value))


def get_deterministic() -> int:
    """The current ACL_OPT_DETERMINISTIC level (0 = off)."""
    return _state["deterministic"]


def resolve_deterministic(override: bool | None, op: str) -> bool:
    if override is None:
        return _state["deterministic"] > 0
    if not isinstance(override, bool):
        raise InvalidParameterError(op, "deterministic", "must be True, False or None", repr(override))
    return override


def resolve_soc(soc, op: str) -> tiling.SocSpec:
    if soc is None:
        soc = _state["soc"]
    try:
        return tiling.get_soc(soc)
    except ValueError:
        raise InvalidParameterError(op, "soc", f"must be a SocSpec or one of {', '.join(tiling.soc_names())}",
                                    repr(soc)) from None


def set_default_soc(soc: str | tiling.SocSpec) -> _Restore:
    """Make ``soc`` (a name or a SocSpec) the SoC used when a call names none."""
    return _set("soc", resolve_soc(soc, "set_default_soc"))


def get_default_soc() -> tiling.SocSpec:
    return resolve_soc(None, "get_default_soc")
