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

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from . import _contract, _layout, _ops, _steps, _sync, _threads
from ._autograd import differentiable_backward, first_order_only
from ._steps import BatchNormStep, channel_grad, input_grad_tensor, output_tensor
from ._tensors import to_numpy


def _training_batch_norm(eps):
    """torch's differentiable batch norm with the batch's statistics (the running ones were updated in forward)."""
    return lambda input, weight, bias: F.batch_norm(input, None, None, weight, bias, True, 0.0, eps)


class _SyncBatchNormFunction(torch.autograd.Function):
    """The batch norm of a process group of two or more ranks (``_sync``; one rank trains as the local layers do)."""

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, process_group, world_size,
                soc):
        output, mean, invstd, counts = _sync.forward(input, weight, bias, running_mean, running_var, eps, momentum,
                                                     process_group, world_size, soc)
        ctx.save_for_backward(input, weight, bias, mean, invstd, counts)
        ctx.process_group, ctx.soc = process_group, soc
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias, mean, invstd, counts = ctx.saved_tensors
        grads = _sync.backward(grad_output, input, weight, mean, invstd, counts, ctx.needs_input_grad[:3],
                               ctx.process_group, ctx.soc)
        if torch.is_grad_enabled():
            grads = first_order_only(grads, "the synchronized batch norm across processes (torch.nn.SyncBatchNorm's "
                                            "has no double backward either)", (grad_output, input, weight, bias))
        return (*grads, None, None, None, None, None, None, None)


class _BatchNormEvalFunction(torch.autograd.Function):
    """Normalization with the running statistics (a bound step's ``eval_forward``); backward ``grad_input = dy *
    invstd * weight`` and the two sums of ``batch_norm_backward_reduce``."""

    @staticmethod
    def forward(ctx, input, weight, bias, step, x):
        output = step.eval_forward(x)[0]
        ctx.save_for_backward(input, weight, bias)
        ctx.step, ctx.x = step, x
        return output_tensor(output, input)

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias = ctx.saved_tensors
        step = ctx.step
        if torch.is_grad_enabled():
            running_mean, running_var, eps = step.running_mean, step.running_var, step.eps
            grads = differentiable_backward(
                ctx, grad_output, lambda x, w, b: F.batch_norm(x, running_mean, running_var, w, b, False, 0.0, eps),
                (input, weight, bias))
            return (*grads, None, None)
        need = ctx.needs_input_grad
        x = ctx.x
        # the running statistics as they are now, as torch's backward reads its saved buffers: a training step
        # between this forward and its backward has updated both
        mean, invstd = step.eval_statistics()
        grad_input, grad_weight, grad_bias = step.eval_backward(
            to_numpy(_layout.contiguous(grad_output)), x, mean, invstd, (need[0], need[1], need[2]))
        if grad_input is not None:
            grad_input = input_grad_tensor(grad_input, input)
        return grad_input, channel_grad(grad_weight, weight), channel_grad(grad_bias, weight), None, None


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
        if process_group is not None:
            _ops.remember_group(process_group)  # the traced layer names it to the custom operators

    _check_input_dim = nn.SyncBatchNorm._check_input_dim
    _check_non_zero_input_channels = nn.SyncBatchNorm._check_non_zero_input_channels

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        self._check_non_zero_input_channels(input)
        group, world_size = None, 1
        if self.training and dist.is_available() and dist.is_initialized():
            group = self.process_group or dist.group.WORLD
            world_size = dist.get_world_size(group)
        if world_size == 1:  # no collective to join: the local batch norm's path
            return _ops.batch_norm_layer(self, input) if _ops.tracing(input) else _local_forward(self, input)
        if _ops.tracing(input):  # torch.compile, torch.export: the custom operators
            return _ops.sync_batch_norm_layer(self, input, group, world_size)
        call = _contract.batch_norm(self, input, synchronized=True)
        factor = _contract.count_batch(self)
        _threads.share_cores(world_size)
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, call.running_mean, call.running_var,
                                            self.eps, factor, group, world_size, self.soc)

    def __getstate__(self):
        return _steps.without_steps(super().__getstate__())

    @classmethod
    def convert_sync_batchnorm(cls, module: nn.Module, process_group=None, *, soc="host") -> nn.Module:
        """Every batch norm layer of ``module`` (``torch.nn.BatchNorm*d``, torch's SyncBatchNorm and this one) as
        this layer, sharing its parameters and buffers, as ``torch.nn.SyncBatchNorm.convert_sync_batchnorm``
        does (``qconfig`` included)."""
        output = module
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            output = take_state(cls(module.num_features, module.eps, module.momentum, module.affine,
                                    module.track_running_stats, process_group, bias=module.bias is not None, soc=soc),
                                module)
        for name, child in module.named_children():
            output.add_module(name, cls.convert_sync_batchnorm(child, process_group, soc=soc))
        return output


def take_state(layer: nn.Module, module: nn.Module) -> nn.Module:
    """``layer`` holding ``module``'s parameters and buffers (the same tensors), its mode and ``qconfig``."""
    if module.affine:
        with torch.no_grad():
            layer.weight = module.weight
            layer.bias = module.bias
    layer.running_mean = module.running_mean
    layer.running_var = module.running_var
    layer.num_batches_tracked = module.num_batches_tracked
    layer.training = module.training
    if hasattr(module, "qconfig"):
        layer.qconfig = module.qconfig
    return layer


class _BatchNormTrainFunction(torch.autograd.Function):
    """Training with the batch's statistics on a bound step: forward ``batch_norm_stats`` (the running statistics
    updated as torch.nn does) and ``batch_norm_elemt``; backward ``fast_batch_norm_backward``."""

    @staticmethod
    def forward(ctx, input, weight, bias, step, x, factor):
        output, mean, invstd = step.train_forward(x, factor)
        ctx.save_for_backward(input, weight, bias)
        ctx.step, ctx.arrays = step, (x, mean, invstd)
        return output_tensor(output, input)

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias = ctx.saved_tensors
        step = ctx.step
        if torch.is_grad_enabled():
            grads = differentiable_backward(ctx, grad_output, _training_batch_norm(step.eps), (input, weight, bias))
            return (*grads, None, None, None)
        need = ctx.needs_input_grad
        mask = (bool(need[0]), bool(need[1]) and weight is not None, bool(need[2]) and weight is not None)
        x, mean, invstd = ctx.arrays
        grad_input, grad_weight, grad_bias = step.train_backward(to_numpy(_layout.contiguous(grad_output)), x, mean,
                                                                 invstd, mask)
        if grad_input is not None:
            grad_input = input_grad_tensor(grad_input, input)
        return grad_input, channel_grad(grad_weight, weight), channel_grad(grad_bias, weight), None, None, None


def _local_forward(module, input: torch.Tensor) -> torch.Tensor:
    """A local batch norm call (every layer but a SyncBatchNorm of a group of two or more ranks): on a step bound
    to the call's signature, made by the full checks on a new one; torch's own function for an empty batch, a
    torch.func transform, or a single running statistic."""
    parameters, buffers = module._parameters, module._buffers
    weight, bias = parameters["weight"], parameters["bias"]
    running_mean, running_var = buffers["running_mean"], buffers["running_var"]
    training = module.training or (running_mean is None and running_var is None)
    # under a torch.func transform the tensors may have no storage (and torch's function answers): no key
    key = None if _contract.transform_active() else _steps.batch_norm_key(
        module, input, training, (weight, bias, running_mean, running_var, buffers["num_batches_tracked"]))
    step = None if key is None else _steps.steps_of(module).get(key)
    if step is None:
        call = _contract.batch_norm(module, input)
        factor = _contract.count_batch(module)
        if call.torch_function:
            return F.batch_norm(input, call.running_mean, call.running_var, weight, bias, call.training, factor,
                                module.eps)
        step = BatchNormStep(module, input, call)
        if key is not None:
            _steps.keep(module, key, step)
    else:
        factor = step.count_batch()
    x = to_numpy(_layout.contiguous(input))
    grad = torch.is_grad_enabled() and (input.requires_grad or _requires_grad(weight) or _requires_grad(bias))
    if step.training:
        if grad:
            return _BatchNormTrainFunction.apply(input, weight, bias, step, x, factor)
        return output_tensor(step.train_forward(x, factor)[0], input)
    if grad:
        return _BatchNormEvalFunction.apply(input, weight, bias, step, x)
    return output_tensor(step.eval_forward(x)[0], input)


def _requires_grad(tensor) -> bool:
    return tensor is not None and tensor.requires_grad


class _LocalBatchNorm(nn.modules.batchnorm._BatchNorm):
    """``torch.nn.BatchNorm*d`` with normkern's backward in training (eval mode runs ``_BatchNormEvalFunction``)."""

    def __init__(self, *args, soc="host", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.soc = soc

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        if _ops.tracing(input):  # torch.compile, torch.export: the custom operators
            return _ops.batch_norm_layer(self, input)
        return _local_forward(self, input)

    def __getstate__(self):
        return _steps.without_steps(super().__getstate__())


class BatchNorm1d(_LocalBatchNorm, nn.BatchNorm1d):
    """``torch.nn.BatchNorm1d`` whose training backward is normkern's ``fast_batch_norm_backward``."""


class BatchNorm2d(_LocalBatchNorm, nn.BatchNorm2d):
    """``torch.nn.BatchNorm2d`` whose training backward is normkern's ``fast_batch_norm_backward``."""


class BatchNorm3d(_LocalBatchNorm, nn.BatchNorm3d):
    """``torch.nn.BatchNorm3d`` whose training backward is normkern's ``fast_batch_norm_backward``."""


__all__ = ["SyncBatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "to_numpy"]
