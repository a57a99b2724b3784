"""Boundary checks shared by every op; each raises a NormkernError naming op, parameter and rule."""

from __future__ import annotations

import enum
import numbers

import numpy as np

import tiling

from ..errors import DeterminismError, InvalidParameterError, NullPointerError, TilingError, UnsupportedError
from ..kernels.dtypes import dtype_name


def check_array(op: str, name: str, value) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise InvalidParameterError(op, name, "must be a numpy.ndarray", type(value).__name__)
    if not value.dtype.isnative:
        raise InvalidParameterError(op, name, "must be in the machine's byte order (a.astype(a.dtype.newbyteorder("
                                    "'=')))", f"dtype {value.dtype.str}")
    if isinstance(value, np.ma.MaskedArray):
        raise InvalidParameterError(op, name, "must be a plain numpy.ndarray (a masked array's mask would be "
                                    "ignored)", "numpy.ma.MaskedArray")
    return value


def check_real(op: str, name: str, value) -> float:
    if type(value) is float:  # the common case, without the slower ABC check
        return value
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise InvalidParameterError(op, name, "must be a real number", repr(value))
    return float(value)


def is_int(value) -> bool:
    """An integer that is not a bool (``True`` is an ``Integral`` in Python)."""
    if type(value) is int:  # the common case, without the slower ABC check
        return True
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(op: str, name: str, value, rule: str = "must be an int") -> int:
    if not is_int(value):
        raise InvalidParameterError(op, name, rule, repr(value))
    return int(value)


def check_arrival_seed(op: str, seed) -> None:
    """``arrival_seed``: None (a fresh arrival order per call) or a non-negative int that replays one."""
    if seed is not None and (not is_int(seed) or seed < 0):
        raise InvalidParameterError(op, "arrival_seed", "must be a non-negative int or None", repr(seed))


def parse_strategy(op: str, strategy_enum: type[enum.Enum], strategy):
    """An op's strategy Enum from the Enum itself, its value, or None (the planner chooses)."""
    try:
        return tiling.parse_strategy(op, strategy_enum, strategy)
    except tiling.UnknownStrategyError as exc:
        raise InvalidParameterError(op, "strategy", f"must be one of {exc.names}", repr(strategy)) from None


def check_not_null(op: str, named: tuple[tuple[str, object], ...], error=NullPointerError) -> None:
    """ACLNN_ERR_PARAM_NULLPTR (or ``error``, where the op_api maps a null to another code) for the first
    required tensor that is None."""
    for name, value in named:
        if value is None:
            raise error(op, name, "must not be None (null pointer)", None)


def check_dtypes(op: str, spec, entry: tiling.Support, named: tuple[tuple[str, object], ...]) -> None:
    """Every given tensor is a numpy array of a dtype the product table allows on ``spec``."""
    for name, value in named:
        if value is not None and dtype_name(check_array(op, name, value).dtype) not in entry.dtypes:
            raise InvalidParameterError(op, name, f"dtype must be one of {', '.join(entry.dtypes)} on {spec.name}",
                                        dtype_name(value.dtype))


def check_stats_dtypes(op: str, spec, entry: tiling.Support, data_dtype: str,
                       named: tuple[tuple[str, object], ...]) -> str:
    """The per-channel tensors share one dtype: the data's, or float32 beside half data where the table
    allows mixing (``entry.mixed``). Returns that dtype."""
    present = [(name, value) for name, value in named if value is not None]
    stats = dtype_name(present[0][1].dtype) if present else data_dtype
    for name, value in present:
        got = dtype_name(value.dtype)
        if got != stats:
            raise InvalidParameterError(op, name, f"dtype must equal {present[0][0]}'s ({stats})", got)
    if stats != data_dtype and not (entry.mixed and stats == "float32"):
        rule = f"the data's ({data_dtype}) or float32" if entry.mixed else f"the data's ({data_dtype})"
        raise InvalidParameterError(op, present[0][0], f"dtype must be {rule} on {spec.name}", stats)
    return stats


def check_supported(op: str, spec) -> tiling.Support:
    """The support table's entry for ``op`` on ``spec``; 561003 when CANN has no kernel there."""
    entry = tiling.support(op, spec)
    if not entry.dtypes:
        raise UnsupportedError(op, "soc", f"must support {tiling.ACLNN_NAMES[op]} (CANN has no kernel for "
                               f"{spec.product})", spec.name)
    return entry


def check_rank(op: str, name: str, x: np.ndarray, low: int = 2, high: int = 8) -> None:
    if not low <= x.ndim <= high:
        raise InvalidParameterError(op, name, f"must have rank {low} to {high}", f"rank {x.ndim} (shape {x.shape})")


def check_channel_vector(op: str, name: str, value, channels: int, written: bool = True) -> None:
    """A (C,) tensor: the shape rule, then, for one the op writes, writeability."""
    if value is None:
        return
    if value.shape != (channels,):
        raise InvalidParameterError(op, name, f"shape must be (C,) = ({channels},)", value.shape)
    if written and not value.flags.writeable:
        raise InvalidParameterError(op, name, "must be writeable", "a read-only array")


def shares_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays share a byte: bounds first (cheap), the exact answer only when they meet."""
    if not np.may_share_memory(a, b):  # disjoint bounds: the common case, and cheap
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=100_000))
    except np.exceptions.TooHardError:  # too intricate to decide: take it as overlapping
        return True


def own_their_memory(arrays: list) -> bool:
    """True when each array is a distinct object that owns its memory (no view of another): such
    arrays are separate allocations and cannot overlap, which settles the usual call in well under a
    microsecond, where the pairwise tests cost several."""
    return all(a.base is None for a in arrays) and len({id(a) for a in arrays}) == len(arrays)


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.shape == b.shape
            and a.strides == b.strides and a.dtype == b.dtype)


def check_overlaps(op: str, outputs: tuple[tuple[str, object], ...],
                   tensors: tuple[tuple[str, object], ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Outputs must not share memory with one another, and an output may share memory with one of the
    input ``tensors`` only by being that very array (same memory, shape, strides and dtype): the
    kernels read each element of an input before they write the same element of an output in place,
    but a shifted or reshaped overlap would be overwritten before it is read. (The small per-channel
    inputs are copied before the kernel runs, so they may overlap anything.)

    Returns the rule as names: the outputs checked, and the tensors they were checked against (an
    executor keeps it, to check the arrays a prepared call brings)."""
    live = [(name, a) for name, a in outputs if a is not None]
    rule = tuple(name for name, _ in live), tuple(name for name, b in tensors if b is not None)
    if own_their_memory([a for _, a in live] + [b for _, b in tensors if b is not None]):
        return rule
    for i, (name, a) in enumerate(live):
        for other, b in live[i + 1:]:
            if shares_memory(a, b):
                raise InvalidParameterError(op, name, f"must not share memory with {other}", "overlapping arrays")
        for other, b in tensors:
            if b is not None and shares_memory(a, b) and not _same_view(a, b):
                raise InvalidParameterError(op, name, f"must be {other} itself (in place) or not share memory with "
                                                      "it", "a partly overlapping array")
    return rule


def unpack_out(op: str, out, names: str) -> tuple:
    """``out=`` of the Pythonic layer: None (one None per name), or one preallocated array per name."""
    count = len(names.split(","))
    if out is None:
        return (None,) * count
    if not isinstance(out, (tuple, list)) or len(out) != count:
        kind = {2: "pair", 3: "triple"}.get(count, f"{count}-tuple")
        raise InvalidParameterError(op, "out", f"must be a ({names}) {kind} of arrays", repr(type(out)))
    return tuple(out)


def check_output_mask(op: str, value, names: tuple[str, str, str], *, missing=NullPointerError,
                      empty_is_null: bool = False) -> tuple[bool, bool, bool]:
    """An aclBoolArray outputMask: three bools. ``missing`` is the error a null mask raises (the ops map
    it to different codes); ``empty_is_null`` treats a zero-length mask as null, as CheckMaskNotNull of
    FastBatchNormBackward does."""
    if type(value) is tuple and len(value) == 3 and all(type(e) is bool for e in value):
        return value  # the common case, already three Python bools
    if value is None:
        raise missing(op, "outputMask", "must not be None (null pointer)", None)
    try:
        entries = tuple(value)
    except TypeError:
        raise InvalidParameterError(op, "outputMask", "must be a sequence of 3 bools", repr(value)) from None
    if empty_is_null and not entries:
        raise missing(op, "outputMask", "must have at least 1 entry (size < 1 is a null array)", "size 0")
    if len(entries) != 3 or not all(isinstance(e, (bool, np.bool_)) for e in entries):
        raise InvalidParameterError(op, "outputMask", f"must be 3 bools ({', '.join(names)})", repr(value))
    return tuple(bool(e) for e in entries)


def planned(op: str, planner, deterministic: bool = False, what: str | None = None):
    """``planner()``'s plan; a planner's refusal as normkern's TilingError (561002), and a plan that cannot
    be deterministic while ``deterministic`` is asked for as a DeterminismError saying ``what`` it adds
    in arrival order (default: its cores level's partials)."""
    try:
        plan = planner()
    except tiling.TilingError as exc:
        raise TilingError(op, str(exc)) from exc
    if deterministic and not plan.deterministic:
        what = what or f"{plan.tree.level('cores').fan_in} core partials"
        raise DeterminismError(op, "strategy", f"cannot be used while determinism is on: it adds {what} in "
                               "arrival order", repr(plan.strategy.value))
    return plan
