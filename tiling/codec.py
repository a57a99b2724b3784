"""Plain-data encoding of frozen plan dataclasses (for JSON), driven by their type hints."""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from functools import cache


def to_data(value):
    """Encode dataclasses, enums, tuples and dicts as JSON-ready values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [to_data(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_data(v) for k, v in value.items()}
    return value


@cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def from_data(hint, data):
    """Decode ``data`` as the type ``hint`` (the inverse of :func:`to_data`)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if data is None:
            return None
        if len(options) != 1:
            raise TypeError(f"cannot decode ambiguous union {hint}")
        return from_data(options[0], data)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_data(args[0], v) for v in data)
        return tuple(from_data(a, v) for a, v in zip(args, data, strict=False))
    if origin is dict:
        key_type, value_type = typing.get_args(hint)
        return {key_type(k): from_data(value_type, v) for k, v in data.items()}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(data)
    if isinstance(hint, type) and issubclass(hint, Mapping) and not dataclasses.is_dataclass(hint):
        return dict(data)  # an abstract record type: the plan makes its own record of the words
    if dataclasses.is_dataclass(hint):
        hints = _hints(hint)
        kwargs = {f.name: from_data(hints[f.name], data[f.name]) for f in dataclasses.fields(hint) if f.init}
        return hint(**kwargs)
    if hint is float and isinstance(data, int):
        return float(data)
    if hint in (int, str, bool, float):
        if not isinstance(data, hint) or (hint is int and isinstance(data, bool)):
            raise TypeError(f"expected {hint.__name__}, got {data!r}")
        return data
    raise TypeError(f"cannot decode type {hint}")
