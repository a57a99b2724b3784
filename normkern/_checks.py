"""Boundary checks shared by every op; each raises a NormkernError naming op, parameter and rule."""

from __future__ import annotations

import enum
import numbers

import numpy as np

from .errors import InvalidParameterError


def check_array(op: str, name: str, value) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise InvalidParameterError(op, name, "must be a numpy.ndarray", type(value).__name__)
    return value


def check_real(op: str, name: str, value) -> float:
    if type(value) is float:  # the common case, without the slower ABC check
        return value
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise InvalidParameterError(op, name, "must be a real number", repr(value))
    return float(value)


def parse_strategy(op: str, strategy_enum: type[enum.Enum], strategy):
    """An op's strategy Enum from the Enum itself, its name, or None (the planner chooses)."""
    if strategy is None or isinstance(strategy, strategy_enum):
        return strategy
    try:
        return strategy_enum(strategy)
    except ValueError:
        names = ", ".join(s.value for s in strategy_enum)
        raise InvalidParameterError(op, "strategy", f"must be one of {names}", repr(strategy)) from None
