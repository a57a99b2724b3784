"""The fixed cost of a repeated call: each op on a small input, host plan, as the bare per-core body (the
kernel alone, its arguments made beforehand), a repeated plain call (the lean path), a prepared call
(``normkern.prepare``), the tensor op (``normkern.torch``) and, where PyTorch has the op, PyTorch's own.

Targets: a repeated plain call at most 10 us above the bare body; the tensor op at most 15 us above it.
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
    plan = tiling.plan_batch_norm_stats(x.shape, "float32", tiling.get_soc("host"))
    args = plan.kernel_args()
    x3 = x.reshape(plan.n, plan.c, plan.hxw)
    mean, invstd = np.empty(plan.c, np.float32), np.empty(plan.c, np.float32)
    eps = np.float32(1e-5)
    if plan.strategy is not tiling.BatchNormStatsStrategy.SPLIT_C:
        pytest.skip(f"the host plan is {plan.strategy.value}")
    return lambda: stats_kernel.split_c(x3, args, eps, mean, invstd, 0, plan.block_dim)


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
    times = interleaved_medians(runs, rounds=15)
    row = {"op": op, "shape": "x".join(map(str, SHAPES[op]))}
    for name, (med, _) in times.items():
        row[f"{name}_us"] = round(med * 1e6, 1)
    if "bare" in times:
        row["plain_above_bare_us"] = round((times["plain"][0] - times["bare"][0]) * 1e6, 1)
        row["tensor_op_above_bare_us"] = round((times["tensor_op"][0] - times["bare"][0]) * 1e6, 1)
    record(row)
