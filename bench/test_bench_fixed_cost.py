"""The fixed cost of a repeated call: each op on a small input, host plan, as the bare per-core body (the
kernel alone, its arguments made beforehand), a repeated plain call (the signature cache's path), a prepared call
(``normkern.prepare``), the tensor op (``normkern.torch``) and, where PyTorch has the op, PyTorch's own; the
layers on tiny inputs against torch.nn's; the numpy API beside PyTorch's ops against a process without them.

Targets (issue 47): a repeated plain call at most 4 us above the bare body, the tensor op at most 6 us above it,
a prepared call no slower than a plain one; the tiny layer calls at least as fast as torch.nn's; an op beside
PyTorch's within 1.2x of the same op in a process without PyTorch.
"""

from __future__ import annotations

import numpy as np
import pytest

import normkern
import tiling
from normkern import registry as _registry
from normkern.examples import example_inputs
from normkern.ops.batch_norm_stats import kernel as stats_kernel

from .conftest import interleaved_medians, record

torch = pytest.importorskip("torch")
import normkern.torch as nt  # noqa: E402

#: Small inputs (gather: 4 devices x 8 channels).
SHAPES = {name: (4, 8) if _registry.get(name).shape_ranks == (2, 2) else (32, 8, 8, 8) for name in _registry.names()}


def _bare_stats(x):
    """The host plan's body alone, its arguments made beforehand (the ``channels`` plan's direct or staged walk)."""
    plan = tiling.plan_batch_norm_stats(x.shape, "float32", tiling.get_soc("host"))
    args = plan.kernel_args()
    flat = x.reshape(-1)
    mean, invstd = np.empty(plan.c, np.float32), np.empty(plan.c, np.float32)
    eps = np.float32(1e-5)
    if plan.strategy is not tiling.BatchNormStatsStrategy.CHANNELS:
        pytest.skip(f"the host plan is {plan.strategy.value}")
    body = stats_kernel.channels_direct if args.direct else stats_kernel.channels
    return lambda: body(flat, args, eps, mean, invstd, 0, plan.block_dim)


@pytest.mark.parametrize("op", _registry.names())
def test_fixed_cost(environment, op):
    record_ = _registry.get(op)
    options = {o.dest: o.kwargs.get("default", True) for o in record_.options}
    kw = example_inputs(op, SHAPES[op], "float32", **options)
    tensors = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    prepared = normkern.prepare(op, **kw, soc="host")
    runs = {"plain": lambda: record_.function(**kw, soc="host"), "prepared": lambda: prepared(**kw),
            "tensor_op": lambda: getattr(nt, op)(**tensors, soc="host")}
    if op == "batch_norm_stats":
        runs["bare"] = _bare_stats(kw["input"])
        x = tensors["input"]
        runs["torch"] = lambda: torch.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5)
    for run in runs.values():
        run()
        run()
    times = interleaved_medians(runs, rounds=201, passes=3)  # single calls of microseconds: many of them
    row = {"op": op, "shape": "x".join(map(str, SHAPES[op]))}
    for name, (med, _) in times.items():
        row[f"{name}_us"] = round(med * 1e6, 1)
    if "bare" in times:
        row["plain_above_bare_us"] = round((times["plain"][0] - times["bare"][0]) * 1e6, 1)
        row["tensor_op_above_bare_us"] = round((times["tensor_op"][0] - times["bare"][0]) * 1e6, 1)
    record(row)


#: Tiny layer calls, where a step is its fixed cost: (N, C, H, W).
TINY = [(2, 8, 4, 4), (4, 16, 8, 8)]


def _layer_step(layer, x, dy):
    def run():
        layer(x.detach().requires_grad_()).backward(dy)
    return run


def _eval_forward(layer, x):
    layer.eval()

    def run():
        with torch.no_grad():
            layer(x)
    return run


@pytest.mark.parametrize("shape", TINY, ids=lambda s: "x".join(map(str, s)))
def test_tiny_layer_calls(environment, shape):
    """A layer's forward + backward (and BatchNorm2d's eval forward under no_grad) on a tiny input against its
    torch.nn twin, interleaved: the fixed cost of the layer path. ``floor``: a Python autograd.Function with the
    layer's inputs and outputs that does no work (its forward returns a clone, its backward three tensors made
    by ``torch.from_numpy``): what any layer written as such a function pays before its own work."""
    from torch import nn

    g = torch.Generator().manual_seed(0)
    x, dy = torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)
    c = shape[1]
    weight, bias = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))
    grads = [np.ones(c, np.float32), np.ones(c, np.float32)]

    class Floor(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input, weight, bias):
            ctx.save_for_backward(input, weight, bias)
            return input.clone()

        @staticmethod
        def backward(ctx, grad):
            _ = ctx.saved_tensors  # unpacked, as a layer's backward does
            return torch.from_numpy(np.empty(shape, np.float32)), *(torch.from_numpy(a) for a in grads)

    def floor():
        Floor.apply(x.detach().requires_grad_(), weight, bias).backward(dy)

    cases = {
        "BatchNorm2d": (_layer_step(nt.BatchNorm2d(c), x, dy), _layer_step(nn.BatchNorm2d(c), x, dy)),
        "SyncBatchNorm": (_layer_step(nt.SyncBatchNorm(c), x, dy), _layer_step(nn.BatchNorm2d(c), x, dy)),
        "GroupNorm(4)": (_layer_step(nt.GroupNorm(4, c), x, dy), _layer_step(nn.GroupNorm(4, c), x, dy)),
        "BatchNorm2d eval forward": (_eval_forward(nt.BatchNorm2d(c), x), _eval_forward(nn.BatchNorm2d(c), x)),
    }
    for layer, (ours, theirs) in cases.items():
        runs = {"normkern": ours, "torch": theirs, **({"floor": floor} if "eval" not in layer else {})}
        times = interleaved_medians(runs, rounds=201, passes=3)
        row = {"bench": "tiny_layer", "layer": layer, "shape": "x".join(map(str, shape)),
               **{f"{name}_us": round(med * 1e6, 1) for name, (med, _) in times.items()},
               "torch_over_normkern": round(times["torch"][0] / times["normkern"][0], 2)}
        record(row)


_BESIDE = """
import sys, time, numpy as np
if sys.argv[1] == "torch":
    import torch
import normkern
from normkern.examples import example_inputs
op, shape, group = sys.argv[2], tuple(int(v) for v in sys.argv[3].split("x")), 32
kw = example_inputs(op, shape, "float32", **({"group": group} if op == "group_norm_backward" else {}))
call = lambda: getattr(normkern, op)(**kw, soc="host")
before = lambda: None
if sys.argv[1] == "touched":  # the memory PyTorch's op moves (two tensors read, one written), moved by NumPy
    a, b, c = (np.ones(shape, np.float32) for _ in range(3))
    before = lambda: np.add(a, b, out=c)
if sys.argv[1] == "torch":
    x = torch.randn(*shape); dy = torch.randn_like(x); n, c = shape[:2]; hw = x[0, 0].numel()
    if op == "group_norm_backward":
        _, mean, rstd = torch.native_group_norm(x, None, None, n, c, hw, group, 1e-5)
        before = lambda: torch.ops.aten.native_group_norm_backward(dy, x, mean, rstd, None, n, c, hw, group,
                                                                   [True, False, False])
    else:
        w, m, r = torch.ones(c), torch.zeros(c), torch.ones(c)
        before = lambda: torch.ops.aten.native_batch_norm_backward(dy, x, w, None, None, m, r, True, 1e-5,
                                                                   [True, True, True])
for _ in range(5):
    call()
times = []
for _ in range(int(sys.argv[4])):
    before()
    start = time.perf_counter()
    call()
    times.append(time.perf_counter() - start)
print(np.median(times))
"""


@pytest.mark.parametrize("op, shape", [("fast_batch_norm_backward", "32x64x56x56"),
                                       ("group_norm_backward", "8x256x56x56"),
                                       ("group_norm_backward", "8x2048x7x7")])
def test_numpy_ops_beside_torch(environment, op, shape):
    """A numpy-API op called right after a PyTorch op (its backward twin) in a process that imported PyTorch,
    against the same op in a process without PyTorch, called alone and right after NumPy moves the memory
    PyTorch's op moves ("touched": what the caches do to it, without PyTorch's threads): alternated
    processes, the median of their medians."""
    import subprocess
    import sys

    def run(mode):
        out = subprocess.run([sys.executable, "-c", _BESIDE, mode, op, shape, "40"], capture_output=True,
                             text=True, check=True, timeout=600)
        return float(out.stdout.split()[-1])

    runs = {"alone": [], "touched": [], "torch": []}
    for _ in range(5):
        for mode, times in runs.items():
            times.append(run(mode))
    alone, touched, beside = (float(np.median(times)) for times in runs.values())
    record({"bench": "numpy_beside_torch", "op": op, "shape": shape, "alone_ms": round(alone * 1e3, 3),
            "touched_ms": round(touched * 1e3, 3), "beside_torch_ms": round(beside * 1e3, 3),
            "beside_over_alone": round(beside / alone, 2), "beside_over_touched": round(beside / touched, 2)})
