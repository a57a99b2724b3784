"""normkern.torch.SyncBatchNorm across real processes: torch.multiprocessing spawn, gloo over a file://
rendezvous in a temp dir, 2 and 3 ranks with unequal batches (one of 1 row), float32 and bfloat16, against a
float64 torch.nn.BatchNorm2d over the concatenated batch."""

import datetime
import os
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import normkern.torch as nt
from tests.tolerances import TOLERANCE, assert_close

# normkern.torch is imported here, before any rank's init_process_group: it imports torch._dynamo (its layers'
# torch.compiler.disable), and torch._dynamo imported after init_process_group keeps the gloo group's threads
# alive past destroy_process_group, so a rank may abort at interpreter exit (docs/torch.md)

C = 6
SPATIAL = (5, 7)
EPS = 1e-5
MOMENTUM = 0.1
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _data(batches, dtype):
    """The whole batch (every rank's rows, in rank order), its output gradient, weight and bias."""
    g = torch.Generator().manual_seed(7)
    total = sum(batches)
    x = (torch.randn(total, C, *SPATIAL, generator=g) * 2 + 1).to(DTYPES[dtype])
    dy = torch.randn(total, C, *SPATIAL, generator=g).to(DTYPES[dtype])
    weight = torch.rand(C, generator=g) + 0.5
    bias = torch.randn(C, generator=g)
    return x, dy, weight, bias


def _step(rank, batches, dtype):
    x, dy, weight, bias = _data(batches, dtype)
    start = sum(batches[:rank])
    rows = slice(start, start + batches[rank])
    layer = nt.SyncBatchNorm(C, eps=EPS, momentum=MOMENTUM)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
    shard = x[rows].clone().requires_grad_()
    out = layer(shard)
    out.backward(dy[rows])
    zeros = torch.zeros(C)
    return {"output": out.detach(), "grad_input": shard.grad,
            "grad_weight": zeros if layer.weight.grad is None else layer.weight.grad,
            "grad_bias": zeros if layer.bias.grad is None else layer.bias.grad,
            "running_mean": layer.running_mean.clone(), "running_var": layer.running_var.clone(),
            "num_batches_tracked": layer.num_batches_tracked.clone()}


def _worker(rank, world, init_file, batches, dtype, out_dir, fail_rank):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        if rank == fail_rank:
            raise RuntimeError(f"rank {rank} fails on purpose")
        first = _step(rank, batches, dtype)
        again = _step(rank, batches, dtype)
        for name, value in first.items():
            if value is None:
                assert again[name] is None, name
                continue
            assert torch.equal(value.view(torch.uint8) if value.is_floating_point() else value,
                               again[name].view(torch.uint8) if value.is_floating_point() else again[name]), name
        first["threads"] = nt.threads_for(world)
        torch.save(first, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _spawn(tmp_path, batches, dtype, fail_rank=-1, timeout=90):
    world = len(batches)
    context = mp.spawn(_worker, args=(world, str(tmp_path / "rendezvous"), batches, dtype, str(tmp_path), fail_rank),
                       nprocs=world, join=False)
    deadline = time.monotonic() + timeout
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"ranks did not finish within {timeout} s")
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]


def _reference(batches, dtype):
    x, dy, weight, bias = _data(batches, dtype)
    ref = torch.nn.BatchNorm2d(C, eps=EPS, momentum=MOMENTUM).double()
    with torch.no_grad():
        ref.weight.copy_(weight)
        ref.bias.copy_(bias)
    x64 = x.double().requires_grad_()
    out = ref(x64)
    out.backward(dy.double())
    return {"output": out.detach(), "grad_input": x64.grad, "grad_weight": ref.weight.grad,
            "grad_bias": ref.bias.grad, "running_mean": ref.running_mean, "running_var": ref.running_var}


@pytest.mark.parametrize("batches, dtype", [((3, 1), "float32"), ((2, 5, 1), "bfloat16"), ((1, 4, 2), "float32"),
                                            ((3, 0, 2), "float32")])
def test_sync_batch_norm_over_ranks_matches_float64_batch_norm(tmp_path, batches, dtype):
    results = _spawn(tmp_path, batches, dtype)
    want = _reference(batches, dtype)
    out = torch.cat([r["output"] for r in results])
    # a rank with an empty batch gets no input gradient (None: zeros), as in PyTorch
    grad_input = torch.cat([r["grad_input"] if r["grad_input"] is not None else r["output"] for r in results])
    # grad_weight / grad_bias stay per rank (the data-parallel wrapper all-reduces them): their sum is the
    # whole batch's
    grad_weight = sum(r["grad_weight"].double() for r in results)
    grad_bias = sum(r["grad_bias"].double() for r in results)
    assert_close(out.float().numpy(), want["output"].numpy(), dtype=dtype, scale=want["output"].abs().max().item())
    assert_close(grad_input.float().numpy(), want["grad_input"].numpy(), dtype=dtype,
                 scale=2 * want["grad_input"].abs().max().item())
    dy_sum = _data(batches, dtype)[1].double().abs().sum(dim=(0, 2, 3)).max().item()
    assert_close(grad_bias.numpy(), want["grad_bias"].numpy(), dtype="float32", scale=dy_sum)
    assert_close(grad_weight.numpy(), want["grad_weight"].numpy(), dtype="float32", scale=4 * dy_sum)
    for r in results:  # every rank holds the same running statistics
        assert torch.equal(r["running_mean"], results[0]["running_mean"])
        assert int(r["num_batches_tracked"]) == 1
        assert r["threads"] == max(1, (os.cpu_count() or 1) // len(batches))
    for name in ("running_mean", "running_var"):
        assert_close(results[0][name].numpy(), want[name].numpy(), dtype="float32",
                     scale=want[name].abs().max().item())
    assert TOLERANCE[dtype] > 0


def test_a_rank_that_raises_fails_the_others_within_a_timeout(tmp_path):
    start = time.monotonic()
    with pytest.raises(mp.ProcessRaisedException, match="rank 1 fails on purpose"):
        _spawn(tmp_path, (2, 3), "float32", fail_rank=1, timeout=60)
    assert time.monotonic() - start < 60


def _contract_worker(rank, world, init_file, out_dir):
    """Across ranks: a channels_last batch stays channels_last, ``bias=False`` trains, a wrong channel count is
    torch's error on every rank before any collective (no rank waits), and a gradient penalty is refused at the
    second backward with the error that says why."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        found = {}
        layer = nt.SyncBatchNorm(C, bias=False)
        x = torch.randn(2 + rank, C, *SPATIAL).to(memory_format=torch.channels_last).requires_grad_()
        out = layer(x)
        out.backward(torch.ones_like(out))
        found["channels_last"] = (out.is_contiguous(memory_format=torch.channels_last),
                                  x.grad.is_contiguous(memory_format=torch.channels_last))
        found["grad_weight"] = layer.weight.grad is not None and layer.bias is None
        try:
            layer(torch.randn(2, C + 2, *SPATIAL))
        except RuntimeError as error:
            found["wrong_channels"] = str(error)
        found["counted"] = int(layer.num_batches_tracked)
        x = torch.randn(2, C, *SPATIAL, requires_grad=True)
        (grad,) = torch.autograd.grad(nt.SyncBatchNorm(C)(x).pow(2).sum(), x, create_graph=True)
        try:
            grad.pow(2).sum().backward()
        except RuntimeError as error:
            found["double_backward"] = str(error)
        torch.save(found, os.path.join(out_dir, f"contract{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_the_synchronized_layer_keeps_torchs_contract_across_ranks(tmp_path):
    context = mp.spawn(_contract_worker, args=(2, str(tmp_path / "rendezvous"), str(tmp_path)), nprocs=2, join=False)
    deadline = time.monotonic() + 90
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail("ranks did not finish within 90 s")
    for rank in range(2):
        found = torch.load(tmp_path / f"contract{rank}.pt")
        assert found["channels_last"] == (True, True) and found["grad_weight"]
        assert found["wrong_channels"] == f"running_mean should contain {C + 2} elements not {C}"
        assert found["counted"] == 1
        assert "the synchronized batch norm across processes" in found["double_backward"]
        assert "has no double backward" in found["double_backward"]
