"""The batch norm of a process group of two or more ranks, as torch.nn.SyncBatchNorm's CUDA function computes it, on
normkern's ops and torch.distributed: forward = batch_norm_stats -> all_gather of (mean, invstd, count) ->
batch_norm_gather_stats_with_counts (running statistics updated) -> batch_norm_elemt; backward =
batch_norm_backward_reduce -> all_reduce of (sum_dy, sum_dy_xmu) -> batch_norm_backward_elemt. The eager layer's
autograd function (``batchnorm``) and the traced custom operators (``_ops``) both run these two.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import _layout
from ._tensors import tensor_op

_stats = tensor_op("batch_norm_stats")
_gather = tensor_op("batch_norm_gather_stats_with_counts")
_elemt = tensor_op("batch_norm_elemt")
_reduce = tensor_op("batch_norm_backward_reduce")
_elemt_backward = tensor_op("batch_norm_backward_elemt")

F32 = torch.float32


def forward(input, weight, bias, running_mean, running_var, eps, momentum, process_group, world_size, soc):
    """``(output, mean, invstd, counts)``: the output, the group's statistics, and every rank's value count a channel
    (int32 (world_size,), zero for a rank with an empty batch). The running statistics are updated in place."""
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
    # The counts stay float32 (exact to 2**24 values a rank) whatever the running statistics' dtype: as
    # float16 a rank's count overflows past 65504 values per channel.
    mean, invstd = _gather(x, mean_all[keep].contiguous(), invstd_all[keep].contiguous(), running_mean, running_var,
                           momentum, eps, count_all[keep].reshape(-1), soc=soc)
    counts = count_all.to(torch.int32).reshape(-1)
    if input.numel() == 0:
        return torch.empty_like(input), mean, invstd, counts
    output = _layout.as_output(_elemt(x, as_statistics(weight, mean), as_statistics(bias, mean), mean, invstd, eps,
                                      soc=soc), input)
    return output, mean, invstd, counts


def backward(grad_output, input, weight, mean, invstd, counts, mask, process_group, soc):
    """``(grad_input, grad_weight, grad_bias)``, None where ``mask`` leaves one out or the batch is empty. Every rank
    that wants grad_input joins the all-reduce, an empty batch too."""
    need_input, need_weight, need_bias = mask
    grad_input = grad_weight = grad_bias = None
    channels = input.shape[1]
    if input.numel() > 0:
        x, dy = _layout.contiguous(input), _layout.contiguous(grad_output)
        sum_dy, sum_dy_xmu, grad_weight, grad_bias = _reduce(
            dy, x, mean, invstd, as_statistics(weight, mean), need_input, need_weight and weight is not None,
            need_bias and weight is not None, soc=soc)
        if need_input:
            combined = torch.cat([sum_dy, sum_dy_xmu])
            dist.all_reduce(combined, dist.ReduceOp.SUM, process_group)
            sum_dy, sum_dy_xmu = torch.split(combined, channels)
            grad_input = _layout.as_input_grad(_elemt_backward(
                dy, x, mean, invstd, as_statistics(weight, mean), sum_dy.contiguous(), sum_dy_xmu.contiguous(),
                counts[counts >= 1], soc=soc), input)
        grad_weight = None if grad_weight is None else grad_weight.to(weight.dtype)
        grad_bias = None if grad_bias is None else grad_bias.to(weight.dtype)
    elif need_input:
        # an empty batch still joins the all-reduce its peers wait for; its gradients are zeros (None)
        dist.all_reduce(torch.zeros(2 * channels, dtype=F32), dist.ReduceOp.SUM, process_group)
    return grad_input, grad_weight, grad_bias


def as_statistics(param, like):
    """A parameter in the statistics' dtype (the CANN ops take one dtype for the per-channel tensors)."""
    if param is None:
        return None
    param = param.detach()
    return param.to(like.dtype) if param.dtype != like.dtype else param
