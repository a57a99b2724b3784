"""Memory formats: the arrays the kernels read, and the layouts torch.nn's layers give their results.

The kernels take a contiguous array with the channel on axis 1: a contiguous tensor is passed as it is, any
other (channels_last, transposed, sliced) is copied to contiguous first, as CANN's ``Contiguous`` does (the
kernels' per-channel sums stride badly over a channels_last tensor read in place: docs/performance.md).
The results then take the layouts torch.nn gives:

- an output follows the input's suggested memory format (ATen's ``suggest_memory_format``): channels_last for a
  4-D input whose strides put the channels innermost, channels_last_3d for a 5-D one, else contiguous;
- an input gradient has the input's own strides (``empty_like``), whatever the output gradient's layout.
"""

from __future__ import annotations

import torch

#: The ranks the kernels take; a longer input is viewed as (N, C, the rest flattened).
MAX_RANK = 8


def contiguous(x: torch.Tensor) -> torch.Tensor:
    """``x`` contiguous (``x`` itself when it is), of at most the kernels' rank (the trailing axes flattened)."""
    x = x.contiguous()
    return x.view(*x.shape[:2], -1) if x.dim() > MAX_RANK else x


def suggested_format(x: torch.Tensor) -> torch.memory_format:
    """ATen's ``suggest_memory_format`` of ``x``, which torch's norm kernels give their outputs."""
    if x.dim() in (4, 5) and not x.is_contiguous():
        channels_last = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        # a non-dense tensor's empty_like follows its suggested format (a dense one keeps its own strides)
        if x.is_contiguous(memory_format=channels_last) or \
                torch.empty_like(x).is_contiguous(memory_format=channels_last):
            return channels_last
    return torch.contiguous_format


def as_output(y: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``y``, computed on ``contiguous(like)``, with ``like``'s shape in the layout torch.nn gives a norm layer's
    output."""
    if y.shape != like.shape:
        y = y.view(like.shape)
    return y if like.is_contiguous() else y.contiguous(memory_format=suggested_format(like))


def as_input_grad(grad: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``grad``, computed on ``contiguous(like)``, with ``like``'s shape and strides."""
    if grad.shape != like.shape:
        grad = grad.view(like.shape)
    if grad.stride() == like.stride():
        return grad
    if all(mine == theirs for mine, theirs, size in zip(grad.stride(), like.stride(), like.shape, strict=True)
           if size > 1):
        # the same memory order, strides differing only on axes of size 1: the same view with like's strides
        return grad.as_strided(like.shape, like.stride(), grad.storage_offset())
    return torch.empty_like(like).copy_(grad)
