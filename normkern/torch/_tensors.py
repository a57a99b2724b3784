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

from .. import registry
from ..errors import InvalidParameterError
from ..kernels.dtypes import bfloat16


def to_numpy(value, op: str = "normkern.torch", name: str = "tensor"):
    """A CPU tensor as a NumPy view of its storage (detached; bfloat16 as ``ml_dtypes.bfloat16``); anything
    else unchanged. ``name`` (an int: a positional argument's position) names the tensor in an error."""
    if not isinstance(value, torch.Tensor):
        return value
    try:  # a plain CPU tensor; numpy() refuses the others (conj or neg bit, bfloat16, another device)
        return (value.detach() if value.requires_grad else value).numpy()
    except (RuntimeError, TypeError):
        pass
    if not value.is_cpu:
        raise InvalidParameterError(op, name if isinstance(name, str) else f"argument {name}", "must be a CPU tensor",
                                    f"a tensor on {value.device}")
    if value.requires_grad:
        value = value.detach()
    if value.is_conj() or value.is_neg():
        value = value.resolve_conj().resolve_neg()
    if value.dtype == torch.bfloat16:
        return value.view(torch.int16).numpy().view(bfloat16())  # ml_dtypes imported on first use
    return value.numpy()


def to_tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor over ``array``'s memory (bfloat16 arrays as ``torch.bfloat16``)."""
    try:
        return torch.from_numpy(array)
    except TypeError:  # ml_dtypes' bfloat16, the one dtype an op returns that torch.from_numpy refuses
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)


#: Argument types that pass through unchanged (the scalars and flags the ops take).
_PLAIN = frozenset((float, int, bool, str, type(None)))


def _convert_in(value, op, name, originals, outputs=False):
    """``value`` with its tensors as arrays, each remembered in ``originals``; ``name`` is the parameter's
    name, or an int: the position of a positional argument (its name made only for an error)."""
    if isinstance(value, torch.Tensor):
        if not outputs and not value.is_contiguous() and value.dim() >= 2:
            value = value.contiguous()  # a strided vector stays a view: the op may update it in place
        array = to_numpy(value, op, name)
        originals[id(array)] = value
        return array
    if isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in value):
        return type(value)(_convert_in(v, op, name, originals, outputs) for v in value)
    return value


def _convert_out(value, originals):
    """The op's result with its arrays as tensors: the tensor an array came from, else a new one over it."""
    if type(value) is tuple:
        results = []
        for v in value:
            if type(v) is np.ndarray:
                original = originals.get(id(v))
                v = original if original is not None else to_tensor(v)
            results.append(v)
        return tuple(results)
    if type(value) is np.ndarray:
        original = originals.get(id(value))
        return original if original is not None else to_tensor(value)
    return value


def tensor_op(op: str):
    """``normkern.<op>`` on tensors: tensor arguments as views, outputs as tensors; an ``out=`` tensor (or
    an updated running statistic) is returned as the very tensor passed. A call that repeats an earlier
    call's signature takes the op's signature cache (``normkern.runtime.calls``), as on arrays."""
    function = registry.get(op, "normkern.torch").function

    @functools.wraps(function)
    def call(*args, **kwargs):
        originals: dict[int, torch.Tensor] = {}
        arrays = []
        for i, a in enumerate(args):  # a plain contiguous tensor, the common argument, converted here
            if type(a) is torch.Tensor and not a.requires_grad and a.is_contiguous():
                try:
                    array = a.numpy()
                except (RuntimeError, TypeError):  # bfloat16, conj/neg bits, not on the CPU: to_numpy's cases
                    array = _convert_in(a, op, i, originals)
                else:
                    originals[id(array)] = a
                arrays.append(array)
            else:
                arrays.append(a if type(a) in _PLAIN else _convert_in(a, op, i, originals))
        for k, v in kwargs.items():
            if type(v) not in _PLAIN:
                kwargs[k] = _convert_in(v, op, k, originals, outputs=k == "out")
        return _convert_out(function(*arrays, **kwargs), originals)

    call.__doc__ = f"``normkern.{op}`` on CPU tensors (any dtype it takes; bfloat16 included).\n\n" + (
        function.__doc__ or "")
    return call
