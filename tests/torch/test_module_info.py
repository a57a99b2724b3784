"""PyTorch's own samples for its norm layers (``torch.testing._internal.common_modules.module_db``) run through
the drop-ins against torch.nn on the same inputs: every ``module_inputs_func`` sample of BatchNorm1d/2d/3d and
GroupNorm in training and eval, in float32 and in the low-precision dtypes the ModuleInfo lists (GroupNorm:
float16, bfloat16), SyncBatchNorm (one process) on the BatchNorm samples; outputs, input and parameter gradients,
second derivatives (``create_graph=True``), buffers. Every ``module_error_inputs_func`` sample raises torch's
error class and message, and changes no state; a float64 sample is refused before it changes any."""

import copy

import pytest
import torch
from torch import nn
from torch.testing._internal.common_modules import ModuleErrorEnum, module_db

import normkern.torch as nt
from tests.tolerances import TOLERANCE

TWINS = {nn.BatchNorm1d: nt.BatchNorm1d, nn.BatchNorm2d: nt.BatchNorm2d, nn.BatchNorm3d: nt.BatchNorm3d,
         nn.GroupNorm: nt.GroupNorm}
INFOS = {info.module_cls: info for info in module_db if info.module_cls in TWINS}
BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
LOW = {torch.float16: "float16", torch.bfloat16: "bfloat16"}


PAIRS = [(cls, TWINS[cls]) for cls in TWINS] + [(cls, nt.SyncBatchNorm) for cls in BATCH_NORMS]
CASES = [(cls, ours, dtype, training) for cls, ours in PAIRS for dtype in
         [torch.float32] + [d for d in INFOS[cls].dtypes if d in LOW] for training in (True, False)]


def _ids(value):
    return getattr(value, "__name__", str(value).removeprefix("torch."))


def _samples(cls, dtype, training):
    info = INFOS[cls]
    return info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=True, training=training)


def _close(got, want, dtype, what, factor=8):
    assert got is not None and want is not None and got.shape == want.shape, what
    assert got.dtype == want.dtype, what
    got, want = got.double(), want.double()
    scale = max(want.abs().max().item() if want.numel() else 0.0, 1.0)
    error = (got - want).abs().max().item() if want.numel() else 0.0
    assert error <= factor * TOLERANCE[LOW.get(dtype, "float32")] * scale, f"{what}: error {error:.3g}"


def _pair(cls, ours_cls, sample, dtype, training):
    args, kwargs = sample.constructor_input.args, sample.constructor_input.kwargs
    theirs = cls(*args, **kwargs).to(dtype).train(training)
    ours = ours_cls(*args, **kwargs).to(dtype).train(training)
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


def _on_both(cls, ours_cls, dtype, training, step):
    """``step(layer, inputs, number)`` on torch.nn's layer and on the drop-in, each sample's inputs cloned for
    each: ``(what, torch's result, ours)`` per sample."""
    for number, sample in enumerate(_samples(cls, dtype, training)):
        results = []
        for layer in _pair(cls, ours_cls, sample, dtype, training):
            inputs = [a.detach().clone().requires_grad_() for a in sample.forward_input.args]
            results.append(step(layer, inputs, number))
        yield f"sample {number} ({sample.desc or 'default'})", *results


def _first_order(layer, inputs, number):
    out = layer(*inputs)
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(number)).to(out.dtype))
    return (out.detach(), [i.grad for i in inputs], [p.grad for p in layer.parameters()],
            [b.clone() for b in layer.buffers()])


def _second_order(layer, inputs, number):
    """A gradient penalty: the first derivatives of ``sum(out**3)`` and the gradients of their squares' sum."""
    leaves = inputs + list(layer.parameters())
    grads = torch.autograd.grad(layer(*inputs).pow(3).sum(), leaves, create_graph=True)
    penalty = sum(g.pow(2).sum() for g in grads)
    if penalty.requires_grad:
        penalty.backward()
    return [g.detach() for g in grads], [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("cls, ours_cls, dtype, training", CASES, ids=_ids)
def test_every_sample_answers_as_torch_nn(cls, ours_cls, dtype, training):
    for what, (out_t, gin_t, gp_t, buf_t), (out_o, gin_o, gp_o, buf_o) in _on_both(cls, ours_cls, dtype, training,
                                                                                   _first_order):
        _close(out_o, out_t, dtype, f"{what} output")
        assert out_o.stride() == out_t.stride(), what
        for got, want in zip(gin_o, gin_t, strict=True):
            _close(got, want, dtype, f"{what} grad_input")
        for got, want in zip(gp_o, gp_t, strict=True):
            _close(got, want, dtype, f"{what} parameter grad", factor=64)
        for got, want in zip(buf_o, buf_t, strict=True):
            if want.is_floating_point():
                _close(got, want, dtype, f"{what} buffer")
            else:
                assert torch.equal(got, want), f"{what} num_batches_tracked"


@pytest.mark.parametrize("cls, ours_cls, dtype, training", [c for c in CASES if c[2] == torch.float32], ids=_ids)
def test_every_sample_differentiates_twice_as_torch_nn(cls, ours_cls, dtype, training):
    for what, (first_t, second_t), (first_o, second_o) in _on_both(cls, ours_cls, dtype, training, _second_order):
        for got, want in zip(first_o, first_t, strict=True):
            _close(got, want, dtype, f"{what} first derivative", factor=64)
        for got, want in zip(second_o, second_t, strict=True):
            if want is None:
                assert got is None or not got.any(), what
            else:
                _close(got, want, dtype, f"{what} second derivative", factor=64)


@pytest.mark.parametrize("cls, ours_cls", PAIRS, ids=_ids)
def test_every_error_sample_raises_torchs_error_and_changes_nothing(cls, ours_cls):
    info = INFOS[cls]
    samples = info.module_error_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True,
                                            training=True)
    assert samples
    for sample in samples:
        inner = sample.module_error_input
        args, kwargs = inner.constructor_input.args, inner.constructor_input.kwargs
        if sample.error_on == ModuleErrorEnum.CONSTRUCTION_ERROR:
            with pytest.raises(sample.error_type, match=sample.error_regex):
                ours_cls(*args, **kwargs)
            continue
        layer = ours_cls(*args, **kwargs)
        before = copy.deepcopy(layer.state_dict())
        with pytest.raises(sample.error_type, match=sample.error_regex):
            layer(*inner.forward_input.args, **inner.forward_input.kwargs)
        after = layer.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("cls, ours_cls", PAIRS, ids=_ids)
@pytest.mark.parametrize("training", [True, False])
def test_float64_samples_are_refused_before_any_state_changes(cls, ours_cls, training):
    for sample in _samples(cls, torch.float64, training):
        _, ours = _pair(cls, ours_cls, sample, torch.float64, training)
        before = copy.deepcopy(ours.state_dict())
        with pytest.raises(nt.NotSupportedError, match=r"input dtype must be float32, float16 or bfloat16 .* "
                                                       r"got torch\.float64"):
            ours(*sample.forward_input.args)
        after = ours.state_dict()
        assert all(torch.equal(before[k], after[k]) for k in before)
