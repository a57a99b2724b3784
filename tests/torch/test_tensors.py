"""Every op on tensors: no copy for contiguous tensors (storage pointers compared), outputs as tensors over the
kernel's arrays, out= tensors and running statistics written in place, every dtype, strided tensors."""

import numpy as np
import pytest
import torch

import normkern
import normkern.torch as nt
from normkern import registry as _registry
from normkern.examples import example_inputs

TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _as_tensors(kw):
    return {k: nt.to_tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}


@pytest.mark.parametrize("dtype", list(TORCH))
@pytest.mark.parametrize("op", _registry.names())
def test_every_op_on_tensors_equals_the_op_on_arrays(op, dtype):
    record = _registry.get(op)
    shape = (6, 4) if record.shape_ranks == (2, 2) else (3, 4, 5)
    kw = example_inputs(op, shape, dtype, **{o.dest: o.kwargs.get("default", True) for o in record.options})
    tensors = _as_tensors({k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kw.items()})
    for value in tensors.values():  # the tensors are views of their own copies: no conversion copies
        if isinstance(value, torch.Tensor):
            assert value.data_ptr() == nt.to_numpy(value).ctypes.data
    got = getattr(nt, op)(**tensors, soc="host")
    want = record.function(**kw, soc="host")
    got, want = (got,) if len(record.outputs) == 1 else got, (want,) if len(record.outputs) == 1 else want
    for g, w in zip(got, want, strict=True):
        if w is None:
            assert g is None
            continue
        assert isinstance(g, torch.Tensor)
        assert np.array_equal(nt.to_numpy(g).view(np.uint8), np.asarray(w).view(np.uint8))
    for name in record.updated:  # running statistics: the tensors themselves were updated
        assert np.array_equal(nt.to_numpy(tensors[name]).view(np.uint8), kw[name].view(np.uint8))


def test_out_tensors_are_filled_in_place_and_returned():
    x = torch.randn(4, 3, 6, 6)
    mean, invstd = torch.empty(3), torch.empty(3)
    got = nt.batch_norm_stats(x, 1e-5, soc="host", out=(mean, invstd))
    assert got[0] is mean and got[1] is invstd
    want = normkern.batch_norm_stats(x.numpy(), 1e-5, soc="host")
    assert np.array_equal(mean.numpy(), want[0]) and np.array_equal(invstd.numpy(), want[1])
    out = torch.empty_like(x, dtype=torch.bfloat16)
    xb = x.to(torch.bfloat16)
    result = nt.batch_norm_elemt(xb, None, None, mean, invstd, 1e-5, soc="host", out=out)
    assert result is out and out.data_ptr() == nt.to_numpy(out).ctypes.data
    assert torch.equal(out.view(torch.int16), nt.batch_norm_elemt(xb, None, None, mean, invstd, 1e-5,
                                                                  soc="host").view(torch.int16))


def test_new_outputs_share_memory_with_the_kernel_arrays():
    x = torch.randn(4, 3, 6, 6)
    out = nt.batch_norm_elemt(x, None, None, torch.zeros(3), torch.ones(3), 1e-5, soc="host")
    view = nt.to_numpy(out)
    view[0, 0, 0, 0] = 123.0
    assert out[0, 0, 0, 0].item() == 123.0


def test_strided_requires_grad_and_channels_last_tensors():
    x = torch.randn(4, 3, 6, 6, requires_grad=True)
    cl = x.detach().to(memory_format=torch.channels_last)
    sliced = torch.randn(4, 6, 6, 6)[:, ::2]
    for t in (x, cl, sliced):
        got = nt.batch_norm_stats(t, 1e-5, soc="host")
        want = normkern.batch_norm_stats(np.ascontiguousarray(t.detach().numpy()), 1e-5, soc="host")
        assert np.array_equal(got[0].numpy(), want[0]) and np.array_equal(got[1].numpy(), want[1])


def test_bad_tensors_are_normkern_errors():
    with pytest.raises(normkern.InvalidParameterError, match=r"\[batch_norm_stats\] input dtype must be one of"):
        nt.batch_norm_stats(torch.zeros(2, 3, dtype=torch.float64), 1e-5, soc="host")
    with pytest.raises(normkern.InvalidParameterError, match="must be a CPU tensor"):
        nt.batch_norm_stats(torch.zeros(2, 3, device="meta"), 1e-5, soc="host")


@pytest.mark.parametrize("op", _registry.names())
def test_repeated_tensor_calls_take_the_lean_path_and_give_the_full_paths_bits(op):
    """A tensor call that repeats a signature runs as the op's prepared call (``_executor.pythonic``), as an
    array call does: every call gives the bits of the op's full path (bind, then run) on its own data."""
    record = _registry.get(op)
    shape = (6, 4) if record.shape_ranks == (2, 2) else (3, 5, 7)
    options = {o.dest: o.kwargs.get("default", True) for o in record.options}
    record.signatures.clear()
    for seed in range(4):
        kw = example_inputs(op, shape, seed=seed, **options)
        full = _copy(kw)
        outs = record.bind(**full, soc="host", arrival_seed=0).run()
        outs = (outs,) if len(record.outputs) == 1 else outs
        want = (*outs, *(full.get(name) for name in record.updated))
        tensors = _as_tensors(_copy(kw))
        got = getattr(nt, op)(**tensors, soc="host", arrival_seed=0)
        got = (got,) if len(record.outputs) == 1 else got
        got = (*got, *(tensors.get(name) for name in record.updated))
        for a, b in zip(got, want, strict=True):
            assert (a is None and b is None) or np.array_equal(nt.to_numpy(a).view(np.uint8), b.view(np.uint8))
        assert len(record.signatures) == 1  # bound at the first call, then reused


def _copy(kw):
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kw.items()}
