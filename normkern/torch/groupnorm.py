"""``GroupNorm``: ``torch.nn.GroupNorm`` whose backward is normkern's ``group_norm_backward``.

The forward is PyTorch's ``native_group_norm`` (it returns the per-(N, group) mean and rstd the backward
needs); the backward runs normkern's kernel on the host plan (or ``soc``'s).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._tensors import tensor_op

_group_norm_backward = tensor_op("group_norm_backward", prepared=True)


class _GroupNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, groups, eps, soc):
        input = input.contiguous()  # NCHW order for the kernels (no copy when it already is)
        n, c = input.shape[:2]
        hxw = math.prod(input.shape[2:])
        output, mean, rstd = torch.native_group_norm(input, weight, bias, n, c, hxw, groups, eps)
        ctx.save_for_backward(input, weight, mean, rstd)
        ctx.shape, ctx.soc = (n, c, hxw, groups), soc
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, mean, rstd = ctx.saved_tensors
        n, c, hxw, groups = ctx.shape
        need = ctx.needs_input_grad
        mask = (bool(need[0]), bool(need[1]) and weight is not None, bool(need[2]) and weight is not None)
        grad_output = grad_output.contiguous()
        gamma = None if weight is None else weight.detach().to(mean.dtype)
        grads = _group_norm_backward(grad_output, input, mean, rstd, gamma, n, c, hxw, groups, mask, soc=ctx.soc)
        grad_input, grad_gamma, grad_beta = grads
        if weight is not None:
            grad_gamma = None if grad_gamma is None else grad_gamma.to(weight.dtype)
            grad_beta = None if grad_beta is None else grad_beta.to(weight.dtype)
        return grad_input, grad_gamma, grad_beta, None, None, None


class GroupNorm(nn.GroupNorm):
    """A drop-in for ``torch.nn.GroupNorm`` (same parameters and state dict) with normkern's backward."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, *, soc="host") -> None:
        super().__init__(num_groups, num_channels, eps, affine, device=device, dtype=dtype)
        self.soc = soc

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return _GroupNormFunction.apply(input, self.weight, self.bias, self.num_groups, self.eps, self.soc)
