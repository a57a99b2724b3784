"""The calls of the public ops: a signature cache for repeated calls, and prepared calls.

A public op (``normkern.batch_norm_stats``) runs a call in two steps: ``bind`` checks every rule in the CANN
op_api order and plans, giving a ``Bound`` call (``executor.py``); the Bound runs the kernels on the call's
arrays. ``Signatures`` keeps an op's Bound calls by the signature of their arguments (every array's type,
shape, dtype, strides, writeability and aliasing, every other value, and the context's default SoC and
determinism), so a call that repeats an earlier one goes from the op's function to its Bound at the
cost of a key and a dict look-up: the checks and the plan of the first call hold for it, bit for bit.

``normkern.prepare(op, *args, **kwargs)`` binds a call once and keeps it: calling the result with new arrays
of the same shapes and dtypes checks only that they match the binding, then runs the Bound: what a training
step needs, where the same layer sees the same shapes every step.
"""

from __future__ import annotations

import inspect

import numpy as np

from .. import registry
from ..errors import InvalidParameterError
from ..kernels.dtypes import dtype_name
from .settings import DETERMINISTIC, SOC

#: Signatures an op keeps a Bound call for; past this many they are dropped and bound anew.
REPEATED_CALLS = 256


class Signatures:
    """One op's Bound calls by the signature of their arguments: what a later call must repeat to run the
    Bound of an earlier one. Every array by exact type, shape, dtype, strides, writeability and which earlier
    argument was the same array (by its first position); sequences by their items; everything else as it is
    (with its type: 1, 1.0 and True differ); then the context's default SoC and determinism."""

    def __init__(self) -> None:
        self._bound: dict = {}

    def find(self, *values):
        """(the signature of ``values``, what runs its Bound call or None); the signature is None when it
        cannot be a key (a mutable value, an ndarray subclass): such a call is bound every time."""
        try:
            key = (_describe_all(values, {}), SOC.get(), DETERMINISTIC.get())
            return key, self._bound.get(key)
        except TypeError:
            return None, None

    def keep(self, key, executor):
        """What runs the Bound call of ``executor`` (the op's ``bind`` of this call: ``Bound.entry``), kept
        under ``key``."""
        entry = executor.bound.entry
        if key is not None:
            if len(self._bound) >= REPEATED_CALLS:
                self._bound.clear()
            self._bound[key] = entry
        return entry

    def __len__(self) -> int:
        return len(self._bound)

    def clear(self) -> None:
        self._bound.clear()


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"{dtype_name(value.dtype)} array of shape {value.shape}"
    return "None" if value is None else repr(value)


class PreparedCall:
    """``normkern.<op>`` bound to the shapes, dtypes, scalars, SoC, strategy and plan of one call.

    Call it with the op's own parameters, as the op takes them (positional arguments are the fast
    path; the common keywords were fixed when it was prepared, only ``out=`` may be given): every array
    must have the bound shape and dtype, a parameter that was None must be None, every other value
    must equal the bound one. A mismatch is an InvalidParameterError naming the parameter; nothing
    has run then. The results are those of ``normkern.<op>`` on the same arguments, bit for bit.
    """

    def __init__(self, op: str, args: tuple, kwargs: dict) -> None:
        """Bind ``normkern.<op>(*args, **kwargs)`` (every check of the op; it raises as the op would)."""
        record = registry.get(op, "normkern.prepare")
        self.op = op
        self._signature = _op_signature(record.function)
        bound = self._bind(args, kwargs)
        executor = record.bind(*bound.args, **bound.kwargs)
        self._bound = executor.bound
        self._entry = executor.bound.entry
        self._fixed = {k: v for k, v in bound.arguments.items() if k in registry.COMMON_KEYWORDS and k != "out"}
        positional = [p for p in self._signature.parameters.values() if p.kind in _POSITIONAL]
        self.parameters = tuple(p.name for p in positional)
        self._defaults = tuple(p.default for p in positional)
        self._index = {name: i for i, name in enumerate(self.parameters)}
        slot_of: dict[int, tuple[int, ...]] = {}
        for i, (_, array) in enumerate(executor.tensors):
            if array is not None:
                slot_of[id(array)] = slot_of.get(id(array), ()) + (i,)
        #: The Bound's arrays where a call brings none of its own: None (a parameter that was None).
        self._template = [None] * len(executor.tensors)
        given = [bound.arguments[name] for name in self.parameters]
        out = bound.arguments.get("out")
        self._specs = tuple(_spec(name, value, slot_of) for name, value in zip(self.parameters, given, strict=True))
        self._out_spec = _spec("out", out, slot_of)
        # Parameters given the very same array (in place): a call must give them one array too, since the
        # Bound's slots cannot tell them apart. Positions in the flat list of arguments (``_flat``).
        positions: dict[int, list[int]] = {}
        for i, value in enumerate(_flat(given, out)):
            if isinstance(value, np.ndarray):
                positions.setdefault(id(value), []).append(i)
        self._aliases = tuple(tuple(p) for p in positions.values() if len(p) > 1)

    def _bind(self, args, kwargs) -> inspect.BoundArguments:
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidParameterError(self.op, "arguments", "must be the op's own", str(exc)) from None
        bound.apply_defaults()
        return bound

    @property
    def plan(self):
        """The plan every call runs."""
        return self._bound.plan

    def __repr__(self) -> str:
        return f"<PreparedCall {self.op}: {self._bound.plan}>"

    def __call__(self, *args, out=None, **kwargs):
        if kwargs or len(args) != len(self._specs):
            args = self._complete(args, kwargs)
        arrays = self._template.copy()
        for spec, value in zip(self._specs, args, strict=True):
            name, kind, bound, shape, dtype, slots = spec
            if kind is _ARRAY:  # the common case, inline
                if type(value) is not np.ndarray or value.shape != shape or value.dtype != dtype:
                    _match(self.op, spec, value, arrays)  # raises, naming the rule
                for i in slots:
                    arrays[i] = value
            elif kind is _VALUE:
                if value is not bound and (type(value) is not type(bound) or value != bound):
                    _match(self.op, spec, value, arrays)
            else:
                _match(self.op, spec, value, arrays)
        if out is not None or self._out_spec[1] is not _VALUE:
            _match(self.op, self._out_spec, out, arrays)
        if self._aliases:
            flat = _flat(args, out)
            for group in self._aliases:
                for i in group[1:]:
                    if flat[i] is not flat[group[0]]:
                        raise InvalidParameterError(self.op, self._flat_name(i), "must be the same array as "
                                                    f"{self._flat_name(group[0])}, as in the prepared call",
                                                    "another array")
        return self._entry(*arrays)

    def _flat_name(self, index: int) -> str:
        count = len(self.parameters)
        return self.parameters[index] if index < count else f"out[{index - count}]"

    def _complete(self, args, kwargs) -> tuple:
        """The op's parameters in order, from positional and keyword arguments, defaults filled: by position
        for the op's own parameters; anything else (a fixed keyword, a name given twice or unknown, one
        missing) takes ``inspect``'s binding, for its error."""
        values = [*args, *self._defaults[len(args):]]
        if len(args) <= len(self._defaults):
            for key, value in kwargs.items():
                i = self._index.get(key, -1)
                if i < len(args):
                    break
                values[i] = value
            else:
                empty = inspect.Parameter.empty
                if not any(value is empty for value in values):
                    return tuple(values)
        for key in kwargs:
            if key in self._fixed:
                raise InvalidParameterError(self.op, key, "was fixed when the call was prepared", repr(kwargs[key]))
        bound = self._bind(args, kwargs)
        return tuple(bound.arguments[name] for name in self.parameters)


_ARRAY, _ARRAYS, _VALUE = "array", "arrays", "value"

_signatures: dict = {}


def _op_signature(function) -> inspect.Signature:
    """``inspect.signature`` of an op, made once per op."""
    found = _signatures.get(function)
    if found is None:
        found = _signatures[function] = inspect.signature(function)
    return found


def _describe_all(values, seen: dict[int, int]) -> tuple:
    parts = []
    append = parts.append  # a repeated call's key is most of its fixed cost: Nones (unset options) first
    for value in values:
        if value is None:
            append(None)
            continue
        kind = type(value)
        if kind is np.ndarray:
            append((value.shape, value.dtype, value.strides, value.flags.writeable,
                    seen.setdefault(id(value), len(seen))))
        elif kind is tuple or kind is list:
            append((kind, _describe_all(value, seen)))
        elif isinstance(value, np.ndarray):
            raise TypeError("an ndarray subclass")
        else:
            append((kind, value))
    return tuple(parts)


def _spec(name, value, slot_of):
    """What a call must bring for ``name``: (name, kind, bound value, shape, dtype, the executor's slots)."""
    if isinstance(value, np.ndarray):
        return name, _ARRAY, None, value.shape, value.dtype, slot_of.get(id(value), ())
    if isinstance(value, (tuple, list)) and any(isinstance(v, np.ndarray) for v in value):
        inner = tuple(_spec(f"{name}[{i}]", v, slot_of) for i, v in enumerate(value))
        return name, _ARRAYS, None, inner, None, None
    return name, _VALUE, value, None, None, None


def _flat(args, out) -> list:
    """The arguments, then ``out``'s entries (one for a single array)."""
    return [*args, *(out if isinstance(out, (tuple, list)) else (out,))]


def _match(op: str, spec, value, arrays) -> None:
    """Check ``value`` against ``spec`` and put its arrays in their executor ``arrays`` slots."""
    name, kind, bound, shape, dtype, slots = spec
    if kind is _ARRAY:
        if type(value) is not np.ndarray or value.shape != shape or value.dtype != dtype:
            raise InvalidParameterError(op, name, f"must be a {dtype_name(dtype)} array of shape {shape} (the "
                                        "prepared call's)", _describe(value))
        for i in slots:
            arrays[i] = value
    elif kind is _ARRAYS:
        if not isinstance(value, (tuple, list)) or len(value) != len(shape):
            raise InvalidParameterError(op, name, f"must be {len(shape)} arrays (the prepared call's)",
                                        _describe(value))
        for inner, v in zip(shape, value, strict=True):
            _match(op, inner, v, arrays)
    elif value is not bound and (type(value) is not type(bound) or value != bound):
        raise InvalidParameterError(op, name, f"must be {_describe(bound)} (the prepared call's)", _describe(value))


def prepare(op: str, *args, **kwargs) -> PreparedCall:
    """``normkern.<op>(*args, **kwargs)`` checked and planned once: returns a :class:`PreparedCall`, which runs
    the op on new arrays of the same shapes and dtypes with only a match check before the kernel.

    Every rule of the op applies to this first call (it raises as the op would); the SoC, strategy and
    determinism are fixed here, and later changes of :func:`normkern.set_default_soc` or
    :func:`normkern.set_deterministic` do not reach the prepared call."""
    return PreparedCall(op, args, kwargs)
