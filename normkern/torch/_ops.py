"""The layers as PyTorch custom operators (``torch.ops.normkern.*``): what torch.compile and torch.export trace.

An eager layer call keeps its lean path (``batchnorm``, ``groupnorm``: a bound step, an ``autograd.Function``); a
call being traced (:func:`tracing`: torch.compile's Dynamo, torch.export, or a fake or functional tensor reaching the
layer) goes through these operators instead, each with a fake kernel (shapes, dtypes and strides from the inputs
alone) and an autograd formula, so a graph holds them as single nodes:

- ``batch_norm_training``: the batch's statistics and the output; the running statistics' update is returned, not
  made in place (``new_running_mean``, ``new_running_var``), and the layer copies it into its buffers in the traced
  code: PyTorch registers autograd only for functional operators. ``num_batches_tracked`` is counted by the layer
  before the call, which reads it for ``momentum=None``.
- ``batch_norm_inference``: normalization with the running statistics; its backward reads them as they are when it
  runs, as torch.nn's does.
- ``group_norm``: PyTorch's ``native_group_norm`` forward, so that its backward is normkern's.
- ``batch_norm_training_backward``, ``batch_norm_inference_backward``, ``group_norm_backward``: the kernels of the
  eager layers' backward passes.

Outputs a mask leaves out are empty tensors (a custom operator returns no None). The kernels are the eager path's,
through the ops' signature caches, so a traced layer gives the eager layer's bits.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

import tiling

from ..runtime.settings import DETERMINISTIC
from . import _contract, _layout, _sync, _threads
from ._autograd import differentiable_backward
from ._steps import MAX_STEPS, BatchNormStep, channel_grad, described, input_grad_tensor, output_tensor
from ._tensors import tensor_op, to_numpy, to_tensor

F32 = torch.float32
_fast_backward = tensor_op("fast_batch_norm_backward")
_gn_backward = tensor_op("group_norm_backward")


def tracing(input: Tensor) -> bool:
    """Whether a layer call is being traced: under torch.compile or torch.export, or on a tensor subclass (the fake
    and functional tensors of a trace)."""
    return type(input) is not torch.Tensor or torch.compiler.is_compiling()


def soc_name(module) -> str:
    """The layer's ``soc`` as an operator argument: a preset's name ("" for the context's default)."""
    soc = module.soc
    if soc is None or isinstance(soc, str):
        return soc or ""
    return _preset_name(type(module).__name__, soc)


@torch.compiler.assume_constant_result
def _preset_name(layer: str, soc) -> str:
    """A SocSpec's preset name (a constant of the trace: Dynamo does not follow the host preset's making)."""
    if isinstance(soc, tiling.SocSpec) and soc.name in tiling.soc_names() and tiling.get_soc(soc.name) == soc:
        return soc.name
    raise _contract.NotSupportedError(f"[normkern.torch.{layer}] under torch.compile and torch.export "
                                      f"the soc must be a preset's name (one of {', '.join(tiling.soc_names())}), got "
                                      f"a SocSpec of its own ({soc.name})")


def _soc(name: str):
    return name or None


def _empty(like: Tensor) -> Tensor:
    """A masked output: an empty tensor."""
    return like.new_empty((0,))


# --- batch norm ---------------------------------------------------------------------------------------------------

#: Steps of the operators by signature, each bound to running statistics of its own that a call copies in: a traced
#: graph may hand the operator new tensors on every call, and a step binds its tensors once.
_STEPS: dict = {}


def _step(input, weight, bias, running_mean, running_var, training, momentum, eps, soc):
    """A step (``_steps.BatchNormStep``) for this signature and its running statistics, the callers' copied in."""
    held = tuple(None if t is None else (t.dtype, t.shape) for t in (running_mean, running_var))
    key = (input.shape, input.dtype, training, momentum, eps, soc, DETERMINISTIC.get(),
           described((weight, bias)), held)
    found = _STEPS.get(key)
    if found is None:
        mine = tuple(None if t is None else t.detach().clone() for t in (running_mean, running_var))
        layer = SimpleNamespace(weight=weight, bias=bias, num_batches_tracked=None, momentum=momentum, eps=eps,
                                soc=_soc(soc), training=training, track_running_stats=running_mean is not None)
        step = BatchNormStep(layer, input, _contract.BatchNormCall(training, *mine, False))
        if len(_STEPS) >= MAX_STEPS:
            _STEPS.clear()
        found = _STEPS[key] = (step, mine)
    step, mine = found
    with torch.no_grad():
        for own, theirs in zip(mine, (running_mean, running_var), strict=True):
            if own is not None:
                own.copy_(theirs)
    return step, mine


@torch.library.custom_op("normkern::batch_norm_training", mutates_args=())
def batch_norm_training(input: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,
                        running_var: Tensor | None, num_batches_tracked: Tensor | None, momentum: float | None,
                        eps: float, soc: str) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Batch norm with the batch's statistics: ``(output, mean, invstd, new_running_mean, new_running_var)`` (the
    last two empty without running statistics). The update factor is ``momentum``, or ``1 / num_batches_tracked``
    (already counted) when it is None."""
    channels = input.shape[1]
    if input.numel() == 0:  # torch's answer: nothing to normalize, the running statistics unchanged
        output = F.batch_norm(input, None, None, weight, bias, True, 0.0, eps).clone()
        zeros = torch.zeros(channels, dtype=F32)
        return output, zeros, zeros.clone(), *(_copy_or_empty(t, input) for t in (running_mean, running_var))
    if momentum is not None:
        factor = momentum
    else:
        factor = 0.0 if num_batches_tracked is None else 1.0 / float(num_batches_tracked)
    step, mine = _step(input, weight, bias, running_mean, running_var, True, momentum, eps, soc)
    output, mean, invstd = step.train_forward(to_numpy(_layout.contiguous(input)), factor)
    news = tuple(_copy_or_empty(t, input) for t in mine)
    return output_tensor(output, input), to_tensor(mean).to(F32), to_tensor(invstd).to(F32), *news


def _copy_or_empty(tensor, like):
    return _empty(like) if tensor is None else tensor.detach().clone()


@batch_norm_training.register_fake
def _(input, weight, bias, running_mean, running_var, num_batches_tracked, momentum, eps, soc):
    channels = input.shape[1]
    output = torch.empty(input.shape, dtype=input.dtype, memory_format=_layout.suggested_format(input))
    news = tuple(_empty(input) if t is None else torch.empty_like(t, memory_format=torch.contiguous_format)
                 for t in (running_mean, running_var))
    return output, input.new_empty(channels, dtype=F32), input.new_empty(channels, dtype=F32), *news


def _training_context(ctx, inputs, output):
    input, weight, bias, _, _, _, _, eps, soc = inputs
    _, mean, invstd, new_mean, new_var = output
    ctx.save_for_backward(input, weight, bias, mean, invstd)
    ctx.eps, ctx.soc = eps, soc
    ctx.mark_non_differentiable(mean, invstd, new_mean, new_var)


def _training_backward(ctx, grad_output, *_):
    input, weight, bias, mean, invstd = ctx.saved_tensors
    if torch.is_grad_enabled():  # a graph of the gradient: torch's formulas (``_autograd``)
        eps = ctx.eps
        grads = differentiable_backward(
            ctx, grad_output, lambda x, w, b: F.batch_norm(x, None, None, w, b, True, 0.0, eps), (input, weight, bias))
        return (*grads, None, None, None, None, None, None)
    need = ctx.needs_input_grad
    mask = [bool(need[0]), bool(need[1]) and weight is not None, bool(need[2]) and weight is not None]
    grads = torch.ops.normkern.batch_norm_training_backward(grad_output, input, weight, mean, invstd, ctx.eps, mask,
                                                            ctx.soc)
    return (*(g if m else None for g, m in zip(grads, mask, strict=True)), None, None, None, None, None, None)


batch_norm_training.register_autograd(_training_backward, setup_context=_training_context)


@torch.library.custom_op("normkern::batch_norm_training_backward", mutates_args=())
def batch_norm_training_backward(grad_output: Tensor, input: Tensor, weight: Tensor | None, mean: Tensor,
                                 invstd: Tensor, eps: float, output_mask: list[bool],
                                 soc: str) -> tuple[Tensor, Tensor, Tensor]:
    """``(grad_input, grad_weight, grad_bias)`` of ``batch_norm_training`` (``fast_batch_norm_backward``); an output
    the mask leaves out is empty."""
    if input.numel() == 0:
        return _empty_grads(input, weight, output_mask)
    w = None if weight is None else weight.detach().to(mean.dtype)
    dy, x = _layout.contiguous(grad_output), _layout.contiguous(input)
    grads = _fast_backward(dy, x, w, None, None, mean, invstd, True, eps, tuple(output_mask), soc=_soc(soc))
    return _grads(grads, input, weight, output_mask)


def _grads(grads, input, weight, mask):
    """The kernels' gradients in the layouts and dtypes torch.nn gives them; masked ones empty."""
    grad_input, grad_weight, grad_bias = grads
    return (_layout.as_input_grad(grad_input, input) if mask[0] else _empty(input),
            _like(grad_weight, weight) if mask[1] else _empty(input),
            _like(grad_bias, weight) if mask[2] else _empty(input))


def _like(grad: Tensor, weight: Tensor | None) -> Tensor:
    return grad if weight is None or grad.dtype == weight.dtype else grad.to(weight.dtype)


def _empty_grads(input, weight, mask):
    """An empty batch's gradients (zeros for the parameters); the backward operators' fake kernels give these
    shapes too."""
    channels = input.shape[1]
    dtype = input.dtype if weight is None else weight.dtype
    return (torch.empty_like(input) if mask[0] else _empty(input),
            *(input.new_zeros(channels, dtype=dtype) if m else _empty(input) for m in mask[1:]))


@batch_norm_training_backward.register_fake
def _(grad_output, input, weight, mean, invstd, eps, output_mask, soc):
    return _empty_grads(input, weight, output_mask)


@torch.library.custom_op("normkern::batch_norm_inference", mutates_args=())
def batch_norm_inference(input: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor,
                         running_var: Tensor, eps: float, soc: str) -> Tensor:
    """Batch norm with the running statistics."""
    if input.numel() == 0:
        return F.batch_norm(input, running_mean, running_var, weight, bias, False, 0.0, eps).clone()
    step, _ = _step(input, weight, bias, running_mean, running_var, False, 0.0, eps, soc)
    return output_tensor(step.eval_forward(to_numpy(_layout.contiguous(input)))[0], input)


@batch_norm_inference.register_fake
def _(input, weight, bias, running_mean, running_var, eps, soc):
    return torch.empty(input.shape, dtype=input.dtype, memory_format=_layout.suggested_format(input))


def _inference_context(ctx, inputs, output):
    input, weight, bias, running_mean, running_var, eps, soc = inputs
    ctx.save_for_backward(input, weight, bias)
    # the buffers themselves, not saved tensors: the backward reads them as they are when it runs, as torch.nn's
    # does after a training step has updated them in place
    ctx.running, ctx.eps, ctx.soc = (running_mean, running_var), eps, soc


def _inference_backward(ctx, grad_output):
    input, weight, bias = ctx.saved_tensors
    running_mean, running_var = ctx.running
    if torch.is_grad_enabled():
        eps = ctx.eps
        grads = differentiable_backward(
            ctx, grad_output, lambda x, w, b: F.batch_norm(x, running_mean, running_var, w, b, False, 0.0, eps),
            (input, weight, bias))
        return (*grads, None, None, None, None)
    need = ctx.needs_input_grad
    mask = [bool(need[0]), bool(need[1]) and weight is not None, bool(need[2]) and weight is not None]
    grads = torch.ops.normkern.batch_norm_inference_backward(grad_output, input, weight, running_mean, running_var,
                                                             ctx.eps, mask, ctx.soc)
    return (*(g if m else None for g, m in zip(grads, mask, strict=True)), None, None, None, None)


batch_norm_inference.register_autograd(_inference_backward, setup_context=_inference_context)


@torch.library.custom_op("normkern::batch_norm_inference_backward", mutates_args=())
def batch_norm_inference_backward(grad_output: Tensor, input: Tensor, weight: Tensor | None, running_mean: Tensor,
                                  running_var: Tensor, eps: float, output_mask: list[bool],
                                  soc: str) -> tuple[Tensor, Tensor, Tensor]:
    """``(grad_input, grad_weight, grad_bias)`` of ``batch_norm_inference``: ``dy * invstd * weight``
    (``batch_norm_elemt`` with a zero mean) and the two sums of ``batch_norm_backward_reduce``."""
    if input.numel() == 0:
        return _empty_grads(input, weight, output_mask)
    # the eager layer's evaluation backward, on a step bound to the running statistics as they are now
    step, _ = _step(input, weight, None, running_mean, running_var, False, 0.0, eps, soc)
    grad_input, grad_weight, grad_bias = step.eval_backward(
        to_numpy(_layout.contiguous(grad_output)), to_numpy(_layout.contiguous(input)), *step.eval_statistics(),
        tuple(output_mask))
    return (input_grad_tensor(grad_input, input) if output_mask[0] else _empty(input),
            channel_grad(grad_weight, weight) if output_mask[1] else _empty(input),
            channel_grad(grad_bias, weight) if output_mask[2] else _empty(input))


@batch_norm_inference_backward.register_fake
def _(grad_output, input, weight, running_mean, running_var, eps, output_mask, soc):
    return _empty_grads(input, weight, output_mask)


# --- group norm ---------------------------------------------------------------------------------------------------

@torch.library.custom_op("normkern::group_norm", mutates_args=())
def group_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None, num_groups: int, eps: float,
               soc: str) -> tuple[Tensor, Tensor, Tensor]:
    """``(output, mean, rstd)``: PyTorch's ``native_group_norm`` on the input in its suggested memory format, whose
    backward is normkern's ``group_norm_backward``."""
    return _native_group_norm(input, weight, bias, num_groups, eps)


def _native_group_norm(input, weight, bias, num_groups, eps):
    n, c = input.shape[:2]
    hxw = input.numel() // (n * c) if n * c else 0
    x = input.contiguous(memory_format=_layout.suggested_format(input))
    return torch.native_group_norm(x, None if weight is None else weight.contiguous(),
                                   None if bias is None else bias.contiguous(), n, c, hxw, num_groups, eps)


@group_norm.register_fake
def _(input, weight, bias, num_groups, eps, soc):
    output, mean, rstd = _native_group_norm(input, weight, bias, num_groups, eps)
    # the CPU kernel gives float32 statistics for a low-precision input with float32 parameters (its mixed-type
    # path); the meta function gives the input's dtype
    mixed = [p.dtype for p in (weight, bias) if p is not None and p.dtype != input.dtype]
    return output, mean.to(mixed[0] if mixed else input.dtype), rstd.to(mixed[0] if mixed else input.dtype)


def _group_norm_context(ctx, inputs, output):
    input, weight, bias, num_groups, eps, soc = inputs
    _, mean, rstd = output
    ctx.save_for_backward(input, weight, bias, mean, rstd)
    ctx.groups, ctx.eps, ctx.soc = num_groups, eps, soc
    ctx.mark_non_differentiable(mean, rstd)


def _group_norm_backward(ctx, grad_output, *_):
    input, weight, bias, mean, rstd = ctx.saved_tensors
    if torch.is_grad_enabled():
        groups, eps = ctx.groups, ctx.eps
        grads = differentiable_backward(ctx, grad_output, lambda x, w, b: F.group_norm(x, groups, w, b, eps),
                                        (input, weight, bias))
        return (*grads, None, None, None)
    need = ctx.needs_input_grad
    mask = [bool(need[0]), bool(need[1]) and weight is not None, bool(need[2]) and bias is not None]
    grads = torch.ops.normkern.group_norm_backward(grad_output, input, mean, rstd, weight, ctx.groups, mask, ctx.soc)
    return (*(g if m else None for g, m in zip(grads, mask, strict=True)), None, None, None)


group_norm.register_autograd(_group_norm_backward, setup_context=_group_norm_context)


@torch.library.custom_op("normkern::group_norm_backward", mutates_args=())
def group_norm_backward(grad_output: Tensor, input: Tensor, mean: Tensor, rstd: Tensor, weight: Tensor | None,
                        num_groups: int, output_mask: list[bool], soc: str) -> tuple[Tensor, Tensor, Tensor]:
    """``(grad_input, grad_weight, grad_bias)`` of ``group_norm`` (normkern's ``group_norm_backward``); an output the
    mask leaves out is empty."""
    if input.numel() == 0:
        return _empty_grads(input, weight, output_mask)
    n, c = input.shape[:2]
    gamma = None if weight is None else weight.detach().to(mean.dtype)
    grads = _gn_backward(_layout.contiguous(grad_output), _layout.contiguous(input), mean.detach(), rstd.detach(),
                         gamma, n, c, input.numel() // (n * c), num_groups, tuple(output_mask), soc=_soc(soc))
    return _grads(grads, input, weight, output_mask)


@group_norm_backward.register_fake
def _(grad_output, input, mean, rstd, weight, num_groups, output_mask, soc):
    return _empty_grads(input, weight, output_mask)


# --- the synchronized batch norm across ranks ----------------------------------------------------------------------

#: The process groups SyncBatchNorm layers were given, by ``group_name``: an operator takes a group's name, not the
#: group, and a trace sees only a stand-in for it.
_GROUPS: dict = {}


def remember_group(group) -> None:
    """Keep ``group`` under its name for the operators (a layer's ``process_group``, met outside a trace)."""
    _GROUPS[group.group_name] = group


@torch.compiler.assume_constant_result
def group_key(group) -> str:
    """The process group's name as an operator argument: a constant of the trace."""
    return group.group_name


def _group(name: str):
    found = _GROUPS.get(name)
    if found is None and dist.group.WORLD is not None and dist.group.WORLD.group_name == name:
        found = dist.group.WORLD
    if found is None:
        raise RuntimeError(f"normkern.torch: the process group {name!r} is neither the default group nor one a "
                           "SyncBatchNorm layer was made with")
    return found


@torch.library.custom_op("normkern::sync_batch_norm_training", mutates_args=())
def sync_batch_norm_training(input: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,
                             running_var: Tensor | None, num_batches_tracked: Tensor | None, momentum: float | None,
                             eps: float, group: str, soc: str) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The synchronized batch norm of the process group ``group`` (``_sync.forward``): ``(output, mean, invstd,
    counts, new_running_mean, new_running_var)``, counts int32 (world size,)."""
    process_group = _group(group)
    world_size = dist.get_world_size(process_group)
    _threads.share_cores(world_size)
    if momentum is not None:
        factor = momentum
    else:
        factor = 0.0 if num_batches_tracked is None else 1.0 / float(num_batches_tracked)
    news = tuple(None if t is None else t.detach().clone() for t in (running_mean, running_var))
    output, mean, invstd, counts = _sync.forward(input, weight, bias, *news, eps, factor, process_group, world_size,
                                                 _soc(soc))
    output = output.clone() if input.numel() == 0 else output
    return output, mean.to(F32), invstd.to(F32), counts, *(_empty(input) if t is None else t for t in news)


@sync_batch_norm_training.register_fake
def _(input, weight, bias, running_mean, running_var, num_batches_tracked, momentum, eps, group, soc):
    channels = input.shape[1]
    output = torch.empty(input.shape, dtype=input.dtype, memory_format=_layout.suggested_format(input))
    news = tuple(_empty(input) if t is None else torch.empty_like(t, memory_format=torch.contiguous_format)
                 for t in (running_mean, running_var))
    world_size = dist.get_world_size(_group(group))
    return (output, input.new_empty(channels, dtype=F32), input.new_empty(channels, dtype=F32),
            input.new_empty(world_size, dtype=torch.int32), *news)


def _sync_context(ctx, inputs, output):
    input, weight, bias, _, _, _, _, _, group, soc = inputs
    _, mean, invstd, counts, new_mean, new_var = output
    ctx.save_for_backward(input, weight, mean, invstd, counts)
    ctx.group, ctx.soc = group, soc
    ctx.mark_non_differentiable(mean, invstd, counts, new_mean, new_var)


def _sync_backward(ctx, grad_output, *_):
    input, weight, mean, invstd, counts = ctx.saved_tensors
    if torch.is_grad_enabled():
        raise RuntimeError("normkern.torch: the synchronized batch norm across processes has no double backward "
                           "(torch.nn.SyncBatchNorm's has none either)")
    need = ctx.needs_input_grad
    mask = [bool(need[0]), bool(need[1]) and weight is not None, bool(need[2]) and weight is not None]
    grads = torch.ops.normkern.sync_batch_norm_backward(grad_output, input, weight, mean, invstd, counts, mask,
                                                        ctx.group, ctx.soc)
    if input.numel() == 0:  # the rank joined the all-reduce; an empty batch's parameter gradients are None
        mask[1] = mask[2] = False
    return (*(g if m else None for g, m in zip(grads, mask, strict=True)), *(None,) * 7)


sync_batch_norm_training.register_autograd(_sync_backward, setup_context=_sync_context)


@torch.library.custom_op("normkern::sync_batch_norm_backward", mutates_args=())
def sync_batch_norm_backward(grad_output: Tensor, input: Tensor, weight: Tensor | None, mean: Tensor, invstd: Tensor,
                             counts: Tensor, output_mask: list[bool], group: str,
                             soc: str) -> tuple[Tensor, Tensor, Tensor]:
    """``(grad_input, grad_weight, grad_bias)`` of ``sync_batch_norm_training`` (``_sync.backward``: every rank that
    wants grad_input joins the all-reduce); an output the mask leaves out is empty, an empty batch's are zeros."""
    grads = _sync.backward(grad_output, input, weight, mean, invstd, counts, output_mask, _group(group), _soc(soc))
    if input.numel() == 0:
        return _empty_grads(input, weight, output_mask)
    return tuple(g if m else _empty(input) for g, m in zip(grads, output_mask, strict=True))


@sync_batch_norm_backward.register_fake
def _(grad_output, input, weight, mean, invstd, counts, output_mask, group, soc):
    return _empty_grads(input, weight, output_mask)


# --- the layers' traced calls -------------------------------------------------------------------------------------

def batch_norm_layer(module, input: Tensor) -> Tensor:
    """A local batch norm layer's call (every layer but a SyncBatchNorm of two or more ranks) as a traced graph
    holds it: torch.nn's checks, the batch counted, one operator, the running statistics copied back."""
    weight, bias = module.weight, module.bias
    call = _contract.batch_norm(module, input)
    soc = soc_name(module)
    if call.torch_function:
        return F.batch_norm(input, call.running_mean, call.running_var, weight, bias, call.training,
                            _contract.count_batch(module), module.eps)
    if not call.training:
        return batch_norm_inference(input, weight, bias, call.running_mean, call.running_var, module.eps, soc)
    counted = None
    if module.training and module.track_running_stats and module.num_batches_tracked is not None:
        module.num_batches_tracked.add_(1)
        counted = module.num_batches_tracked
    output, _, _, new_mean, new_var = batch_norm_training(input, weight, bias, call.running_mean, call.running_var,
                                                          counted, module.momentum, module.eps, soc)
    if call.running_mean is not None:
        with torch.no_grad():
            call.running_mean.copy_(new_mean)
            call.running_var.copy_(new_var)
    return output


def sync_batch_norm_layer(module, input: Tensor, group, world_size: int) -> Tensor:
    """A SyncBatchNorm call across ranks as a traced graph holds it: the synchronized path's checks, the batch
    counted, one operator, the running statistics copied back."""
    call = _contract.batch_norm(module, input, synchronized=True)
    counted = None
    if module.track_running_stats and module.num_batches_tracked is not None:
        module.num_batches_tracked.add_(1)
        counted = module.num_batches_tracked
    output, _, _, _, new_mean, new_var = sync_batch_norm_training(
        input, module.weight, module.bias, call.running_mean, call.running_var, counted, module.momentum, module.eps,
        group_key(group), soc_name(module))
    if call.running_mean is not None:
        with torch.no_grad():
            call.running_mean.copy_(new_mean)
            call.running_var.copy_(new_var)
    return output


def group_norm_layer(module, input: Tensor) -> Tensor:
    """A GroupNorm call as a traced graph holds it: torch.nn's checks, one operator."""
    weight, bias = module.weight, module.bias
    if _contract.group_norm(module, input):
        return F.group_norm(input, module.num_groups, weight, bias, module.eps)
    return group_norm(input, weight, bias, module.num_groups, module.eps, soc_name(module))[0]


#: The operators, for ``torch.library.opcheck`` and the docs.
OPERATORS = (batch_norm_training, batch_norm_training_backward, batch_norm_inference, batch_norm_inference_backward,
             group_norm, group_norm_backward, sync_batch_norm_training, sync_batch_norm_backward)
