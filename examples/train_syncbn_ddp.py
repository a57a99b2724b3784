"""Train a small CNN on CPU with DistributedDataParallel and normkern's SyncBatchNorm.

    torchrun --nproc_per_node 2 examples/train_syncbn_ddp.py     # two ranks on this machine (gloo)
    python examples/train_syncbn_ddp.py                          # one process, no process group

The data are synthetic: 8x8 images of 4 classes (a class is a bright quadrant), noisy. Each rank draws its
own batch; SyncBatchNorm normalizes over the batches of every rank. Rank 0 prints the loss and the time
per step (each over the last 10 steps; step 1 includes compiling the kernels, or loading them from the
Numba cache).
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import torch
import torch.distributed as dist
from torch import nn

import normkern.torch as nt


def batch(generator: torch.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.randint(0, 4, (size,), generator=generator)
    images = torch.randn(size, 1, 8, 8, generator=generator) * 1.5
    for i, label in enumerate(labels.tolist()):
        row, col = divmod(label, 2)
        images[i, 0, row * 4:(row + 1) * 4, col * 4:(col + 1) * 4] += 0.5
    return images, labels


def model() -> nn.Module:
    net = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1, stride=2), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Flatten(), nn.Linear(16 * 4 * 4, 4),
    )
    return nt.SyncBatchNorm.convert_sync_batchnorm(net)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=32, help="images per rank and step")
    args = parser.parse_args()
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    torch.manual_seed(0)  # the same initial weights on every rank
    net = model()
    if distributed:
        net = nn.parallel.DistributedDataParallel(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    data = torch.Generator().manual_seed(1 + rank)
    last = time.perf_counter()
    losses = []
    for step in range(1, args.steps + 1):
        images, labels = batch(data, args.batch)
        loss = nn.functional.cross_entropy(net(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if step == 1 or step % 10 == 0:
            now = time.perf_counter()
            per_step = (now - last) / (1 if step == 1 else 10) * 1e3  # step 1 includes compiling or loading
            last = now
            if rank == 0:
                mean_loss = sum(losses[-10:]) / len(losses[-10:])
                print(f"step {step:3d}  loss {mean_loss:.3f}  {per_step:6.1f} ms/step  ({world} rank(s))", flush=True)
    if distributed:
        # The DDP wrapper holds the process group: release it first, so that the group (and gloo's threads)
        # is torn down here, not at interpreter exit, where gloo can abort the process.
        del net, optimizer
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
