"""The layers in one process: SyncBatchNorm (no process group: the same kernels, no collective), the local
BatchNorm1d/2d/3d and GroupNorm, against torch.nn's in float64; state dicts and conversion."""

import pytest
import torch
from torch import nn

import normkern.torch as nt
from tests.tolerances import TOLERANCE


def _close(got, want, dtype="float32", factor=4):
    want = want.double()
    scale = want.abs().max().item() or 1.0
    assert (got.double() - want).abs().max().item() <= factor * TOLERANCE[dtype] * scale


def _run(layer, x, dy):
    x = x.clone().requires_grad_()
    out = layer(x)
    out.backward(dy)
    return out.detach(), x.grad


def _compare(ours, ref, x, dy, grads=("weight", "bias")):
    """``ours`` on float32 against ``ref`` on float64: output, grad_input and the named parameters' grads."""
    out, gi = _run(ours, x, dy)
    out_ref, gi_ref = _run(ref, x.double(), dy.double())
    _close(out, out_ref)
    _close(gi, gi_ref)
    for name in grads:
        _close(getattr(ours, name).grad, getattr(ref, name).grad, factor=16)


SHAPES = [(6, 4), (3, 4, 7), (2, 4, 5, 6), (2, 4, 3, 4, 5)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("momentum", [0.1, None])
def test_sync_batch_norm_without_a_group_is_batch_norm(shape, momentum):
    g = torch.Generator().manual_seed(len(shape))
    ours = nt.SyncBatchNorm(4, momentum=momentum)
    ref = nn.BatchNorm1d(4, momentum=momentum).double() if len(shape) < 4 else \
        (nn.BatchNorm2d if len(shape) == 4 else nn.BatchNorm3d)(4, momentum=momentum).double()
    with torch.no_grad():
        for layer in (ours, ref):
            layer.weight.copy_(torch.linspace(0.5, 2, 4))
            layer.bias.copy_(torch.linspace(-1, 1, 4))
    for step in range(2):
        x = torch.randn(*shape, generator=g) * 2 + 1
        dy = torch.randn(*shape, generator=g)
        for layer in (ours, ref):
            layer.zero_grad()
        _compare(ours, ref, x, dy)
        _close(ours.running_mean, ref.running_mean)
        _close(ours.running_var, ref.running_var)
        assert int(ours.num_batches_tracked) == step + 1
    ours.eval()
    ref.eval()
    x = torch.randn(*shape, generator=g)
    dy = torch.randn(*shape, generator=g)
    _compare(ours, ref, x, dy, grads=("weight",))


def test_bfloat16_and_no_affine_no_running_stats():
    x = (torch.randn(8, 3, 5, 5) * 2 + 1).to(torch.bfloat16)
    dy = torch.randn(8, 3, 5, 5).to(torch.bfloat16)
    ours = nt.SyncBatchNorm(3, affine=False, track_running_stats=False)
    ref = nn.BatchNorm2d(3, affine=False, track_running_stats=False).double()
    out, gi = _run(ours, x, dy)
    out_ref, gi_ref = _run(ref, x.double(), dy.double())
    assert out.dtype == torch.bfloat16 and gi.dtype == torch.bfloat16
    _close(out, out_ref, "bfloat16", 1)
    _close(gi, gi_ref, "bfloat16", 2)
    assert ours.running_mean is None


def test_a_single_value_per_channel_is_refused_in_training():
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        nt.SyncBatchNorm(3)(torch.randn(1, 3))


def test_state_dicts_load_both_ways_and_conversion_shares_parameters():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.LazyLinear(5),
                          nn.BatchNorm1d(5))
    model(torch.randn(2, 3, 8, 8))
    bn = model[1]
    converted = nt.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(converted[1], nt.SyncBatchNorm) and isinstance(converted[5], nt.SyncBatchNorm)
    assert converted[1].weight is bn.weight and converted[1].running_mean is bn.running_mean
    ours = nt.SyncBatchNorm(4)
    ours.load_state_dict(nn.BatchNorm2d(4).state_dict())
    torch_sync = nn.SyncBatchNorm(4)
    torch_sync.load_state_dict(ours.state_dict())
    assert set(ours.state_dict()) == set(torch_sync.state_dict()) == set(nn.BatchNorm2d(4).state_dict())
    nn.BatchNorm2d(4).load_state_dict(nt.BatchNorm2d(4).state_dict())


@pytest.mark.parametrize("local, ref, shape", [(nt.BatchNorm1d, nn.BatchNorm1d, (6, 4, 9)),
                                               (nt.BatchNorm2d, nn.BatchNorm2d, (3, 4, 7, 7)),
                                               (nt.BatchNorm3d, nn.BatchNorm3d, (2, 4, 3, 5, 5))])
def test_local_batch_norm_layers(local, ref, shape):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(*shape, generator=g) + 1
    dy = torch.randn(*shape, generator=g)
    ours, theirs = local(4), ref(4).double()
    _compare(ours, theirs, x, dy, grads=("weight",))
    _close(ours.running_var, theirs.running_var)


@pytest.mark.parametrize("soc", ["host", "Ascend950"])
def test_group_norm(soc):
    """On the host plan and on the 950's arch35 plan (its own sums and dx formula)."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 8, 6, 6, generator=g) + 1
    dy = torch.randn(3, 8, 6, 6, generator=g)
    ours, theirs = nt.GroupNorm(4, 8, soc=soc), nn.GroupNorm(4, 8).double()
    _compare(ours, theirs, x, dy)


def test_threads_per_rank_share_and_override(monkeypatch):
    import os

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("NORMKERN_THREADS_PER_RANK", raising=False)
    assert nt.threads_for(1) == min(os.cpu_count(), __import__("numba").config.NUMBA_NUM_THREADS)
    assert nt.threads_for(64) == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert nt.threads_for(64) == nt.threads_for(1)
    nt.set_threads_per_rank(1)
    try:
        assert nt.threads_for(1) == 1
    finally:
        nt.set_threads_per_rank(None)
    with pytest.raises(ValueError, match="positive int"):
        nt.set_threads_per_rank(0)


def test_an_npu_soc_gives_its_plan_and_its_dtype_rules():
    x = torch.randn(4, 3, 5, 5)
    out_npu = nt.SyncBatchNorm(3, soc="Ascend910B2")(x)
    out_host = nt.SyncBatchNorm(3)(x)
    _close(out_npu, out_host.double())
    import normkern

    # A2 has no bfloat16 BatchNormStats; aclnnBatchNormElemt takes statistics of the data's dtype only
    with pytest.raises(normkern.InvalidParameterError, match=r"\[batch_norm_stats\] input dtype must be one of"):
        nt.SyncBatchNorm(3, soc="Ascend910B2")(x.to(torch.bfloat16))
    with pytest.raises(normkern.InvalidParameterError, match=r"\[batch_norm_elemt\] mean dtype must be the data's"):
        nt.SyncBatchNorm(3, soc="Ascend910B2")(x.to(torch.float16))
