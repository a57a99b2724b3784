"""A layer's call path, bound once to its shapes: what a repeated training or evaluation step runs.

A layer call with a new signature (``step_key``: the input's shape and dtype, the mode, eps, the soc, the
determinism setting, and each parameter and buffer by dtype, shape and storage address) passes every check of
``_contract`` (torch.nn's, in torch.nn's order) and binds the normkern ops it runs (``registry`` ``bind``: the
op's checks and plan, once) into a step kept on the layer. A call that repeats the signature goes from the
layer's ``forward`` to those ops' Bound calls with the tensors as NumPy views: no generic conversion, no
signature matching, the parameters' and buffers' views made once (their storage address is in the key, so a
replaced tensor or ``.data`` means a new step). What can change between calls of one signature is checked on
each: the key itself (device through the address, dtype, shape), and a torch.func transform.
"""

from __future__ import annotations

import numpy as np
import torch

import tiling

from .. import registry
from ..kernels.running import inverse_std, update_running
from ..runtime.settings import DETERMINISTIC, resolve_soc
from . import _layout
from ._tensors import to_numpy, to_tensor

#: Steps a layer keeps (signatures seen); past this many they are dropped and bound anew.
MAX_STEPS = 16
F32 = np.float32


def described(tensors) -> tuple:
    """Parameters and buffers as a step's key holds them: each by dtype, shape and storage address (None for
    None)."""
    return tuple(None if t is None else (t.dtype, t.shape, t.data_ptr()) for t in tensors)


def steps_of(module) -> dict:
    """The layer's steps by key (made on first use: a layer made without ``__init__``, unpickled, has none)."""
    steps = module.__dict__.get("_normkern_steps")
    if steps is None:
        steps = module.__dict__["_normkern_steps"] = {}
    return steps


def without_steps(state: dict) -> dict:
    """A layer's state for pickling and copying, without its bound steps (they hold views of its tensors)."""
    state = dict(state)
    state.pop("_normkern_steps", None)
    return state


def keep(module, key, step):
    steps = steps_of(module)
    if len(steps) >= MAX_STEPS:
        steps.clear()
    steps[key] = step
    return step


def bound(op: str, *args, **kwargs):
    """``op`` bound (every check, the plan) on these arrays: what runs a call of the same signature."""
    return registry.get(op, "normkern.torch").bind(*args, **kwargs).bound.entry


class _Channel:
    """A per-channel parameter or buffer as the ops take it: float32, a view made once when it is float32
    (its address is in the step's key), else converted on each call from the tensor, which may have changed."""

    __slots__ = ("tensor", "view")

    def __init__(self, tensor: torch.Tensor | None) -> None:
        self.tensor = tensor
        self.view = to_numpy(tensor) if tensor is not None and tensor.dtype == torch.float32 else None

    def get(self):
        if self.view is not None or self.tensor is None:
            return self.view
        return to_numpy(self.tensor.detach().to(torch.float32))


def batch_norm_key(module, input: torch.Tensor, training: bool, tensors: tuple):
    """``tensors``: the layer's weight, bias, running_mean, running_var and num_batches_tracked. None (no step:
    every call through the full checks) while a running statistic requires grad, which torch refuses in grad
    mode."""
    running_mean, running_var = tensors[2], tensors[3]
    if (running_mean is not None and running_mean.requires_grad) or (running_var is not None and
                                                                    running_var.requires_grad):
        return None
    return (input.shape, input.dtype, training, module.track_running_stats, module.momentum, module.eps,
            module.soc, DETERMINISTIC.get(), described(tensors))


class BatchNormStep:
    """A batch norm layer bound to one signature. Forward: ``batch_norm`` (one compiled call, the running
    statistics updated in it) where the SoC has its plan (host), else ``batch_norm_stats`` (the running
    statistics updated as torch.nn does) and ``batch_norm_elemt``, or ``batch_norm_elemt`` with the running
    statistics in evaluation. Backward: ``fast_batch_norm_backward`` in training; ``batch_norm_elemt`` and
    ``batch_norm_backward_reduce`` in evaluation."""

    def __init__(self, module, input: torch.Tensor, call) -> None:
        soc, eps = module.soc, module.eps
        x = to_numpy(_layout.contiguous(input))
        channels = input.shape[1]
        self.training, self.eps, self.soc = call.training, eps, soc
        self.count = input.numel() // channels
        self.weight, self.bias = _Channel(module.weight), _Channel(module.bias)
        self.running_mean, self.running_var = call.running_mean, call.running_var
        self._running_views = None
        if call.running_mean is not None and call.running_mean.dtype == torch.float32 and \
                call.running_var.dtype == torch.float32:
            self._running_views = (to_numpy(call.running_mean), to_numpy(call.running_var))
        tracked = module.num_batches_tracked
        counts = module.training and module.track_running_stats and tracked is not None
        #: ``num_batches_tracked`` as a NumPy view (counted on each training call), or None (not counted)
        self._tracked = to_numpy(tracked) if counts else None
        self._momentum = module.momentum
        self._backward: dict = {}
        w, b = self.weight.get(), self.bias.get()
        #: ``batch_norm`` bound, where the SoC has its plan: a forward in one call
        self._fused = None
        if tiling.support("batch_norm", resolve_soc(soc, "batch_norm")).runs:
            # the op updates the running statistics when momentum is fixed; a cumulative average (momentum
            # None: a factor that changes every step) is updated after it, from the batch's statistics
            self._fused_running = None, None
            if call.running_mean is not None and (not self.training or self._momentum is not None):
                self._fused_running = to_numpy(call.running_mean), to_numpy(call.running_var)
            self._fused_updates = self.training and self._fused_running[0] is not None
            momentum = self._momentum if self._fused_updates else 0.0
            self._fused = bound("batch_norm", x, w, b, *self._fused_running, self.training, momentum, eps, soc=soc)
            return
        stats = np.empty(channels, F32)
        if self.training:
            self.stats = bound("batch_norm_stats", x, eps, soc=soc)
        self.elemt = bound("batch_norm_elemt", x, w, b, stats, stats, eps, soc=soc)

    def count_batch(self) -> float:
        """``_contract.count_batch`` on the bound buffer: count the batch, return the update factor."""
        if self._tracked is None:
            return 0.0 if self._momentum is None else self._momentum
        self._tracked[()] += 1  # in place through the view (as an item: a 0-d in-place ufunc costs ten times more)
        return 1.0 / float(self._tracked) if self._momentum is None else self._momentum

    # --- training ---------------------------------------------------------------------------------------
    def train_forward(self, x: np.ndarray, factor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(output, mean, invstd) of the batch; the running statistics updated with ``factor``."""
        if self._fused is not None:
            output, mean, invstd = self._fused(x, self.weight.get(), self.bias.get(), *self._fused_running, None,
                                               None, None)
            if self.running_mean is not None and not self._fused_updates:
                self._update_running(mean, invstd, factor)
            return output, mean, invstd
        mean, invstd = self.stats(x, None, None)
        if self.running_mean is not None:
            self._update_running(mean, invstd, factor)
        return self.elemt(x, self.weight.get(), self.bias.get(), mean, invstd, None), mean, invstd

    def _update_running(self, mean, invstd, factor: float) -> None:
        """torch.nn's running statistics update from the batch's ``mean`` and ``invstd`` (float32):
        ``running = running * (1 - factor) + batch * factor``, the variance unbiased (``* n / (n - 1)``). The
        batch variance is ``1 / (invstd * invstd) - eps``, as PyTorch's SyncBatchNorm derives it
        (docs/torch.md). float32 buffers are updated in place through their NumPy views by one compiled loop
        (``kernels.running``: the same float32 operations as torch's ops), others by torch's ops."""
        keep, unbiased = 1.0 - factor, factor * self.count / (self.count - 1)
        if self._running_views is not None:
            update_running(*self._running_views, mean, invstd, F32(self.eps), F32(keep), F32(factor), F32(unbiased))
            return
        with torch.no_grad():
            m, r = torch.from_numpy(mean), torch.from_numpy(invstd)
            variance = torch.reciprocal(r * r).sub_(self.eps)
            self.running_mean.mul_(keep).add_(m * factor)
            self.running_var.mul_(keep).add_(variance * unbiased)

    def train_backward(self, dy: np.ndarray, x: np.ndarray, mean, invstd, mask):
        """(grad_input, grad_weight, grad_bias) arrays, None where ``mask`` is False."""
        weight = self.weight.get()
        run = self._backward.get(mask)
        if run is None:  # bound on this call's arrays (a step keeps no array of a call)
            run = self._backward[mask] = bound("fast_batch_norm_backward", dy, x, weight, None, None, mean, invstd,
                                               True, self.eps, mask, soc=self.soc)
        return run(dy, x, weight, None, None, mean, invstd, None, None, None)

    # --- evaluation -------------------------------------------------------------------------------------
    def eval_forward(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(output, mean, invstd) with the running statistics."""
        if self._fused is not None:
            return self._fused(x, self.weight.get(), self.bias.get(), *self._fused_running, None, None, None)
        mean, invstd = self.eval_statistics()
        return self.elemt(x, self.weight.get(), self.bias.get(), mean, invstd, None), mean, invstd

    def eval_statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """(mean, invstd) of the running statistics, float32: ``1 / sqrt(running_var + eps)``."""
        if self._running_views is not None:
            mean, var = self._running_views
        else:
            mean = to_numpy(self.running_mean.detach().to(torch.float32))
            var = to_numpy(self.running_var.detach().to(torch.float32))
        invstd = np.empty(var.shape[0], F32)
        inverse_std(var, F32(self.eps), invstd)
        return mean, invstd

    def eval_backward(self, dy: np.ndarray, x: np.ndarray, mean, invstd, mask):
        """(grad_input, grad_weight, grad_bias) with the running statistics: ``dy * invstd * weight`` (elemt
        with a zero mean) and the two sums of ``batch_norm_backward_reduce``."""
        weight = self.weight.get()
        grad_input = grad_weight = grad_bias = None
        if mask[0]:
            zeros = self._backward.get("zeros")
            if zeros is None:
                zeros = self._backward["zeros"] = np.zeros_like(mean)
            run = self._backward.get("elemt")
            if run is None:  # batch_norm_elemt without a bias, a zero mean
                run = self._backward["elemt"] = bound("batch_norm_elemt", dy, weight, None, zeros, invstd, self.eps,
                                                      soc=self.soc)
            grad_input = run(dy, weight, None, zeros, invstd, None)
        if weight is not None and (mask[1] or mask[2]):
            key = ("reduce", mask[1], mask[2])
            run = self._backward.get(key)
            if run is None:
                run = self._backward[key] = bound("batch_norm_backward_reduce", dy, x, mean, invstd, None, False,
                                                  mask[1], mask[2], soc=self.soc)
            _, _, grad_weight, grad_bias = run(dy, x, mean, invstd, None, None, None, None, None)
        return grad_input, grad_weight, grad_bias


def group_norm_key(module, input: torch.Tensor, weight, bias):
    return (input.shape, input.dtype, module.num_groups, module.eps, module.soc, DETERMINISTIC.get(),
            described((weight, bias)))


class GroupNormStep:
    """A GroupNorm layer bound to one signature: PyTorch's ``native_group_norm`` forward (it gives the
    per-(N, group) mean and rstd), normkern's ``group_norm_backward``."""

    def __init__(self, module, input: torch.Tensor) -> None:
        n, c = input.shape[:2]
        self.shape = (n, c, input.numel() // (n * c) if n * c else 0, module.num_groups)
        self.eps, self.soc = module.eps, module.soc
        self.weight = module.weight
        self._gamma = None
        self._backward: dict = {}

    def gamma(self, like: np.ndarray):
        """The weight in the statistics' dtype: a view made once when it has it, else converted each call."""
        if self.weight is None:
            return None
        if self._gamma is None and self.weight.dtype == _TORCH_DTYPE.get(like.dtype):
            self._gamma = to_numpy(self.weight)
        return self._gamma if self._gamma is not None else to_numpy(self.weight.detach().to(_torch_dtype(like)))

    def backward(self, dy: np.ndarray, x: np.ndarray, mean: np.ndarray, rstd: np.ndarray, mask):
        n, c, hxw, groups = self.shape
        gamma = self.gamma(mean)
        run = self._backward.get(mask)
        if run is None:
            run = self._backward[mask] = bound("group_norm_backward", dy, x, mean, rstd, gamma, n, c, hxw, groups,
                                               mask, soc=self.soc)
        return run(dy, x, mean, rstd, gamma, None, None, None)


_TORCH_DTYPE = {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16}


def _torch_dtype(a: np.ndarray) -> torch.dtype:
    return _TORCH_DTYPE.get(a.dtype, torch.bfloat16)


def output_tensor(result: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """A kernel's (N, C, ...) result as the layer's output, in the layout torch.nn gives it."""
    return _layout.as_output(to_tensor(result), like)


def input_grad_tensor(result: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return _layout.as_input_grad(to_tensor(result), like)


def channel_grad(result, like: torch.Tensor | None):
    """A parameter's gradient array as a tensor of the parameter's dtype (None stays None)."""
    if result is None:
        return None
    grad = to_tensor(result)
    return grad if like is None or grad.dtype == like.dtype else grad.to(like.dtype)
