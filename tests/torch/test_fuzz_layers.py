"""A seeded fuzz of the drop-in layers against torch.nn's on the same inputs: BatchNorm1d/2d/3d, SyncBatchNorm (one
process) and GroupNorm; sizes 0 and 1 on every axis, training and eval, float32/float16/bfloat16 (and float64,
which the layers refuse), mixed parameter dtypes, contiguous, channels-last, transposed and sliced layouts, eps
of every sign, momentum None, affine, bias and track_running_stats off, wrong channel counts and groups.

Each case either raises in both (the same class and message; a float64 input raises NotSupportedError where
torch.nn answers) with the drop-in's state unchanged, or answers in both: the output (values, dtype, strides),
the input and parameter gradients (values, strides) and the buffers after two steps."""

import copy
import random

import pytest
import torch
from torch import nn

import normkern.torch as nt
from tests.tolerances import TOLERANCE

KINDS = {"BatchNorm1d": (nn.BatchNorm1d, nt.BatchNorm1d, (2, 3)), "BatchNorm2d": (nn.BatchNorm2d, nt.BatchNorm2d, (4,)),
         "BatchNorm3d": (nn.BatchNorm3d, nt.BatchNorm3d, (5,)), "SyncBatchNorm": (nn.SyncBatchNorm, nt.SyncBatchNorm,
                                                                                     (2, 3, 4, 5, 6)),
         "GroupNorm": (nn.GroupNorm, nt.GroupNorm, (1, 2, 3, 4, 5))}
DTYPES = [torch.float32] * 5 + [torch.float16, torch.bfloat16, torch.float64]
NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
CASES_PER_SEED = 40


def _case(rng: random.Random) -> dict:
    kind = rng.choice(list(KINDS))
    rank = rng.choice(KINDS[kind][2])
    channels = rng.choice([1, 2, 3, 4, 6, 8])
    shape = [rng.choice([0, 1, 1, 2, 3, 5, 9])] + [channels] + [rng.choice([0, 1, 1, 2, 3, 4, 7]) for _ in
                                                              range(rank - 2)]
    if rng.random() < 0.7:
        shape = [max(1, d) for d in shape]
    dtype = rng.choice(DTYPES)
    params = dtype if rng.random() < 0.6 or dtype == torch.float64 else rng.choice([torch.float32, torch.float16])
    case = dict(kind=kind, shape=shape, dtype=dtype, params=params, training=rng.random() < 0.7,
                layout=rng.choice(["contiguous", "contiguous", "channels_last", "transposed", "sliced"]),
                eps=rng.choice([1e-5] * 6 + [1e-3, 0.0, -1e-3]), affine=rng.random() < 0.8, bias=rng.random() < 0.8,
                features=channels if rng.random() < 0.85 else rng.choice([1, 2, 5, 7]))
    if kind == "GroupNorm":
        # groups divide the layer's channels; an input of other channels may not be divisible
        case["groups"] = rng.choice([g for g in range(1, case["features"] + 1) if case["features"] % g == 0])
    else:
        case.update(momentum=rng.choice([0.1, 0.1, None, 0.0, 1.0]), track=rng.random() < 0.8)
    return case


def _layer(cls, case):
    if case["kind"] == "GroupNorm":
        layer = cls(case["groups"], case["features"], case["eps"], case["affine"], bias=case["bias"])
    else:
        layer = cls(case["features"], case["eps"], case["momentum"], case["affine"], case["track"],
                    bias=case["bias"])
    with torch.no_grad():
        for i, p in enumerate(layer.parameters()):
            p.copy_(torch.linspace(0.5, 1.5 + i, p.numel()))
    return layer.to(case["params"]).train(case["training"])


def _input(case, generator):
    shape, dtype = case["shape"], case["dtype"]
    base = torch.randn(*shape, generator=generator) * 2 + 0.5
    layout = case["layout"]
    if layout == "channels_last" and len(shape) in (4, 5):
        base = base.to(memory_format=torch.channels_last if len(shape) == 4 else torch.channels_last_3d)
    elif layout == "transposed" and len(shape) >= 3:
        base = base.movedim(1, -1).contiguous().movedim(-1, 1)
    elif layout == "sliced":
        wide = torch.randn(*shape[:-1], 2 * shape[-1], generator=generator) * 2 + 0.5
        base = wide[..., ::2]
    return base.to(dtype).requires_grad_()


def _run(layer, x, dy, steps=2):
    """Two training steps (forward, backward) on ``x``: the results of the last and the layer's state."""
    for _ in range(steps):
        layer.zero_grad()
        x.grad = None
        out = layer(x)
        out.backward(dy if dy.shape == out.shape else torch.zeros_like(out))
    return out.detach(), x.grad, [None if p.grad is None else p.grad.clone() for p in layer.parameters()]


def _describe(case):
    return ", ".join(f"{k}={v}" for k, v in case.items())


def _close(got, want, dtype, what, factor):
    assert (got is None) == (want is None), what
    if got is None:
        return
    assert got.shape == want.shape and got.dtype == want.dtype, what
    got, want = got.double(), want.double()
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan), f"{what}: NaN positions differ"
    finite = ~nan & want.isfinite()
    if finite.any():
        scale = max(want[finite].abs().max().item(), 1.0)
        error = (got[finite] - want[finite]).abs().max().item()
        assert error <= factor * TOLERANCE[NAMES[dtype]] * scale, f"{what}: error {error:.3g}, scale {scale:.3g}"


@pytest.mark.parametrize("seed", range(16))
def test_the_layers_answer_and_refuse_as_torch_nn(seed):
    rng = random.Random(seed)
    for number in range(CASES_PER_SEED):
        case = _case(rng)
        what = f"case {seed}/{number}: {_describe(case)}"
        torch_cls, ours_cls, _ = KINDS[case["kind"]]
        theirs, ours = _layer(torch_cls, case), _layer(ours_cls, case)
        generator = torch.Generator().manual_seed(1000 * seed + number)
        x = _input(case, generator)
        dy = torch.randn(x.shape, generator=generator).to(case["dtype"])
        try:
            want = _run(theirs, x, dy)
        except Exception as error:  # noqa: BLE001 - whatever torch raises, the drop-in must raise
            before = copy.deepcopy(ours.state_dict())
            with pytest.raises(type(error)) as raised:
                ours(x)
            assert str(raised.value) == str(error), what
            assert all(torch.equal(before[k], v) for k, v in ours.state_dict().items()), what
            continue
        if case["dtype"] == torch.float64:
            before = copy.deepcopy(ours.state_dict())
            with pytest.raises(nt.NotSupportedError):
                ours(x)
            assert all(torch.equal(before[k], v) for k, v in ours.state_dict().items()), what
            continue
        got = _run(ours, x, dy)
        dtype = case["dtype"]
        _close(got[0], want[0], dtype, f"{what}: output", 8)
        assert got[0].stride() == want[0].stride(), f"{what}: output strides"
        _close(got[1], want[1], dtype, f"{what}: grad_input", 16)
        assert got[1].stride() == want[1].stride(), f"{what}: grad_input strides"
        for mine, theirs_grad in zip(got[2], want[2], strict=True):
            _close(mine, theirs_grad, dtype, f"{what}: parameter grad", 64)
        for (name, mine), (_, buffer) in zip(ours.named_buffers(), theirs.named_buffers(), strict=True):
            if buffer.is_floating_point():
                _close(mine, buffer, dtype, f"{what}: {name}", 16)
            else:
                assert torch.equal(mine, buffer), f"{what}: {name}"
