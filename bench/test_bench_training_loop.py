"""normkern.torch's layers inside a training loop, against torch.nn's, same process, interleaved.

- Each layer alone at ResNet's shapes, forward + backward through autograd (a fresh leaf input a step, the
  parameters' gradients accumulated as in training): ``BatchNorm2d``, ``SyncBatchNorm`` in one process (no
  process group: the local path) and ``GroupNorm(32, C)``, each against its torch.nn twin
  (``torch.nn.BatchNorm2d`` for both batch norms), float32, the threads PyTorch and normkern start with.
- Whole training steps (forward, backward, SGD): a ResNet-style CNN (16x3x64x64, nine norm layers) with
  BatchNorm2d and with GroupNorm(8), and a small CNN (32x1x8x8, two SyncBatchNorm layers, one process).

Targets (issue 35): every layer ratio (torch time / normkern time) >= 1.0 and their median >= 1.5; each
training step >= 1.0.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import normkern.torch as nt

from .conftest import interleaved_medians, record

#: ResNet's norm-layer shapes (N, C, H, W).
SHAPES = [(8, 64, 112, 112), (8, 256, 56, 56), (8, 512, 28, 28), (8, 1024, 14, 14), (8, 2048, 7, 7),
          (32, 512, 7, 7), (32, 256, 14, 14), (2, 64, 56, 56)]

LAYERS = {
    "BatchNorm2d": (lambda c: nt.BatchNorm2d(c), lambda c: nn.BatchNorm2d(c)),
    "SyncBatchNorm": (lambda c: nt.SyncBatchNorm(c), lambda c: nn.BatchNorm2d(c)),
    "GroupNorm": (lambda c: nt.GroupNorm(32, c), lambda c: nn.GroupNorm(32, c)),
}


def _fwd_bwd(layer, x, dy):
    def run():
        layer(x.detach().requires_grad_()).backward(dy)
    return run


@pytest.mark.parametrize("layer", list(LAYERS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_layer_in_training(environment, shape, layer):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g) * 2 + 1
    dy = torch.randn(*shape, generator=g)
    ours, theirs = LAYERS[layer]
    runs = {"normkern": _fwd_bwd(ours(shape[1]), x, dy), "torch": _fwd_bwd(theirs(shape[1]), x, dy)}
    rounds = 9 if x.numel() > 2**22 else 21
    times = interleaved_medians(runs, rounds=rounds, passes=3)
    record({"bench": "layer_in_training", "layer": layer, "shape": "x".join(map(str, shape)),
            "normkern_ms": round(times["normkern"][0] * 1e3, 3), "torch_ms": round(times["torch"][0] * 1e3, 3),
            "torch_over_normkern": round(times["torch"][0] / times["normkern"][0], 2)})


def _resnet(norm):
    """A ResNet-style CNN: a stem and four stages of a conv-norm-relu pair, nine norm layers."""
    layers, c_in = [nn.Conv2d(3, 32, 3, padding=1, bias=False), norm(32), nn.ReLU()], 32
    for c, stride in ((32, 1), (64, 2), (128, 2), (256, 2)):
        layers += [nn.Conv2d(c_in, c, 3, stride=stride, padding=1, bias=False), norm(c), nn.ReLU(),
                   nn.Conv2d(c, c, 3, padding=1, bias=False), norm(c), nn.ReLU()]
        c_in = c
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, 10))


def _small(norm):
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), norm(16), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1),
                         norm(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


STEPS = {
    "resnet BatchNorm2d 16x3x64x64": (_resnet, lambda c: nt.BatchNorm2d(c), lambda c: nn.BatchNorm2d(c),
                                      (16, 3, 64, 64)),
    "resnet GroupNorm(8) 16x3x64x64": (_resnet, lambda c: nt.GroupNorm(8, c), lambda c: nn.GroupNorm(8, c),
                                       (16, 3, 64, 64)),
    "small SyncBatchNorm 32x1x8x8": (_small, lambda c: nt.SyncBatchNorm(c), lambda c: nn.BatchNorm2d(c),
                                     (32, 1, 8, 8)),
}


def _training_step(model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


@pytest.mark.parametrize("name", list(STEPS))
def test_training_step(environment, name):
    build, ours, theirs, shape = STEPS[name]
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(*shape, generator=g), torch.randint(0, 10, (shape[0],), generator=g)
    torch.manual_seed(0)
    mine = build(ours)
    torch.manual_seed(0)
    peer = build(theirs)
    runs = {"normkern": _training_step(mine, x, y), "torch": _training_step(peer, x, y)}
    times = interleaved_medians(runs, rounds=15, passes=3)
    record({"bench": "training_step", "model": name, "normkern_ms": round(times["normkern"][0] * 1e3, 3),
            "torch_ms": round(times["torch"][0] * 1e3, 3),
            "torch_over_normkern": round(times["torch"][0] / times["normkern"][0], 2)})


@pytest.mark.parametrize("shape", [(8, 256, 56, 56), (8, 2048, 7, 7)], ids=lambda s: "x".join(map(str, s)))
def test_launcher_beside_torch(environment, shape, monkeypatch):
    """normkern's SyncBatchNorm (one process) called right after torch's BatchNorm2d, its runs on PyTorch's
    OpenMP team against normkern's own pool, alternated in one process."""
    import sys

    launch = sys.modules["normkern.runtime.launch"]
    team = launch._team
    if team is None:
        pytest.skip("no OpenMP team joined in this process")
    g = torch.Generator().manual_seed(0)
    x, dy = torch.randn(*shape, generator=g) * 2 + 1, torch.randn(*shape, generator=g)
    ours, theirs = _fwd_bwd(nt.SyncBatchNorm(shape[1]), x, dy), _fwd_bwd(nn.BatchNorm2d(shape[1]), x, dy)

    def after_torch(launcher):
        def run():
            monkeypatch.setattr(launch, "_team", launcher)
            monkeypatch.setattr(launch, "_may_join", launcher is not None)  # the pool: no launch joins the team
            theirs()
            ours()
        return run

    times = interleaved_medians({"team": after_torch(team), "pool": after_torch(None),
                                 "torch_alone": theirs}, rounds=15, passes=3)
    record({"bench": "launcher_beside_torch", "shape": "x".join(map(str, shape)),
            "team_ms": round((times["team"][0] - times["torch_alone"][0]) * 1e3, 3),
            "pool_ms": round((times["pool"][0] - times["torch_alone"][0]) * 1e3, 3)})
