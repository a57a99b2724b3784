"""The layers' door: torch.nn's checks, in torch.nn's order, before any state changes and before any kernel runs.

A ``normkern.torch`` layer answers what its ``torch.nn`` twin answers and raises what it raises: the same error
class and message. The rules come from three places, checked in this order:

1. ``torch.nn.functional.batch_norm`` / ``group_norm``: the Python checks (more than one value per channel in
   training, eps, at least two dimensions);
2. ATen's ``batch_norm`` / ``group_norm`` and their CPU kernels: the sizes of the per-channel tensors (for a
   non-empty input; an empty one returns early), groups dividing the channels, then the dtypes (floating input;
   mixed dtypes only as low-precision input with float32 parameters);
3. normkern's own: CPU tensors, float32, float16 or bfloat16 (float64 is refused with ``NotSupportedError``),
   and torch.func transforms only where torch's own function can take them.

Only after every rule has passed does a layer count the batch (``num_batches_tracked``) or touch a running
statistic, so a refused call changes nothing (torch.nn counts the batch first: docs/torch.md lists the
differences).
The module checks that precede F's (``_check_input_dim``, SyncBatchNorm's non-zero channels) stay the torch.nn
methods the layers inherit, called before these.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

#: The dtypes normkern's kernels compute; the layers refuse float64 (torch.nn computes it).
COMPUTED = (torch.float32, torch.float16, torch.bfloat16)
_REDUCED = (torch.float16, torch.bfloat16)


class NotSupportedError(NotImplementedError, TypeError):
    """A call the ``torch.nn`` twin answers and the normkern layer does not (a float64 input, a torch.func
    transform over a synchronized batch norm); raised before the layer changes any state."""


class BatchNormCall(NamedTuple):
    """What a batch norm call does once its checks pass, as ``torch.nn``'s ``_BatchNorm.forward`` decides it.

    ``training``: normalize with the batch's statistics (training mode, or eval mode without buffers);
    ``running_mean``/``running_var``: the buffers read (eval) or updated (training, when tracked), else None;
    ``torch_function``: ``torch.nn.functional.batch_norm`` answers the call itself (an empty batch, a torch.func
    transform, one running statistic set to None by hand): its result is torch.nn's by construction."""

    training: bool
    running_mean: torch.Tensor | None
    running_var: torch.Tensor | None
    torch_function: bool


def _layer(module) -> str:
    return f"normkern.torch.{type(module).__name__}"


def _c10_name(dtype: torch.dtype) -> str:
    """The dtype as ATen's messages name it (``Long``, ``Half``, ``ComplexFloat``)."""
    return torch.empty(0, dtype=dtype).type().removeprefix("torch.").removesuffix("Tensor")


def _verify_batch_size(size) -> None:
    """``torch.nn.functional._verify_batch_size``: training needs more than one value per channel."""
    if math.prod(size[:1] + size[2:]) == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {size}")


def _check_own(module, input: torch.Tensor, parameters) -> None:
    """normkern's own rules, after torch's: CPU tensors, per-channel tensors as vectors (torch.nn counts their
    elements only), a dtype the kernels compute."""
    for name, tensor in (("input", input), *parameters):
        if tensor is not None and not (tensor.is_cpu and (tensor is input or tensor.dim() == 1)):
            if not tensor.is_cpu:
                raise RuntimeError(f"[{_layer(module)}] {name} must be a CPU tensor (normkern's kernels run on the "
                                   f"CPU), got a tensor on {tensor.device}")
            raise NotSupportedError(f"[{_layer(module)}] {name} must be 1-D (C,), got shape {tuple(tensor.shape)}")
    if input.dtype not in COMPUTED:
        raise NotSupportedError(f"[{_layer(module)}] input dtype must be float32, float16 or bfloat16 (what "
                                f"normkern's kernels compute; torch.nn's layer also computes {input.dtype}), "
                                f"got {input.dtype}")


def _check_dtypes(module, op: str, input: torch.Tensor, parameters, *, dispatch_first: bool) -> None:
    """ATen's CPU dtype rules, then normkern's.

    ATen dispatches on the input's dtype (floating types only: NotImplementedError) and, when the first defined
    parameter's dtype differs from the input's (``is_mixed_type``), takes only float32 parameters with a
    float16/bfloat16 input (``check_mixed_data_type``). batch_norm dispatches before the mixed check,
    group_norm after it. A later parameter of yet another dtype is no case ATen checks; normkern refuses it.
    """
    dtype = input.dtype
    defined = [(name, p) for name, p in parameters if p is not None]
    if dtype in COMPUTED and all(p.dtype == dtype for _, p in defined):
        return  # one computed dtype throughout: no rule to break
    if dispatch_first and not input.is_floating_point():
        raise NotImplementedError(f'"{op}" not implemented for \'{_c10_name(dtype)}\'')
    if defined and defined[0][1].dtype != dtype:
        if any(p.dtype != torch.float32 for _, p in defined):
            raise RuntimeError("mixed dtype (CPU): expect parameter to have scalar type of Float")
        if dtype not in _REDUCED:
            raise RuntimeError("mixed dtype (CPU): all inputs must share same datatype.")
    if not input.is_floating_point():
        raise NotImplementedError(f'"{op}" not implemented for \'{_c10_name(dtype)}\'')
    for name, p in defined:
        if p.dtype != defined[0][1].dtype:
            raise RuntimeError(f"[{_layer(module)}] {name} dtype must be that of {defined[0][0]} "
                               f"({defined[0][1].dtype}), got {p.dtype}")


def transform_active() -> bool:
    """Whether a torch.func transform (grad, vmap, jacrev, ...) is running."""
    return _peek_interpreter_stack() is not None


def _transform_in_call() -> bool:
    """``transform_active`` where a call's checks ask it: never inside a torch.compile trace, which does not follow
    functorch's stack."""
    return not torch.compiler.is_compiling() and transform_active()


# functorch's stack of active transforms (torch 2.13 has it: a test checks); a torch without it has no torch.func
_peek_interpreter_stack = getattr(torch._C._functorch, "peek_interpreter_stack", lambda: None)


def batch_norm(module, input: torch.Tensor, *, synchronized: bool = False) -> BatchNormCall:
    """Check a batch norm layer's call as ``torch.nn`` does; nothing is changed yet.

    ``synchronized``: the call runs SyncBatchNorm's cross-process function, as torch.nn.SyncBatchNorm does when
    a process group of more than one rank is initialized in training; that path makes none of F.batch_norm's
    checks (one value per channel is enough across ranks, eps is not checked), only the kernels' own.
    """
    running_mean, running_var = module.running_mean, module.running_var
    training = module.training or (running_mean is None and running_var is None)
    if module.training and not module.track_running_stats:
        running_mean = running_var = None
    weight, bias, eps = module.weight, module.bias, module.eps
    if not synchronized:
        if training:
            _verify_batch_size(input.size())
        if training and eps <= 0.0:
            raise ValueError(f"batch_norm eps must be positive during training, but got {eps}")
        if eps < 0.0:
            raise ValueError(f"batch_norm eps must be non-negative, but got {eps}")
    parameters = (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias))
    empty = input.numel() == 0
    if not empty:
        channels = input.shape[1]
        for name, value in parameters:
            if value is None:
                if not training and name.startswith("running"):
                    raise RuntimeError(f"{name} must be defined in evaluation mode")
            elif value.numel() != channels:
                raise RuntimeError(f"{name} should contain {channels} elements not {value.numel()}")
        if not synchronized and torch.is_grad_enabled():
            # native_batch_norm's autograd refuses a statistic it cannot differentiate
            for name, value in parameters[:2]:
                if value is not None and value.requires_grad:
                    raise RuntimeError(f"The function 'native_batch_norm' is not differentiable with respect to "
                                       f"argument '{name}'. This input cannot have requires_grad True.")
        _check_dtypes(module, "batch_norm", input, parameters[2:] + parameters[:2], dispatch_first=True)
    _check_own(module, input, () if empty else parameters)
    transform = _transform_in_call()
    one_statistic = training and (running_mean is None) != (running_var is None)
    if synchronized and transform:
        raise NotSupportedError(f"[{_layer(module)}] the synchronized batch norm across processes does not run "
                                "under torch.func transforms (vmap, grad, ...), nor does torch.nn.SyncBatchNorm's")
    if synchronized and one_statistic:
        raise NotSupportedError(f"[{_layer(module)}] running_mean and running_var must both be tensors or both "
                                "None in a synchronized batch norm")
    torch_function = not synchronized and (empty or transform or one_statistic)
    return BatchNormCall(training, running_mean, running_var, torch_function)


def count_batch(module) -> float:
    """Count a training batch (``num_batches_tracked``) and return the running statistics' update factor, as
    torch.nn's ``_BatchNorm.forward``: ``momentum``, or ``1 / num_batches_tracked`` when momentum is None."""
    factor = 0.0 if module.momentum is None else module.momentum
    if module.training and module.track_running_stats and module.num_batches_tracked is not None:
        module.num_batches_tracked.add_(1)
        if module.momentum is None:
            factor = 1.0 / float(module.num_batches_tracked)
    return factor


def group_norm(module, input: torch.Tensor) -> bool:
    """Check a GroupNorm call as ``torch.nn.functional.group_norm`` and ATen's ``group_norm`` do (in training
    and eval alike); True when torch's own function answers it (an empty input, a torch.func transform)."""
    groups, weight, bias = module.num_groups, module.weight, module.bias
    if input.dim() < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.dim()}")
    _verify_batch_size([input.size(0) * input.size(1) // groups, groups] + list(input.size()[2:]))
    if groups <= 0:
        raise RuntimeError(f"Expected num groups to be greater than 0, got {groups}")
    shape = list(input.shape)
    if input.shape[1] % groups != 0:
        raise RuntimeError("Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {shape} and num_groups={groups}")
    for name, value in (("weight", weight), ("bias", bias)):
        if value is not None and (value.dim() != 1 or value.numel() != input.shape[1]):
            raise RuntimeError(f"Expected {name} to be a vector of size equal to the number of channels in input, "
                               f"but got {name} of shape {list(value.shape)} and input of shape {shape}")
    parameters = (("weight", weight), ("bias", bias))
    _check_dtypes(module, "group_norm", input, parameters, dispatch_first=False)
    _check_own(module, input, parameters)
    return input.numel() == 0 or _transform_in_call()
