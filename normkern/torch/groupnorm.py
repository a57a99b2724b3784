"""``GroupNorm``: ``torch.nn.GroupNorm`` whose backward is normkern's ``group_norm_backward``.

The forward is PyTorch's ``native_group_norm`` (it returns the per-(N, group) mean and rstd the backward
needs), on the input in its suggested memory format as ``torch.nn.functional.group_norm`` gives it; the
backward runs normkern's kernel on the host plan (or ``soc``'s) over the input made contiguous, and returns the
input gradient in the input's own layout. Every call passes ``_contract``'s checks (torch.nn's) first; an empty
input and a torch.func transform are answered by ``torch.nn.functional.group_norm`` itself, and a backward that
builds a graph differentiates torch's formulas (``_autograd``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import _contract, _layout, _ops, _steps
from ._autograd import differentiable_backward
from ._steps import GroupNormStep, channel_grad, input_grad_tensor
from ._tensors import to_numpy


class _GroupNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, step):
        n, c, hxw, groups = step.shape
        x = input.contiguous(memory_format=_layout.suggested_format(input))
        output, mean, rstd = torch.native_group_norm(
            x, None if weight is None else weight.contiguous(), None if bias is None else bias.contiguous(),
            n, c, hxw, groups, step.eps)
        ctx.save_for_backward(input, weight, bias, mean, rstd)
        ctx.step = step
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias, mean, rstd = ctx.saved_tensors
        step = ctx.step
        if torch.is_grad_enabled():
            groups, eps = step.shape[3], step.eps
            grads = differentiable_backward(ctx, grad_output, lambda x, w, b: F.group_norm(x, groups, w, b, eps),
                                            (input, weight, bias))
            return (*grads, None)
        need = ctx.needs_input_grad
        mask = (bool(need[0]), bool(need[1]) and weight is not None, bool(need[2]) and bias is not None)
        grad_input, grad_gamma, grad_beta = step.backward(
            to_numpy(_layout.contiguous(grad_output)), to_numpy(_layout.contiguous(input)), to_numpy(mean),
            to_numpy(rstd), mask)
        if grad_input is not None:
            grad_input = input_grad_tensor(grad_input, input)
        return grad_input, channel_grad(grad_gamma, weight), channel_grad(grad_beta, weight), None


class GroupNorm(nn.GroupNorm):
    """A drop-in for ``torch.nn.GroupNorm`` (same parameters, ``bias=`` included, state dict and checks) with
    normkern's backward."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, *, bias: bool = True, soc="host") -> None:
        super().__init__(num_groups, num_channels, eps, affine, device=device, dtype=dtype, bias=bias)
        self.soc = soc

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if _ops.tracing(input):  # torch.compile, torch.export: the custom operators
            return _ops.group_norm_layer(self, input)
        parameters = self._parameters
        weight, bias = parameters["weight"], parameters["bias"]
        # under a torch.func transform the tensors may have no storage (and torch's function answers): no key
        key = None if _contract.transform_active() else _steps.group_norm_key(self, input, weight, bias)
        step = None if key is None else _steps.steps_of(self).get(key)
        if step is None:
            if _contract.group_norm(self, input):
                return F.group_norm(input, self.num_groups, weight, bias, self.eps)
            step = _steps.keep(self, key, GroupNormStep(self, input))
        return _GroupNormFunction.apply(input, weight, bias, step)

    def __getstate__(self):
        return _steps.without_steps(super().__getstate__())
