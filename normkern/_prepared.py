"""Prepared calls: an op's checks and plan done once, for the calls that repeat the same shapes.

``normkern.prepare(op, *args, **kwargs)`` checks a call as the op would (every rule, the plan, the SoC and
the settings of that moment) and keeps the executor. Calling the result with new arrays of the same shapes
and dtypes checks only that they match the binding, then runs the kernel: what a training step needs,
where the same layer sees the same shapes every step.
"""

from __future__ import annotations

import inspect

import numpy as np

from . import _registry
from ._checks import check_overlaps
from ._dtypes import dtype_name
from .errors import InvalidParameterError

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

    def __init__(self, op: str, args: tuple, kwargs: dict, *, function=None, executor=None) -> None:
        """``function`` is the op (default: the registry's ``normkern.<op>``); ``executor``, when given, is the
        one ``function.bind`` returned for these very arguments (the op's own first call), not made again."""
        function = function or _registry.get(op, "normkern.prepare").function
        self.op = op
        self._signature = _op_signature(function)
        bound = self._bind(args, kwargs)
        self._executor = executor or function.bind(*bound.args, **bound.kwargs)
        self._fixed = {k: v for k, v in bound.arguments.items() if k in _registry.COMMON_KEYWORDS and k != "out"}
        positional = [p for p in self._signature.parameters.values() if p.kind in _POSITIONAL]
        self.parameters = tuple(p.name for p in positional)
        self._defaults = tuple(p.default for p in positional)
        slot_of: dict[int, tuple[int, ...]] = {}
        for i, (_, array) in enumerate(self._executor.tensors):
            if array is not None:
                slot_of[id(array)] = slot_of.get(id(array), ()) + (i,)
        self._template = [array for _, array in self._executor.tensors]
        given = [bound.arguments[name] for name in self.parameters]
        out = bound.arguments.get("out")
        self._specs = tuple(_spec(name, value, slot_of) for name, value in zip(self.parameters, given, strict=True))
        self._out_spec = _spec("out", out, slot_of)
        # Parameters given the very same array (in place): a call must give them one array too, since the
        # executor's slots cannot tell them apart. Positions in the flat list of arguments (``_flat``).
        positions: dict[int, list[int]] = {}
        for i, value in enumerate(_flat(given, out)):
            if isinstance(value, np.ndarray):
                positions.setdefault(id(value), []).append(i)
        self._aliases = tuple(tuple(p) for p in positions.values() if len(p) > 1)
        #: The executor slots of each array of the call, in the order ``_arrays_in`` walks them; None when one
        #: of its arrays is not bound as itself (then only the checked ``__call__`` can run it).
        repeat_slots = tuple(slot_of.get(id(a), ()) for a in _arrays_in((*args, *kwargs.values())))
        self._repeat_slots = None if () in repeat_slots else repeat_slots
        names = [name for name, _ in self._executor.tensors]
        written, read = self._executor.overlaps
        self._overlaps = (tuple((n, names.index(n)) for n in written), tuple((n, names.index(n)) for n in read))

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
        return self._executor.plan

    def __repr__(self) -> str:
        return f"<PreparedCall {self.op}: {self._executor.plan}>"

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
        return self._run(arrays)

    def repeat(self, args: tuple, kwargs: dict):
        """Run on the arrays of a call whose ``call_key`` equals the prepared call's (every shape, dtype,
        stride, alias and value the match checks is then the same): only the op's overlap rule is checked."""
        arrays = self._template.copy()
        for array, slots in zip(_arrays_in((*args, *kwargs.values())), self._repeat_slots, strict=True):
            for i in slots:
                arrays[i] = array
        return self._run(arrays)

    def _run(self, arrays: list):
        written, read = self._overlaps
        if written:  # outputs of the caller's: the op's own overlap rule, on this call's arrays
            check_overlaps(self.op, tuple((n, arrays[i]) for n, i in written), tuple((n, arrays[i]) for n, i in read))
        return self._executor.run_with(arrays)

    @property
    def repeatable(self) -> bool:
        """Whether :meth:`repeat` can run it (every array of the call is bound as itself)."""
        return self._repeat_slots is not None

    def _flat_name(self, index: int) -> str:
        count = len(self.parameters)
        return self.parameters[index] if index < count else f"out[{index - count}]"

    def _complete(self, args, kwargs) -> tuple:
        """The op's parameters in order, from positional and keyword arguments, defaults filled."""
        empty = inspect.Parameter.empty
        if not kwargs and len(args) < len(self._defaults) and empty not in self._defaults[len(args):]:
            return args + self._defaults[len(args):]
        for key in kwargs:
            if key in self._fixed:
                raise InvalidParameterError(self.op, key, "was fixed when the call was prepared", repr(kwargs[key]))
        bound = self._bind(args, kwargs)
        return tuple(bound.arguments[name] for name in self.parameters)


_ARRAY, _ARRAYS, _VALUE = "array", "arrays", "value"

_signatures: dict = {}


def _op_signature(function) -> inspect.Signature:
    """``inspect.signature`` of an op, made once per op."""
    signature = _signatures.get(function)
    if signature is None:
        signature = _signatures[function] = inspect.signature(function)
    return signature


def call_key(args, kwargs):
    """What a later call must repeat to run as a prepared call of this one: every array by exact type, shape,
    dtype, strides, writeability and which earlier argument was the same array (by its first position);
    sequences by their items; everything else as it is. None when a value cannot be a key (a mutable one)."""
    seen: dict[int, int] = {}
    try:
        key = (_describe_all(args, seen), _describe_all(kwargs.values(), seen), tuple(kwargs))
        hash(key)
    except TypeError:
        return None
    return key


def _arrays_in(values):
    """The arrays among ``values`` and inside their tuples and lists, in order."""
    for value in values:
        if type(value) is np.ndarray:
            yield value
        elif type(value) is tuple or type(value) is list:
            yield from _arrays_in(value)


def _describe_all(values, seen: dict[int, int]) -> tuple:
    parts = []
    for value in values:
        kind = type(value)
        if kind is np.ndarray:
            parts.append((value.shape, value.dtype, value.strides, value.flags.writeable,
                          seen.setdefault(id(value), len(seen))))
        elif kind is tuple or kind is list:
            parts.append((kind, _describe_all(value, seen)))
        elif isinstance(value, np.ndarray):  # a subclass: no prepared call
            raise TypeError("an ndarray subclass")
        else:
            parts.append((kind, value))
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
