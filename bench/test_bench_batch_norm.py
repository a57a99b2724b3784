"""The batch-norm ops of a training step on their host plans against their PyTorch counterparts, same run, float32,
with the same rounds' STREAM triad (issue 48's op table):

- ``batch_norm`` (training / evaluation) against ``torch.native_batch_norm``;
- ``fast_batch_norm_backward`` (training / evaluation) against ``native_batch_norm_backward``;
- ``batch_norm_stats`` against ``torch.batch_norm_update_stats``, ``batch_norm_elemt`` against an evaluation
  ``F.batch_norm``, and ``batch_norm_backward_reduce`` + ``batch_norm_backward_elemt`` together against
  ``native_batch_norm_backward`` (they are its two halves).

Targets: every op >= 1.0x its counterpart at every shape; at 32x64x56x56 and 256x256x14x14 at least 0.75 of the
same run's triad under the op's bytes model (``<op>_triad_fraction``).
"""

from __future__ import annotations

import numpy as np
import pytest

import normkern
from normkern.ops.batch_norm import bytes_moved as forward_bytes
from normkern.ops.fast_batch_norm_backward import bytes_moved as backward_bytes

from .conftest import record, time_against_triad

torch = pytest.importorskip("torch")

SHAPES = [(8, 1024, 14, 14), (8, 2048, 7, 7), (32, 256, 14, 14), (2, 64, 56, 56), (32, 64, 56, 56),
          (256, 256, 14, 14)]
F32 = np.float32


def _data(shape):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 2 + 1).astype(F32)
    dy = rng.standard_normal(shape).astype(F32)
    c = shape[1]
    w, b = rng.uniform(0.5, 1.5, c).astype(F32), (0.1 * rng.standard_normal(c)).astype(F32)
    mean = x.mean(axis=(0, 2, 3), dtype=np.float64).astype(F32)
    invstd = (1 / np.sqrt(x.var(axis=(0, 2, 3), dtype=np.float64) + 1e-5)).astype(F32)
    return x, dy, w, b, mean, invstd


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_batch_norm_forward(benchmark, environment, stream, shape, training):
    x, _, w, b, mean, invstd = _data(shape)
    rm, rv = np.zeros(shape[1], F32), np.ones(shape[1], F32)
    out = (np.empty_like(x), np.empty(shape[1], F32), np.empty(shape[1], F32))
    t = {k: torch.from_numpy(v) for k, v in dict(x=x, w=w, b=b, rm=rm.copy(), rv=rv.copy()).items()}
    runs = {"batch_norm": lambda: normkern.batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5, soc="host", out=out),
            "torch": lambda: torch.native_batch_norm(t["x"], t["w"], t["b"], t["rm"], t["rv"], training, 0.1, 1e-5)}
    row = {"bench": "batch_norm_ops", "op": "batch_norm", "shape": "x".join(map(str, shape)),
           "mode": "train" if training else "eval"}
    time_against_triad(benchmark, stream, runs, row, forward_bytes(shape, x.dtype), ["batch_norm"])
    record(row)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_fast_batch_norm_backward(benchmark, environment, stream, shape, training):
    x, dy, w, _, mean, invstd = _data(shape)
    rv = (1 / invstd ** 2).astype(F32)
    out = (np.empty_like(x), np.empty(shape[1], F32), np.empty(shape[1], F32))
    t = {k: torch.from_numpy(v) for k, v in dict(x=x, dy=dy, w=w, m=mean, r=invstd, rv=rv).items()}
    runs = {"fast_batch_norm_backward": lambda: normkern.fast_batch_norm_backward(
                dy, x, w, mean, rv, mean, invstd, training, 1e-5, soc="host", out=out),
            "torch": lambda: torch.ops.aten.native_batch_norm_backward(
                t["dy"], t["x"], t["w"], t["m"], t["rv"], t["m"], t["r"], training, 1e-5, [True, True, True])}
    row = {"bench": "batch_norm_ops", "op": "fast_batch_norm_backward", "shape": "x".join(map(str, shape)),
           "mode": "train" if training else "eval"}
    time_against_triad(benchmark, stream, runs, row, backward_bytes(shape, x.dtype), ["fast_batch_norm_backward"])
    record(row)


@pytest.mark.parametrize("piece", ["batch_norm_stats", "batch_norm_elemt", "backward_reduce+elemt"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_synchronized_pieces(benchmark, environment, stream, shape, piece):
    """batch_norm_stats, batch_norm_elemt, and the backward's two halves together, each against PyTorch's."""
    x, dy, w, b, mean, invstd = _data(shape)
    c = shape[1]
    counts = np.array([x.size // c], F32)
    stats_out = (np.empty(c, F32), np.empty(c, F32))
    y = np.empty_like(x)
    gi = np.empty_like(x)
    t = {k: torch.from_numpy(v) for k, v in dict(x=x, dy=dy, w=w, b=b, m=mean, r=invstd).items()}
    rm, rv = torch.zeros(c), torch.ones(c)

    def halves():
        sum_dy, sum_dy_xmu, _, _ = normkern.batch_norm_backward_reduce(dy, x, mean, invstd, w, True, True, True,
                                                                      soc="host")
        normkern.batch_norm_backward_elemt(dy, x, mean, invstd, w, sum_dy, sum_dy_xmu, counts, soc="host", out=gi)

    pairs = {
        "batch_norm_stats": (lambda: normkern.batch_norm_stats(x, 1e-5, soc="host", out=stats_out),
                             lambda: torch.batch_norm_update_stats(t["x"], rm, rv, 0.1), x.nbytes),
        "batch_norm_elemt": (lambda: normkern.batch_norm_elemt(x, w, b, mean, invstd, 1e-5, soc="host", out=y),
                             lambda: torch.nn.functional.batch_norm(t["x"], rm, rv, t["w"], t["b"], False),
                             2 * x.nbytes),
        "backward_reduce+elemt": (halves, lambda: torch.ops.aten.native_batch_norm_backward(
            t["dy"], t["x"], t["w"], None, None, t["m"], t["r"], True, 1e-5, [True, True, True]), 3 * x.nbytes),
    }
    ours, theirs, nbytes = pairs[piece]
    row = {"bench": "batch_norm_ops", "op": piece, "shape": "x".join(map(str, shape)), "mode": "train"}
    time_against_triad(benchmark, stream, {piece: ours, "torch": theirs}, row, nbytes, [piece])
    record(row)
