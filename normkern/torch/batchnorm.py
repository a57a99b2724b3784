"""Batch norm layers whose kernels are normkern's: SyncBatchNorm over a torch.distributed process group, and the
local BatchNorm1d/2d/3d.

SyncBatchNorm composes the five SyncBatchNorm ops as PyTorch's CUDA SyncBatchNorm does: forward =
batch_norm_stats -> all_gather of (mean, invstd, count) -> batch_norm_gather_stats_with_counts (running
statistics updated) -> batch_norm_elemt; backward = batch_norm_backward_reduce -> all_reduce of (sum_dy,
sum_dy_xmu) -> batch_norm_backward_elemt. grad_weight and grad_bias stay local, as in PyTorch: the
data-parallel wrapper all-reduces parameter gradients.

The local BatchNorm layers, and SyncBatchNorm with no process group or one of a single rank, train on
``batch_norm_stats`` -> the running statistics updated as torch.nn does -> ``batch_norm_elemt``, and
``fast_batch_norm_backward``; eval mode (running statistics) runs ``batch_norm_elemt`` in every layer.

Every call passes ``_contract``'s checks (torch.nn's) first; an empty batch and a torch.func transform are
answered by ``torch.nn.functional.batch_norm`` itself, and a backward that builds a graph (``create_graph=True``)
differentiates torch's formulas (``_autograd``).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from . import _contract, _layout, _threads
from ._autograd import differentiable_backward, first_order_only
from ._tensors import tensor_op, to_numpy

_stats = tensor_op("batch_norm_stats")
_gather = tensor_op("batch_norm_gather_stats_with_counts")
_elemt = tensor_op("batch_norm_elemt")
_reduce = tensor_op("batch_norm_backward_reduce")
_elemt_backward = tensor_op("batch_norm_backward_elemt")
_fast_backward = tensor_op("fast_batch_norm_backward")

F32 = torch.float32


def _training_batch_norm(eps):
    """torch's differentiable batch norm with the batch's statistics (the running ones were updated in forward)."""
    return lambda input, weight, bias: F.batch_norm(input, None, None, weight, bias, True, 0.0, eps)


class _SyncBatchNormFunction(torch.autograd.Function):
    """The batch norm of a process group of two or more ranks (one rank trains as the local layers do)."""

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, process_group, world_size,
                soc):
        x = _layout.contiguous(input)
        channels = input.shape[1]
        if input.numel() > 0:
            mean, invstd = _stats(x, eps, soc=soc)
            combined = torch.cat([mean, invstd, torch.full((1,), input.numel() // channels, dtype=F32)])
        else:
            combined = torch.zeros(2 * channels + 1, dtype=F32)
        gathered = [torch.empty_like(combined) for _ in range(world_size)]
        dist.all_gather(gathered, combined, process_group)
        combined = torch.stack(gathered)
        mean_all, invstd_all, count_all = torch.split(combined, channels, dim=1)
        keep = count_all.squeeze(-1) >= 1  # ranks with an empty batch drop out, as in PyTorch
        mean_all, invstd_all, count_all = mean_all[keep], invstd_all[keep], count_all[keep]
        # The counts stay float32 (exact to 2**24 values a rank) whatever the running statistics' dtype: as
        # float16 a rank's count overflows past 65504 values per channel.
        mean, invstd = _gather(x, mean_all.contiguous(), invstd_all.contiguous(), running_mean, running_var,
                               momentum, eps, count_all.reshape(-1), soc=soc)
        ctx.save_for_backward(input, weight, bias, mean, invstd, count_all.to(torch.int32).reshape(-1))
        ctx.process_group, ctx.eps, ctx.soc = process_group, eps, soc
        if input.numel() == 0:
            return torch.empty_like(input)
        return _layout.as_output(_elemt(x, _as(weight, mean), _as(bias, mean), mean, invstd, eps, soc=soc), input)

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias, mean, invstd, count = ctx.saved_tensors
        need_input, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad_input = grad_weight = grad_bias = None
        channels = input.shape[1]
        if input.numel() > 0:
            x, dy = _layout.contiguous(input), _layout.contiguous(grad_output)
            sum_dy, sum_dy_xmu, grad_weight, grad_bias = _reduce(
                dy, x, mean, invstd, _as(weight, mean), need_input, need_weight and weight is not None,
                need_bias and weight is not None, soc=ctx.soc)
            if need_input:
                combined = torch.cat([sum_dy, sum_dy_xmu])
                dist.all_reduce(combined, dist.ReduceOp.SUM, ctx.process_group)
                sum_dy, sum_dy_xmu = torch.split(combined, channels)
                grad_input = _layout.as_input_grad(_elemt_backward(
                    dy, x, mean, invstd, _as(weight, mean), sum_dy.contiguous(), sum_dy_xmu.contiguous(), count,
                    soc=ctx.soc), input)
            grad_weight = None if grad_weight is None else grad_weight.to(weight.dtype)
            grad_bias = None if grad_bias is None else grad_bias.to(weight.dtype)
        elif need_input:
            # an empty batch still joins the all-reduce its peers wait for; its gradients are zeros (None)
            dist.all_reduce(torch.zeros(2 * channels, dtype=F32), dist.ReduceOp.SUM, ctx.process_group)
        grads = (grad_input, grad_weight, grad_bias)
        if torch.is_grad_enabled():
            grads = first_order_only(grads, "the synchronized batch norm across processes (torch.nn.SyncBatchNorm's "
                                            "has no double backward either)", (grad_output, input, weight, bias))
        return (*grads, None, None, None, None, None, None, None)


def _as(param, like):
    """A parameter in the statistics' dtype (the CANN ops take one dtype for the per-channel tensors)."""
    if param is None:
        return None
    param = param.detach()
    return param.to(like.dtype) if param.dtype != like.dtype else param


class _BatchNormEvalFunction(torch.autograd.Function):
    """Normalization with the running statistics: ``batch_norm_elemt`` forward, ``invstd = 1/sqrt(running_var +
    eps)``; backward ``grad_input = dy * invstd * weight`` (elemt again) and the two sums of
    ``batch_norm_backward_reduce``."""

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, soc):
        mean = running_mean.detach().to(F32)
        invstd = torch.rsqrt(running_var.detach().to(F32) + eps)
        ctx.save_for_backward(input, weight, bias, mean, invstd)
        ctx.running, ctx.eps, ctx.soc = (running_mean, running_var), eps, soc
        output = _elemt(_layout.contiguous(input), _as(weight, mean), _as(bias, mean), mean, invstd, eps, soc=soc)
        return _layout.as_output(output, input)

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias, mean, invstd = ctx.saved_tensors
        if torch.is_grad_enabled():
            (running_mean, running_var), eps = ctx.running, ctx.eps
            grads = differentiable_backward(
                ctx, grad_output, lambda x, w, b: F.batch_norm(x, running_mean, running_var, w, b, False, 0.0, eps),
                (input, weight, bias))
            return (*grads, None, None, None, None)
        need_input, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad_input = grad_weight = grad_bias = None
        dy = _layout.contiguous(grad_output)
        if need_input:
            grad_input = _layout.as_input_grad(
                _elemt(dy, _as(weight, mean), None, torch.zeros_like(mean), invstd, ctx.eps, soc=ctx.soc), input)
        if weight is not None and (need_weight or need_bias):
            _, _, grad_weight, grad_bias = _reduce(dy, _layout.contiguous(input), mean, invstd, None, False,
                                                   need_weight, need_bias, soc=ctx.soc)
            grad_weight = None if grad_weight is None else grad_weight.to(weight.dtype)
            grad_bias = None if grad_bias is None else grad_bias.to(weight.dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None


def _eval_or_torch(module, input, call: _contract.BatchNormCall, factor: float):
    """The output where a layer's call needs no training kernel (eval mode, or torch's own function), else None."""
    if call.torch_function:
        return F.batch_norm(input, call.running_mean, call.running_var, module.weight, module.bias, call.training,
                            factor, module.eps)
    if not call.training:
        return _BatchNormEvalFunction.apply(input, module.weight, module.bias, call.running_mean, call.running_var,
                                            module.eps, module.soc)
    return None


class SyncBatchNorm(nn.modules.batchnorm._BatchNorm):
    """A drop-in for ``torch.nn.SyncBatchNorm`` on CPU tensors (gloo or any process group), its kernels
    normkern's. The same parameters (``bias=`` included), buffers, state dict and checks; ``soc`` picks the plan
    (default ``"host"``: this CPU, every dtype; an NPU's name gives its plan, its exact order and its dtype
    rules)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group=None, device=None, dtype=None, *,
                 bias: bool = True, soc="host") -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype,
                         bias=bias)
        self.process_group = process_group
        self.soc = soc

    _check_input_dim = nn.SyncBatchNorm._check_input_dim
    _check_non_zero_input_channels = nn.SyncBatchNorm._check_non_zero_input_channels

    @torch.compiler.disable
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        self._check_non_zero_input_channels(input)
        group, world_size = None, 1
        if self.training and dist.is_available() and dist.is_initialized():
            group = self.process_group or dist.group.WORLD
            world_size = dist.get_world_size(group)
        call = _contract.batch_norm(self, input, synchronized=world_size > 1)
        factor = _contract.count_batch(self)
        output = _eval_or_torch(self, input, call, factor)
        if output is not None:
            return output
        if world_size == 1:  # no collective to join: the local batch norm's kernels
            return _BatchNormTrainFunction.apply(input, self.weight, self.bias, call.running_mean, call.running_var,
                                                 factor, self.eps, self.soc)
        _threads.share_cores(world_size)
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, call.running_mean, call.running_var,
                                            self.eps, factor, group, world_size, self.soc)

    @classmethod
    def convert_sync_batchnorm(cls, module: nn.Module, process_group=None, *, soc="host") -> nn.Module:
        """Every batch norm layer of ``module`` (``torch.nn.BatchNorm*d``, torch's SyncBatchNorm and this one) as
        this layer, sharing its parameters and buffers, as ``torch.nn.SyncBatchNorm.convert_sync_batchnorm``
        does (``qconfig`` included)."""
        output = module
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            output = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                         process_group, bias=module.bias is not None, soc=soc)
            if module.affine:
                with torch.no_grad():
                    output.weight = module.weight
                    output.bias = module.bias
            output.running_mean = module.running_mean
            output.running_var = module.running_var
            output.num_batches_tracked = module.num_batches_tracked
            output.training = module.training
            if hasattr(module, "qconfig"):
                output.qconfig = module.qconfig
        for name, child in module.named_children():
            output.add_module(name, cls.convert_sync_batchnorm(child, process_group, soc=soc))
        return output


def _update_running(running_mean, running_var, mean, invstd, eps, factor, count) -> None:
    """torch.nn's running statistics update from the batch's ``mean`` and ``invstd`` (float32):
    ``running = running * (1 - factor) + batch * factor``, the variance unbiased (``* n / (n - 1)``). The batch
    variance is ``1 / (invstd * invstd) - eps``, as PyTorch's SyncBatchNorm derives it (docs/torch.md).
    float32 buffers are updated in place through NumPy views (a few microseconds; the same operations as
    torch's ops on C floats), others by torch's ops."""
    keep, unbiased = 1.0 - factor, factor * count / (count - 1)
    if running_mean.dtype == F32 and running_var.dtype == F32:
        m, r = to_numpy(mean), to_numpy(invstd)
        variance = np.reciprocal(r * r)
        variance -= np.float32(eps)
        for buffer, batch, weight in ((running_mean, m, factor), (running_var, variance, unbiased)):
            view = buffer.detach().numpy()
            view *= np.float32(keep)
            view += batch * np.float32(weight)
        return
    with torch.no_grad():
        variance = torch.reciprocal(invstd * invstd).sub_(eps)
        running_mean.mul_(keep).add_(mean * factor)
        running_var.mul_(keep).add_(variance * unbiased)


class _BatchNormTrainFunction(torch.autograd.Function):
    """Training with the batch's statistics on normkern's kernels: forward ``batch_norm_stats`` (the running
    statistics updated as torch.nn does) and ``batch_norm_elemt``; backward ``fast_batch_norm_backward``."""

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, factor, eps, soc):
        x = _layout.contiguous(input)
        save_mean, save_invstd = _stats(x, eps, soc=soc)
        if running_mean is not None:
            _update_running(running_mean, running_var, save_mean, save_invstd, eps, factor,
                            input.numel() // input.shape[1])
        output = _elemt(x, _as(weight, save_mean), _as(bias, save_mean), save_mean, save_invstd, eps, soc=soc)
        ctx.save_for_backward(input, weight, bias, save_mean, save_invstd)
        ctx.eps, ctx.soc = eps, soc
        return _layout.as_output(output, input)

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias, save_mean, save_invstd = ctx.saved_tensors
        if torch.is_grad_enabled():
            grads = differentiable_backward(ctx, grad_output, _training_batch_norm(ctx.eps), (input, weight, bias))
            return (*grads, None, None, None, None, None)
        need = ctx.needs_input_grad
        mask = (bool(need[0]), bool(need[1]) and weight is not None, bool(need[2]) and weight is not None)
        grad_input, grad_weight, grad_bias = _fast_backward(
            _layout.contiguous(grad_output), _layout.contiguous(input),
            None if weight is None else weight.detach(), None, None, save_mean, save_invstd, True,
            ctx.eps, mask, soc=ctx.soc)
        if grad_input is not None:
            grad_input = _layout.as_input_grad(grad_input, input)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None


class _LocalBatchNorm(nn.modules.batchnorm._BatchNorm):
    """``torch.nn.BatchNorm*d`` with normkern's backward in training (eval mode runs ``_BatchNormEvalFunction``)."""

    def __init__(self, *args, soc="host", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.soc = soc

    @torch.compiler.disable
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        call = _contract.batch_norm(self, input)
        factor = _contract.count_batch(self)
        output = _eval_or_torch(self, input, call, factor)
        if output is not None:
            return output
        return _BatchNormTrainFunction.apply(input, self.weight, self.bias, call.running_mean, call.running_var,
                                             factor, self.eps, self.soc)


class BatchNorm1d(_LocalBatchNorm, nn.BatchNorm1d):
    """``torch.nn.BatchNorm1d`` whose training backward is normkern's ``fast_batch_norm_backward``."""


class BatchNorm2d(_LocalBatchNorm, nn.BatchNorm2d):
    """``torch.nn.BatchNorm2d`` whose training backward is normkern's ``fast_batch_norm_backward``."""


class BatchNorm3d(_LocalBatchNorm, nn.BatchNorm3d):
    """``torch.nn.BatchNorm3d`` whose training backward is normkern's ``fast_batch_norm_backward``."""


__all__ = ["SyncBatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "to_numpy"]
