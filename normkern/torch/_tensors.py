"""Tensors in and out: every registered op on ``torch.Tensor`` arguments, without copies where the layout allows.

A CPU tensor becomes a NumPy view of its own storage (``Tensor.numpy()``; bfloat16 through an int16 view,
since NumPy has no bfloat16 of its own), so the kernels read the tensor's memory and write an ``out=``
tensor's memory in place. New outputs come back as tensors over the kernel's own arrays
(``torch.from_numpy``): no copy either way. A strided tensor (channels_last, a slice) is a strided view;
the op copies it to a contiguous array first, as CANN's ``Contiguous`` does (the cost: one extra read and
write of the tensor).
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from .. import _registry
from .._config import get_default_soc, get_deterministic
from .._dtypes import bfloat16
from .._prepared import PreparedCall, prepare
from ..errors import InvalidParameterError


def to_numpy(value, op: str = "normkern.torch", name: str = "tensor"):
    """A CPU tensor as a NumPy view of its storage (detached; bfloat16 as ``ml_dtypes.bfloat16``); anything
    else unchanged."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.device.type != "cpu":
        raise InvalidParameterError(op, name, "must be a CPU tensor", f"a tensor on {value.device}")
    value = value.detach()
    if value.is_conj() or value.is_neg():
        value = value.resolve_conj().resolve_neg()
    if value.dtype == torch.bfloat16:
        return value.view(torch.int16).numpy().view(bfloat16())  # ml_dtypes imported on first use
    return value.numpy()


def to_tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor over ``array``'s memory (bfloat16 arrays as ``torch.bfloat16``)."""
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def _convert_in(value, op, name, originals, outputs=False):
    if isinstance(value, torch.Tensor):
        if not outputs and value.dim() >= 2:
            value = value.contiguous()  # the tensor itself when it already is
        array = to_numpy(value, op, name)
        originals[id(array)] = value
        return array
    if isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in value):
        return type(value)(_convert_in(v, op, name, originals, outputs) for v in value)
    return value


def _convert_out(value, originals):
    if isinstance(value, np.ndarray):
        original = originals.get(id(value))
        return original if original is not None else to_tensor(value)
    if isinstance(value, tuple):
        return tuple(_convert_out(v, originals) for v in value)
    return value


def tensor_op(op: str, prepared: bool = False):
    """``normkern.<op>`` on tensors: tensor arguments as views, outputs as tensors; an ``out=`` tensor (or
    an updated running statistic) is returned as the very tensor passed.

    ``prepared``: keep a prepared call (``normkern.prepare``) per call signature that repeats (shapes, dtypes,
    the other arguments, the settings), as a layer that sees the same shapes every step wants: its checks and
    plan are then done once, and each later call only matches its arrays to them."""
    record = _registry.get(op, "normkern.torch")
    calls: dict[tuple, PreparedCall] = {}
    once: set[tuple] = set()

    def run(np_args, np_kwargs):
        if not prepared:
            return record.function(*np_args, **np_kwargs)
        seen: dict[int, int] = {}
        key = (_signature(np_args, seen), _signature(tuple(np_kwargs.items()), seen), get_default_soc(),
               get_deterministic())
        call = calls.get(key)
        if call is None:
            if key not in once:  # prepared only once it repeats (a changing momentum=None factor never does)
                if len(once) >= PREPARED_CALLS:
                    once.clear()
                once.add(key)
                return record.function(*np_args, **np_kwargs)
            if len(calls) >= PREPARED_CALLS:
                calls.clear()
            call = calls[key] = prepare(op, *np_args, **np_kwargs)
        own = {k: v for k, v in np_kwargs.items() if k not in _registry.COMMON_KEYWORDS or k == "out"}
        return call(*np_args, **own) if own else call(*np_args)

    @functools.wraps(record.function)
    def call(*args, **kwargs):
        originals: dict[int, torch.Tensor] = {}
        np_args = [_convert_in(a, op, f"argument {i}", originals) for i, a in enumerate(args)]
        np_kwargs = {k: _convert_in(v, op, k, originals, outputs=k == "out") for k, v in kwargs.items()}
        return _convert_out(run(np_args, np_kwargs), originals)

    call.__doc__ = f"``normkern.{op}`` on CPU tensors (any dtype it takes; bfloat16 included).\n\n" + (
        record.function.__doc__ or "")
    return call


#: Prepared calls a layer op keeps (one per call signature); past this many they are dropped and made anew.
PREPARED_CALLS = 256


def _signature(values, seen: dict[int, int]) -> tuple:
    """A hashable description of arguments: arrays by shape, dtype and which earlier argument was the same
    array (``seen``: its first position), sequences by their items, the rest as they are."""
    parts = []
    for value in values:
        if isinstance(value, np.ndarray):
            parts.append((value.shape, value.dtype, seen.setdefault(id(value), len(seen))))
        elif isinstance(value, (tuple, list)):
            parts.append(_signature(value, seen))
        else:
            parts.append(value)
    return tuple(parts)
