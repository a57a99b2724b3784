"""Backward passes that build a graph (``create_graph=True``: a gradient penalty, a Hessian-vector product).

normkern's kernels compute a gradient, not a graph of one, so a layer's backward in grad mode computes instead
with torch's own differentiable form of the layer (``torch.nn.functional.batch_norm`` / ``group_norm`` on the
saved input and parameters): the first-order gradient and every derivative of it are then torch.nn's. Where
torch.nn has no such derivative (the synchronized batch norm across processes), the gradient is normkern's and
differentiating it again raises an error that says so.
"""

from __future__ import annotations

import torch


def differentiable_backward(ctx, grad_output: torch.Tensor, function, inputs: tuple) -> tuple:
    """The gradients of ``function(*inputs)`` (the layer's output, recomputed in torch's differentiable ops)
    against ``grad_output``, with a graph, for the inputs the autograd node needs (None for the others)."""
    wanted = [i for i, tensor in enumerate(inputs) if tensor is not None and ctx.needs_input_grad[i]]
    grads = [None] * len(inputs)
    if wanted:
        with torch.enable_grad():
            output = function(*inputs)
        found = torch.autograd.grad(output, [inputs[i] for i in wanted], grad_output, create_graph=True)
        for i, grad in zip(wanted, found, strict=True):
            grads[i] = grad
    return tuple(grads)


class _FirstOrderOnly(torch.autograd.Function):
    """The identity on a gradient whose own derivative does not exist; differentiating it raises. The tensors
    the gradient depends on (``anchors``) are inputs too, so that it is part of their graph."""

    @staticmethod
    def forward(ctx, grad, what, *anchors):
        ctx.what = what
        return grad.view_as(grad)

    @staticmethod
    def backward(ctx, *_):
        raise RuntimeError(f"normkern.torch: {ctx.what} has no double backward; its gradient was computed with "
                           "create_graph=True and cannot be differentiated again")


def first_order_only(grads: tuple, what: str, anchors: tuple) -> tuple:
    """``grads`` as they are, each marked so that a second backward through it raises, naming ``what``;
    ``anchors``: the tensors the gradients were computed from (the output gradient, the saved input, ...)."""
    anchors = tuple(a for a in anchors if a is not None and a.requires_grad)
    if not anchors:
        return grads
    return tuple(None if grad is None else _FirstOrderOnly.apply(grad, what, *anchors) for grad in grads)
