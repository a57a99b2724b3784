"""Batch norm layers whose kernels are normkern's: SyncBatchNorm over a torch.distributed process group, and the
local BatchNorm1d/2d/3d.

SyncBatchNorm composes the five SyncBatchNorm ops as PyTorch's CUDA SyncBatchNorm does: forward =
batch_norm_stats -> all_gather of (mean, invstd, count) -> batch_norm_gather_stats_with_counts (running
statistics updated) -> batch_norm_elemt; backward = batch_norm_backward_reduce -> all_reduce of (sum_dy,
sum_dy_xmu) -> batch_norm_backward_elemt. With no process group, or one of a single rank, the same kernels
run with no collective (a local batch norm). grad_weight and grad_bias stay local, as in PyTorch: the
data-parallel wrapper all-reduces parameter gradients.

The local BatchNorm layers run PyTorch's forward (``torch.native_batch_norm``) and normkern's
``fast_batch_norm_backward``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from . import _threads
from ._tensors import tensor_op, to_numpy

_stats = tensor_op("batch_norm_stats", prepared=True)
_gather = tensor_op("batch_norm_gather_stats_with_counts", prepared=True)
_elemt = tensor_op("batch_norm_elemt", prepared=True)
_reduce = tensor_op("batch_norm_backward_reduce", prepared=True)
_elemt_backward = tensor_op("batch_norm_backward_elemt", prepared=True)
_fast_backward = tensor_op("fast_batch_norm_backward", prepared=True)

F32 = torch.float32


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, process_group, world_size,
                soc):
        input = input.contiguous()
        channels = input.shape[1]
        if input.numel() // channels == 1 and world_size < 2:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {input.shape}")
        if input.numel() > 0:
            mean, invstd = _stats(input, eps, soc=soc)
            combined = torch.cat([mean, invstd, torch.full((1,), input.numel() // channels, dtype=F32)])
        else:
            combined = torch.zeros(2 * channels + 1, dtype=F32)
        if world_size > 1:
            gathered = [torch.empty_like(combined) for _ in range(world_size)]
            dist.all_gather(gathered, combined, process_group)
            combined = torch.stack(gathered)
        else:
            combined = combined.unsqueeze(0)
        mean_all, invstd_all, count_all = torch.split(combined, channels, dim=1)
        keep = count_all.squeeze(-1) >= 1  # ranks with an empty batch drop out, as in PyTorch
        mean_all, invstd_all, count_all = mean_all[keep], invstd_all[keep], count_all[keep]
        counts = count_all.reshape(-1)
        if running_mean is not None and counts.dtype != running_mean.dtype:
            counts = counts.to(running_mean.dtype)
        mean, invstd = _gather(input, mean_all.contiguous(), invstd_all.contiguous(), running_mean, running_var,
                               momentum, eps, counts, soc=soc)
        ctx.save_for_backward(input, weight, mean, invstd, count_all.to(torch.int32).reshape(-1))
        ctx.process_group, ctx.world_size, ctx.soc = process_group, world_size, soc
        if input.numel() == 0:
            return torch.empty_like(input)
        return _elemt(input, _as(weight, mean), _as(bias, mean), mean, invstd, eps, soc=soc)

    @staticmethod
    def backward(ctx, grad_output):
        grad_output = grad_output.contiguous()
        input, weight, mean, invstd, count = ctx.saved_tensors
        need_input, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad_input = grad_weight = grad_bias = None
        channels = input.shape[1]
        if input.numel() > 0:
            sum_dy, sum_dy_xmu, grad_weight, grad_bias = _reduce(
                grad_output, input, mean, invstd, _as(weight, mean), need_input, need_weight and weight is not None,
                need_bias and weight is not None, soc=ctx.soc)
            if need_input:
                if ctx.world_size > 1:
                    combined = torch.cat([sum_dy, sum_dy_xmu])
                    dist.all_reduce(combined, dist.ReduceOp.SUM, ctx.process_group)
                    sum_dy, sum_dy_xmu = torch.split(combined, channels)
                grad_input = _elemt_backward(grad_output, input, mean, invstd, _as(weight, mean),
                                             sum_dy.contiguous(), sum_dy_xmu.contiguous(), count, soc=ctx.soc)
            grad_weight = None if grad_weight is None else grad_weight.to(weight.dtype)
            grad_bias = None if grad_bias is None else grad_bias.to(weight.dtype)
        elif need_input and ctx.world_size > 1:
            # an empty batch still joins the all-reduce its peers wait for; its gradients are zeros (None)
            dist.all_reduce(torch.zeros(2 * channels, dtype=F32), dist.ReduceOp.SUM, ctx.process_group)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None, None, None


def _as(param, like):
    """A parameter in the statistics' dtype (the CANN ops take one dtype for the per-channel tensors)."""
    if param is None:
        return None
    return param.detach().to(like.dtype) if param.dtype != like.dtype else param.detach()


class _BatchNormEvalFunction(torch.autograd.Function):
    """Normalization with the running statistics: ``batch_norm_elemt`` forward; backward
    ``grad_input = dy * invstd * weight`` (elemt again) and the two sums of ``batch_norm_backward_reduce``."""

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, soc):
        input = input.contiguous()
        mean = running_mean.detach().to(F32)
        invstd = torch.rsqrt(running_var.detach().to(F32) + eps)
        ctx.save_for_backward(input, weight, mean, invstd)
        ctx.eps, ctx.soc = eps, soc
        return _elemt(input, _as(weight, mean), _as(bias, mean), mean, invstd, eps, soc=soc)

    @staticmethod
    def backward(ctx, grad_output):
        grad_output = grad_output.contiguous()
        input, weight, mean, invstd = ctx.saved_tensors
        need_input, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad_input = grad_weight = grad_bias = None
        if need_input:
            grad_input = _elemt(grad_output, _as(weight, mean), None, torch.zeros_like(mean), invstd, ctx.eps,
                                soc=ctx.soc)
        if weight is not None and (need_weight or need_bias) and input.numel() > 0:
            _, _, grad_weight, grad_bias = _reduce(grad_output, input, mean, invstd, None, False, need_weight,
                                                   need_bias, soc=ctx.soc)
            grad_weight = None if grad_weight is None else grad_weight.to(weight.dtype)
            grad_bias = None if grad_bias is None else grad_bias.to(weight.dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None


def _factor(module) -> float:
    """The running statistics' update factor of this call (and the step count), as torch.nn's _BatchNorm."""
    factor = 0.0 if module.momentum is None else module.momentum
    if module.training and module.track_running_stats:
        module.num_batches_tracked.add_(1)
        factor = 1.0 / float(module.num_batches_tracked) if module.momentum is None else module.momentum
    return factor


def _prologue(module, input):
    """What every batch norm call settles first, as torch.nn's _BatchNorm: ``(output, factor, running_mean,
    running_var)``, the output already computed in eval mode (running statistics), else None and the
    running statistics to update (None when not tracked)."""
    module._check_input_dim(input)
    factor = _factor(module)
    if not (module.training or (module.running_mean is None and module.running_var is None)):
        output = _BatchNormEvalFunction.apply(input, module.weight, module.bias, module.running_mean,
                                              module.running_var, module.eps, module.soc)
        return output, factor, None, None
    tracked = not module.training or module.track_running_stats
    return None, factor, module.running_mean if tracked else None, module.running_var if tracked else None


class SyncBatchNorm(nn.modules.batchnorm._BatchNorm):
    """A drop-in for ``torch.nn.SyncBatchNorm`` on CPU tensors (gloo or any process group), its kernels
    normkern's. The same parameters, buffers and state dict; ``soc`` picks the plan (default ``"host"``:
    this CPU, every dtype; an NPU's name gives its plan, its exact order and its dtype rules)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group=None, device=None, dtype=None, *,
                 soc="host") -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype)
        self.process_group = process_group
        self.soc = soc

    def _check_input_dim(self, input):
        if input.dim() < 2 or input.dim() > 5:
            raise ValueError(f"expected 2D to 5D input (got {input.dim()}D input)")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if input.dim() >= 2 and input.shape[1] == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")
        output, factor, running_mean, running_var = _prologue(self, input)
        if output is not None:
            return output
        group, world_size = None, 1
        if self.training and dist.is_available() and dist.is_initialized():
            group = self.process_group or dist.group.WORLD
            world_size = dist.get_world_size(group)
            _threads.share_cores(world_size)
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, running_mean, running_var, self.eps,
                                            factor, group, world_size, self.soc)

    @classmethod
    def convert_sync_batchnorm(cls, module: nn.Module, process_group=None, *, soc="host") -> nn.Module:
        """Every ``torch.nn.BatchNorm*d`` (and torch's SyncBatchNorm) of ``module`` as this layer, sharing its
        parameters and buffers, as ``torch.nn.SyncBatchNorm.convert_sync_batchnorm`` does."""
        output = module
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and not isinstance(module, cls):
            output = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                         process_group, soc=soc)
            if module.affine:
                with torch.no_grad():
                    output.weight = module.weight
                    output.bias = module.bias
            output.running_mean = module.running_mean
            output.running_var = module.running_var
            output.num_batches_tracked = module.num_batches_tracked
            output.training = module.training
        for name, child in module.named_children():
            output.add_module(name, cls.convert_sync_batchnorm(child, process_group, soc=soc))
        return output


class _BatchNormTrainFunction(torch.autograd.Function):
    """PyTorch's forward (``native_batch_norm``: batch statistics, running statistics updated), normkern's
    ``fast_batch_norm_backward``."""

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, factor, eps, soc):
        input = input.contiguous()
        output, save_mean, save_invstd = torch.native_batch_norm(input, weight, bias, running_mean, running_var,
                                                                 True, factor, eps)
        ctx.save_for_backward(input, weight, save_mean, save_invstd)
        ctx.eps, ctx.soc = eps, soc
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, save_mean, save_invstd = ctx.saved_tensors
        mask = tuple(bool(m) for m in ctx.needs_input_grad[:3])
        mask = (mask[0], mask[1] and weight is not None, mask[2] and weight is not None)
        grads = _fast_backward(grad_output.contiguous(), input, None if weight is None else weight.detach(), None,
                               None, save_mean, save_invstd, True, ctx.eps, mask, soc=ctx.soc)
        return (*grads, None, None, None, None, None)


class _LocalBatchNorm(nn.modules.batchnorm._BatchNorm):
    """``torch.nn.BatchNorm*d`` with normkern's backward in training (eval mode runs ``_BatchNormEvalFunction``)."""

    def __init__(self, *args, soc="host", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.soc = soc

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        output, factor, running_mean, running_var = _prologue(self, input)
        if output is not None:
            return output
        return _BatchNormTrainFunction.apply(input, self.weight, self.bias, running_mean, running_var, factor,
                                             self.eps, self.soc)


class BatchNorm1d(_LocalBatchNorm, nn.BatchNorm1d):
    """``torch.nn.BatchNorm1d`` whose training backward is normkern's ``fast_batch_norm_backward``."""


class BatchNorm2d(_LocalBatchNorm, nn.BatchNorm2d):
    """``torch.nn.BatchNorm2d`` whose training backward is normkern's ``fast_batch_norm_backward``."""


class BatchNorm3d(_LocalBatchNorm, nn.BatchNorm3d):
    """``torch.nn.BatchNorm3d`` whose training backward is normkern's ``fast_batch_norm_backward``."""


__all__ = ["SyncBatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "to_numpy"]
