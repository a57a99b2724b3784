"""``GroupNorm``: ``torch.nn.GroupNorm`` whose backward is normkern's ``group_norm_backward``.

The forward is PyTorch's ``native_group_norm`` (it returns the per-(N, group) mean and rstd the backward
needs), on the input in its suggested memory format as ``torch.nn.functional.group_norm`` gives it; the
backward runs normkern's kernel on the host plan (or ``soc``'s) over the input made contiguous, and returns the
input gradient in the input's own layout. Every call passes ``_contract``'s checks (torch.nn's) first; an empty
input and a torch.func transform are answered by ``torch.nn.functional.group_norm`` itself, and a backward that
builds a graph differentiates torch's formulas (``_autograd``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import _contract, _layout
from ._autograd import differentiable_backward
from ._tensors import tensor_op

_group_norm_backward = tensor_op("group_norm_backward")


class _GroupNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, groups, eps, soc):
        n, c = input.shape[:2]
        hxw = math.prod(input.shape[2:])
        x = input.contiguous(memory_format=_layout.suggested_format(input))
        output, mean, rstd = torch.native_group_norm(
            x, None if weight is None else weight.contiguous(), None if bias is None else bias.contiguous(),
            n, c, hxw, groups, eps)
        ctx.save_for_backward(input, weight, bias, mean, rstd)
        ctx.shape, ctx.eps, ctx.soc = (n, c, hxw, groups), eps, soc
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias, mean, rstd = ctx.saved_tensors
        n, c, hxw, groups = ctx.shape
        if torch.is_grad_enabled():
            eps = ctx.eps
            grads = differentiable_backward(ctx, grad_output, lambda x, w, b: F.group_norm(x, groups, w, b, eps),
                                            (input, weight, bias))
            return (*grads, None, None, None)
        need = ctx.needs_input_grad
        mask = (bool(need[0]), bool(need[1]) and weight is not None, bool(need[2]) and bias is not None)
        gamma = None if weight is None else weight.detach().to(mean.dtype)
        grad_input, grad_gamma, grad_beta = _group_norm_backward(
            _layout.contiguous(grad_output), _layout.contiguous(input), mean, rstd, gamma, n, c, hxw,
            groups, mask, soc=ctx.soc)
        if grad_input is not None:
            grad_input = _layout.as_input_grad(grad_input, input)
        if weight is not None:
            grad_gamma = None if grad_gamma is None else grad_gamma.to(weight.dtype)
            grad_beta = None if grad_beta is None else grad_beta.to(weight.dtype)
        return grad_input, grad_gamma, grad_beta, None, None, None


class GroupNorm(nn.GroupNorm):
    """A drop-in for ``torch.nn.GroupNorm`` (same parameters, ``bias=`` included, state dict and checks) with
    normkern's backward."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, *, bias: bool = True, soc="host") -> None:
        super().__init__(num_groups, num_channels, eps, affine, device=device, dtype=dtype, bias=bias)
        self.soc = soc

    @torch.compiler.disable
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if _contract.group_norm(self, input):
            return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)
        return _GroupNormFunction.apply(input, self.weight, self.bias, self.num_groups, self.eps, self.soc)
