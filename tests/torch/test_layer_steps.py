"""A layer's bound steps (``normkern/torch/_steps.py``): a repeated call runs the step its first call bound, with
the same bits; anything that can change between calls (a parameter replaced or resized, its dtype, eps, the mode)
makes a new step through torch.nn's checks; copies and pickles carry no step."""

import copy
import pickle

import pytest
import torch
from torch import nn

import normkern.torch as nt

LAYERS = {
    "BatchNorm2d": (lambda: nt.BatchNorm2d(4), lambda: nn.BatchNorm2d(4)),
    "SyncBatchNorm": (lambda: nt.SyncBatchNorm(4), lambda: nn.BatchNorm2d(4)),
    "GroupNorm": (lambda: nt.GroupNorm(2, 4), lambda: nn.GroupNorm(2, 4)),
}


def _x(seed=0, shape=(3, 4, 5, 5)):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 2 + 1


def _steps(layer) -> int:
    return len(layer.__dict__.get("_normkern_steps", {}))


def _step(layer, x):
    x = x.clone().requires_grad_()
    out = layer(x)
    out.backward(torch.ones_like(out) * torch.arange(out.numel()).reshape(out.shape) / out.numel())
    return out.detach(), x.grad


@pytest.mark.parametrize("name", list(LAYERS))
def test_a_repeated_step_runs_the_bound_step_with_the_first_calls_bits(name):
    layer = LAYERS[name][0]()
    x = _x()
    first = _step(layer, x)
    assert _steps(layer) == 1
    for _ in range(3):
        again = _step(layer, x)
        assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert _steps(layer) == 1
    fresh = LAYERS[name][0]()
    assert all(torch.equal(a, b) for a, b in zip(first, _step(fresh, x), strict=True))


@pytest.mark.parametrize("name", list(LAYERS))
def test_a_resized_parameter_gets_torchs_error_and_a_refilled_one_is_read(name):
    ours, theirs = (make() for make in LAYERS[name])
    x = _x()
    _step(ours, x)
    for layer in (ours, theirs):
        layer.weight.data = torch.full((4,), 2.0)  # a new storage: the step made for the old one is not used
    assert torch.allclose(ours(x), theirs(x), atol=1e-5)
    for layer in (ours, theirs):
        layer.weight.data = torch.ones(3)
    with pytest.raises(RuntimeError) as want:
        theirs(x)
    with pytest.raises(RuntimeError) as got:
        ours(x)
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("name", list(LAYERS))
def test_eps_mode_and_dtype_changes_make_a_new_step(name):
    ours, theirs = (make() for make in LAYERS[name])
    x = _x()
    assert torch.allclose(ours(x), theirs(x), atol=1e-5)
    for change in (lambda m: setattr(m, "eps", 0.5), lambda m: m.eval(), lambda m: m.train()):
        for layer in (ours, theirs):
            change(layer)
        assert torch.allclose(ours(x), theirs(x), atol=1e-5)
    ours.double()
    with pytest.raises(nt.NotSupportedError, match="float64"):
        ours(x.double())


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copy_carries_no_step_and_trains_its_own_tensors(name, how):
    layer = LAYERS[name][0]()
    x = _x()
    _step(layer, x)
    clone = copy.deepcopy(layer) if how == "deepcopy" else pickle.loads(pickle.dumps(layer))
    assert _steps(clone) == 0
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    with torch.no_grad():
        clone.weight.add_(1.0)
    _step(clone, _x(1))
    assert all(torch.equal(before[k], v) for k, v in layer.state_dict().items())  # the original is untouched
    assert _steps(clone) == 1


@pytest.mark.parametrize("momentum", [0.1, None])
def test_the_running_statistics_and_the_count_follow_torch_nn_on_the_bound_step(momentum):
    ours, theirs = nt.BatchNorm2d(4, momentum=momentum), nn.BatchNorm2d(4, momentum=momentum)
    for seed in range(4):
        x = _x(seed)
        with torch.no_grad() if seed % 2 else torch.enable_grad():
            for layer in (ours, theirs):
                layer(x)
    assert int(ours.num_batches_tracked) == int(theirs.num_batches_tracked) == 4
    assert torch.allclose(ours.running_mean, theirs.running_mean, atol=1e-6)
    assert torch.allclose(ours.running_var, theirs.running_var, atol=1e-5)
    assert _steps(ours) == 1


def test_half_running_statistics_are_updated_by_torch_ops():
    ours, theirs = nt.BatchNorm2d(4).half(), nn.BatchNorm2d(4).half()
    x = _x().half()
    for _ in range(2):
        for layer in (ours, theirs):
            layer(x)
    assert torch.allclose(ours.running_mean.float(), theirs.running_mean.float(), atol=2e-3)
    assert torch.allclose(ours.running_var.float(), theirs.running_var.float(), atol=2e-2)


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_a_step_keeps_no_input_or_gradient_alive(name, mode):
    """The inputs over NumPy arrays of the test's own: a step that kept any view of their memory (a NumPy view,
    a tensor) would keep those arrays alive."""
    import gc
    import weakref

    import numpy as np

    layer = LAYERS[name][0]()
    getattr(layer, mode)()
    refs = []
    for seed in range(2):
        memory = [_x(seed).numpy().copy(), np.ones((3, 4, 5, 5), np.float32)]
        refs += [weakref.ref(a) for a in memory]
        x, dy = (torch.from_numpy(a) for a in memory)
        x.requires_grad_()
        layer(x).backward(dy)
        del x, dy, memory
    gc.collect()
    assert _steps(layer) == 1 and all(ref() is None for ref in refs)
