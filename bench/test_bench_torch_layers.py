"""normkern.torch's layers against torch.nn's, same run.

- The layer alone, forward + backward: ``normkern.torch.SyncBatchNorm`` (one process: the local path of
  ``BatchNorm2d``), ``normkern.torch.BatchNorm2d`` (stats + elemt forward, fast_batch_norm_backward) and
  ``torch.nn.BatchNorm2d`` (the closest CPU peer), float32 and bfloat16 data (float32 parameters).
- A ResNet-style block (conv-bn-relu x2), forward + backward per step: normkern's SyncBatchNorm at two ranks
  (gloo, spawned processes, each rank its own batch) against torch.nn.BatchNorm2d at one rank with one rank's
  batch, and at one rank with both ranks' batches.
"""

from __future__ import annotations

import datetime
import os
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import normkern.torch as nt

from .conftest import interleaved_medians, record, timing_columns

SHAPES = [(32, 64, 56, 56), (256, 256, 14, 14), (8, 512, 7, 7)]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _fwd_bwd(layer, x, dy):
    def run():
        xx = x.detach().requires_grad_()
        layer(xx).backward(dy)
    return run


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_layer_forward_backward(benchmark, environment, shape, dtype):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(*shape, generator=g) * 2 + 1).to(DTYPES[dtype])
    dy = torch.randn(*shape, generator=g).to(DTYPES[dtype])
    c = shape[1]
    runs = {"nk_sync": _fwd_bwd(nt.SyncBatchNorm(c), x, dy), "nk_bn2d": _fwd_bwd(nt.BatchNorm2d(c), x, dy),
            "torch": _fwd_bwd(nn.BatchNorm2d(c), x, dy)}
    times = interleaved_medians(runs, rounds=9)
    benchmark.pedantic(runs["nk_sync"], rounds=3, warmup_rounds=1)
    row = {"op": "layer_fwd_bwd", "shape": "x".join(map(str, shape)), "dtype": dtype}
    timing_columns(row, times, 5 * x.numel() * x.element_size())
    for name in ("nk_sync", "nk_bn2d"):
        row[f"{name}_vs_torch"] = round(times["torch"][0] / times[name][0], 2)
    benchmark.extra_info.update(row)
    record(row)


BLOCK_BATCH, BLOCK_C, BLOCK_HW, STEPS = 16, 64, 28, 12


def _block(norm):
    return nn.Sequential(nn.Conv2d(BLOCK_C, BLOCK_C, 3, padding=1, bias=False), norm(BLOCK_C), nn.ReLU(),
                         nn.Conv2d(BLOCK_C, BLOCK_C, 3, padding=1, bias=False), norm(BLOCK_C), nn.ReLU())


def _step_times(block, batch, dtype, rank=0):
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(batch, BLOCK_C, BLOCK_HW, BLOCK_HW, generator=g).to(DTYPES[dtype])
    block = block.to(DTYPES[dtype])
    times = []
    for _ in range(STEPS):
        start = time.perf_counter()
        block(x.requires_grad_()).float().square().mean().backward()
        times.append(time.perf_counter() - start)
    return float(np.median(times[2:]))


def _block_worker(rank, world, init_file, dtype, out_dir):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        median = _step_times(_block(nt.SyncBatchNorm), BLOCK_BATCH, dtype, rank)
        with open(os.path.join(out_dir, f"block{rank}.txt"), "w") as handle:
            handle.write(str(median))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_resnet_block_two_ranks_against_one(benchmark, environment, tmp_path, dtype):
    mp.spawn(_block_worker, args=(2, str(tmp_path / "rendezvous"), dtype, str(tmp_path)), nprocs=2, join=True)
    two_ranks = max(float((tmp_path / f"block{r}.txt").read_text()) for r in range(2))
    one_rank = _step_times(_block(nn.BatchNorm2d), BLOCK_BATCH, dtype)
    one_rank_both = _step_times(_block(nn.BatchNorm2d), 2 * BLOCK_BATCH, dtype)
    benchmark.pedantic(lambda: None, rounds=1)
    row = {"op": "resnet_block_step", "shape": f"{BLOCK_BATCH}x{BLOCK_C}x{BLOCK_HW}x{BLOCK_HW} per rank",
           "dtype": dtype, "nk_sync_2ranks_ms": round(two_ranks * 1e3, 2),
           "torch_bn_1rank_ms": round(one_rank * 1e3, 2), "torch_bn_1rank_2batches_ms": round(one_rank_both * 1e3, 2)}
    benchmark.extra_info.update(row)
    record(row)
