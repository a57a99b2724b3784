"""The layers keep torch.nn's contract: torch's checks and errors ahead of any kernel, no state changed by a refused
call, empty and one-value batches, eps, float16 counts, memory formats, double backward, float64, ``bias=``,
``qconfig`` and torch.func, each case against torch.nn on the same input (torch.compile and torch.export:
test_compile.py)."""

import copy
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import normkern.torch as nt
from tests.tolerances import TOLERANCE

BATCH_NORMS = [(nn.BatchNorm1d, nt.BatchNorm1d, (4, 3, 5)), (nn.BatchNorm2d, nt.BatchNorm2d, (4, 3, 5, 6)),
               (nn.BatchNorm3d, nt.BatchNorm3d, (2, 3, 4, 5, 3)), (nn.SyncBatchNorm, nt.SyncBatchNorm, (4, 3, 5, 6))]
LAYERS = BATCH_NORMS + [(lambda c, **kw: nn.GroupNorm(1, c, **kw), lambda c, **kw: nt.GroupNorm(1, c, **kw),
                         (4, 3, 5, 6))]
IDS = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "GroupNorm"]


def _close(got, want, dtype="float32", factor=16):
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = max(want.double().abs().max().item(), 1.0)
    assert (got.double() - want.double()).abs().max().item() <= factor * TOLERANCE[dtype] * scale


def _unchanged(layer, call):
    """``call()`` raises and leaves ``layer``'s state as it was; returns the exception info."""
    before = copy.deepcopy(layer.state_dict())
    with pytest.raises(Exception) as raised:
        call()
    assert all(torch.equal(before[k], v) for k, v in layer.state_dict().items())
    return raised


def test_a_wrong_channel_count_is_torchs_error_and_no_memory_is_touched():
    """In a process of its own: the kernels once ran on it and corrupted the heap (``free(): invalid next size``)."""
    script = textwrap.dedent("""
        import torch, normkern.torch as nt
        for layer in (nt.BatchNorm2d(6), nt.SyncBatchNorm(6), nt.BatchNorm2d(6, affine=False),
                      nt.BatchNorm2d(6, track_running_stats=False), nt.GroupNorm(2, 6)):
            for training in (True, False):
                for grad in (True, False):
                    layer.train(training)
                    x = torch.randn(2, 8, 3, 3, requires_grad=grad)
                    try:
                        layer(x)
                        print("answered")
                    except RuntimeError as error:
                        print(type(error).__name__, error)
                    assert int(getattr(layer, "num_batches_tracked", None) or 0) == 0
        print("done")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "done"
    assert lines[:12] == ["RuntimeError running_mean should contain 8 elements not 6"] * 12
    assert lines[12:16] == ["RuntimeError weight should contain 8 elements not 6"] * 4  # no running statistics
    assert lines[16:20] == ["RuntimeError Expected weight to be a vector of size equal to the number of channels in "
                            "input, but got weight of shape [6] and input of shape [2, 8, 3, 3]"] * 4


@pytest.mark.parametrize("theirs_cls, ours_cls, shape", LAYERS, ids=IDS)
def test_a_gradient_penalty_through_a_conv_is_torchs(theirs_cls, ours_cls, shape):
    """Double backward: the second derivative reaches the conv's and the layer's parameters as in torch.nn."""
    results = []
    for cls in (theirs_cls, ours_cls):
        torch.manual_seed(1)
        conv = nn.Conv1d(2, 3, 1) if len(shape) == 3 else (nn.Conv2d(2, 3, 1) if len(shape) == 4 else
                                                            nn.Conv3d(2, 3, 1))
        layer = cls(3)
        x = torch.randn(shape[0], 2, *shape[2:], requires_grad=True)
        out = layer(conv(x))
        (grad_x,) = torch.autograd.grad(out.pow(2).sum(), x, create_graph=True)
        grad_x.pow(2).sum().backward()
        results.append((conv.weight.grad, layer.weight.grad, x.grad))
    for got, want in zip(results[1], results[0], strict=True):
        assert got is not None and want is not None
        _close(got, want, factor=64)


@pytest.mark.parametrize("cls", [nt.SyncBatchNorm, nt.BatchNorm2d])
def test_float16_running_statistics_count_past_65504_values_a_channel(cls):
    """73,728 values per channel: as float16 the count is inf and every output NaN."""
    x = torch.randn(32, 4, 48, 48, generator=torch.Generator().manual_seed(3)).half()
    ours, theirs = cls(4).half(), nn.BatchNorm2d(4).half()
    out, want = ours(x), theirs(x)
    assert torch.isfinite(out).all()
    _close(out, want, "float16")
    _close(ours.running_mean, theirs.running_mean, "float16")
    _close(ours.running_var, theirs.running_var, "float16")


@pytest.mark.parametrize("theirs_cls, ours_cls, shape", BATCH_NORMS, ids=IDS[:4])
def test_one_value_per_channel_and_eps_are_refused_in_training_as_torch_does(theirs_cls, ours_cls, shape):
    one = torch.randn(1, 3, *([1] * (len(shape) - 2)))
    for kwargs, x in [({}, one), ({"eps": 0.0}, torch.randn(*shape)), ({"eps": -1.0}, torch.randn(*shape))]:
        with pytest.raises(ValueError) as want:
            theirs_cls(3, **kwargs)(x)
        layer = ours_cls(3, **kwargs)
        assert str(_unchanged(layer, lambda: layer(x)).value) == str(want.value)  # noqa: B023
    # eval mode takes one value per channel and eps = 0; eps < 0 is refused there too
    _close(ours_cls(3).eval()(one), theirs_cls(3).eval()(one))
    _close(ours_cls(3, eps=0.0).eval()(torch.ones(*shape)), theirs_cls(3, eps=0.0).eval()(torch.ones(*shape)))
    with pytest.raises(ValueError, match="batch_norm eps must be non-negative, but got -1.0"):
        ours_cls(3, eps=-1.0).eval()(torch.randn(*shape))
    # and so does a layer without running statistics in eval mode only when it has more than one value
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        ours_cls(3, track_running_stats=False).eval()(one)


@pytest.mark.parametrize("training", [True, False])
def test_group_norm_checks_as_torch_does_in_training_and_eval(training):
    cases = [(nn.GroupNorm(3, 3), nt.GroupNorm(3, 3), torch.randn(1, 3)),
             (nn.GroupNorm(1, 3), nt.GroupNorm(1, 3), torch.randn(3)),
             (nn.GroupNorm(2, 4), nt.GroupNorm(2, 4), torch.randn(2, 5, 3))]
    for theirs, ours, x in cases:
        with pytest.raises((ValueError, RuntimeError)) as want:
            theirs.train(training)(x)
        with pytest.raises(type(want.value)) as got:
            ours.train(training)(x)
        assert str(got.value) == str(want.value)


@pytest.mark.parametrize("theirs_cls, ours_cls, shape", LAYERS, ids=IDS)
@pytest.mark.parametrize("training", [True, False])
def test_an_empty_batch_answers_as_torch_does(theirs_cls, ours_cls, shape, training):
    """An empty output, an empty input gradient, zero parameter gradients, the batch counted in training."""
    results = []
    for cls in (theirs_cls, ours_cls):
        layer = cls(3).train(training)
        x = torch.randn(0, *shape[1:], requires_grad=True)
        out = layer(x)
        out.sum().backward()
        results.append((out, x.grad, layer.weight.grad, layer.bias.grad, list(layer.buffers())))
    (out_t, gx_t, gw_t, gb_t, buf_t), (out_o, gx_o, gw_o, gb_o, buf_o) = results
    assert out_o.shape == out_t.shape and gx_o.shape == gx_t.shape == x.shape
    assert torch.equal(gw_o, gw_t) and torch.equal(gb_o, gb_t) and not gw_o.any()
    assert all(torch.equal(a, b) for a, b in zip(buf_o, buf_t, strict=True))


def test_bias_false_and_qconfig_as_torch():
    for ours, theirs in [(nt.SyncBatchNorm(4, bias=False), nn.SyncBatchNorm(4, bias=False)),
                         (nt.GroupNorm(2, 4, bias=False), nn.GroupNorm(2, 4, bias=False)),
                         (nt.BatchNorm2d(4, bias=False), nn.BatchNorm2d(4, bias=False))]:
        assert ours.bias is None and set(ours.state_dict()) == set(theirs.state_dict())
        x = torch.randn(3, 4, 5, 5, requires_grad=True)
        out = ours(x)
        out.backward(torch.ones_like(out))
        _close(out, theirs(x))
        assert ours.weight.grad is not None
    bn = nn.BatchNorm2d(4, bias=False)
    bn.qconfig = "a qconfig"
    converted = nt.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(bn))[0]
    assert converted.qconfig == "a qconfig" and converted.bias is None and converted.weight is bn.weight
    again = nt.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(converted), soc="Ascend910B2")[0]
    assert again is not converted and again.soc == "Ascend910B2"  # torch converts SyncBatchNorm too


@pytest.mark.parametrize("theirs_cls, ours_cls, shape", LAYERS, ids=IDS)
@pytest.mark.parametrize("training", [True, False])
def test_channels_last_in_channels_last_out(theirs_cls, ours_cls, shape, training):
    if len(shape) < 4:
        pytest.skip("channels_last is a 4-D and 5-D format")
    memory_format = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    results = []
    for cls in (theirs_cls, ours_cls):
        layer = cls(3).train(training)
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(5)).to(memory_format=memory_format)
        x.requires_grad_()
        out = layer(x)
        out.backward(torch.randn(*shape, generator=torch.Generator().manual_seed(6)))
        results.append((out, x.grad))
    for got, want in zip(results[1], results[0], strict=True):
        assert got.is_contiguous(memory_format=memory_format) and got.stride() == want.stride()
        _close(got, want)


@pytest.mark.parametrize("theirs_cls, ours_cls, shape", LAYERS, ids=IDS)
def test_float64_is_refused_before_any_state_changes(theirs_cls, ours_cls, shape):
    layer = ours_cls(3).double()
    raised = _unchanged(layer, lambda: layer(torch.randn(*shape, dtype=torch.float64)))
    assert raised.type is nt.NotSupportedError and isinstance(raised.value, (NotImplementedError, TypeError))
    assert "input dtype must be float32, float16 or bfloat16" in str(raised.value)


def test_torch_func_transforms_get_torchs_answers_and_errors():
    x = torch.randn(3, 2, 4, 5, 5)
    want = torch.func.vmap(nn.GroupNorm(2, 4))(x)
    _close(torch.func.vmap(nt.GroupNorm(2, 4))(x), want)
    pairs = [(nt.BatchNorm2d(4).eval(), nn.BatchNorm2d(4).eval()),
             (nt.SyncBatchNorm(4, track_running_stats=False), nn.SyncBatchNorm(4, track_running_stats=False)),
             (nt.GroupNorm(2, 4), nn.GroupNorm(2, 4))]
    for ours, theirs in pairs:
        params = dict(ours.named_parameters())
        grads = torch.func.grad(lambda p: torch.func.functional_call(ours, p, (x[0],)).pow(3).sum())(params)  # noqa: B023
        want = torch.func.grad(lambda p: torch.func.functional_call(theirs, p, (x[0],)).pow(3).sum())(params)  # noqa: B023
        for name in params:
            _close(grads[name], want[name], factor=64)
    # training with running statistics updates a captured buffer: torch's error, from torch's own function
    for layer in (nn.BatchNorm2d(4), nt.BatchNorm2d(4)):
        with pytest.raises(RuntimeError, match="attempted to call in-place operation"):
            torch.func.grad(lambda t: layer(t).pow(3).sum())(x[0])  # noqa: B023
    assert torch._C._functorch.peek_interpreter_stack() is None  # the test normkern uses exists in this torch
