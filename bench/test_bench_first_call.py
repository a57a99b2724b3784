"""First use: per op and dtype, a fresh process's import and first call with an empty Numba cache (cold: the
kernels compile) and again with the cache that run left (warm: they load).

Targets: cold first call <= 3 s per op and dtype; warm, import + first call <= 0.5 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

import pytest

from normkern import registry as _registry

from .conftest import record

#: A process that imports normkern, runs one call of an op on the host plan, and prints its timings.
_CHILD = """
import json, sys, time
start = time.perf_counter()
import numpy
numpy_done = time.perf_counter()
import normkern
from normkern.examples import example_inputs
imported = time.perf_counter()
op, dtype, shape, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
record = normkern.registry.get(op)
options = {option.dest: option.kwargs.get("default", True) for option in record.options} | options
kw = example_inputs(op, shape, dtype, **options)
made = time.perf_counter()
record.function(**kw, soc="host")
called = time.perf_counter()
print(json.dumps({"numpy_s": numpy_done - start, "import_s": imported - numpy_done, "first_call_s": called - made,
                  "total_s": called - start - (made - imported)}))
"""


def _run(op: str, dtype: str, shape: tuple[int, ...], options: dict, cache: str) -> dict:
    result = subprocess.run([sys.executable, "-c", _CHILD, op, dtype, json.dumps(shape), json.dumps(options)],
                            capture_output=True, text=True, check=True,
                            env={"NUMBA_CACHE_DIR": cache, "PATH": "/usr/bin:/bin"}, timeout=600)
    return json.loads(result.stdout)


#: Each op at 8x16x7x7 (gather: 4 devices x 16 channels); FastBatchNormBackward also with planes too long for
#: one a pass (56x56: its general kernels, one for training, one for inference).
CASES = [(op, (4, 16) if _registry.get(op).shape_ranks == (2, 2) else (8, 16, 7, 7), {}) for op in _registry.names()]
CASES += [("fast_batch_norm_backward", (8, 16, 56, 56), {"training": training}) for training in (True, False)]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(("op", "shape", "options"), CASES,
                         ids=[f"{op}-{'x'.join(map(str, shape))}{''.join(f'-{k}={v}' for k, v in options.items())}"
                              for op, shape, options in CASES])
def test_first_call(environment, op, shape, options, dtype):
    with tempfile.TemporaryDirectory() as cache:
        cold = _run(op, dtype, shape, options, cache)
        warm = _run(op, dtype, shape, options, cache)
    record({"op": op, "dtype": dtype, "shape": "x".join(map(str, shape)), **options,
            "cold_first_call_s": round(cold["first_call_s"], 2),
            "cold_import_s": round(cold["import_s"], 2), "warm_first_call_s": round(warm["first_call_s"], 3),
            "warm_numpy_s": round(warm["numpy_s"], 2), "warm_import_s": round(warm["import_s"], 2),
            "warm_total_s": round(warm["total_s"], 2)})


#: A PyTorch user's first training step: a small CNN with two norm layers (conv 3->16, norm, ReLU, conv
#: 16->32, norm, ReLU, pool, linear) on an 8x3x16x16 batch, forward, backward and an SGD step.
_STEP = """
import json, sys, time
start = time.perf_counter()
import torch
import normkern.torch as nt
imported = time.perf_counter()
layer = sys.argv[1]
torch.manual_seed(0)
def norm(c):
    return {"BatchNorm2d": lambda: nt.BatchNorm2d(c), "GroupNorm": lambda: nt.GroupNorm(4, c),
            "torch.nn.BatchNorm2d": lambda: torch.nn.BatchNorm2d(c)}[layer]()
model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), norm(16), torch.nn.ReLU(),
                            torch.nn.Conv2d(16, 32, 3, padding=1), norm(32), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
def step():
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
began = time.perf_counter()
step()
first = time.perf_counter()
step()
second = time.perf_counter()
print(json.dumps({"import_s": imported - start, "first_step_s": first - began,
                  "second_step_ms": (second - first) * 1e3}))
"""


@pytest.mark.parametrize("layer", ["BatchNorm2d", "GroupNorm", "torch.nn.BatchNorm2d"])
def test_first_training_step(environment, layer):
    """Target: a cold first step (empty Numba cache) <= 4 s with either normkern layer."""
    with tempfile.TemporaryDirectory() as cache:
        runs = [json.loads(subprocess.run([sys.executable, "-c", _STEP, layer], capture_output=True, text=True,
                                          check=True, env={"NUMBA_CACHE_DIR": cache, "PATH": "/usr/bin:/bin"},
                                          timeout=600).stdout) for _ in range(2)]
    record({"layer": layer, "cold_first_step_s": round(runs[0]["first_step_s"], 2),
            "warm_first_step_s": round(runs[1]["first_step_s"], 3),
            "second_step_ms": round(runs[1]["second_step_ms"], 2), "warm_import_s": round(runs[1]["import_s"], 2)})


#: Numba's own floor for a warm fresh process: numpy, numba, and one call of a one-line cached kernel.
_FLOOR = """
import json, time
start = time.perf_counter()
import numpy
import numba
imported = time.perf_counter()
@numba.njit(cache=True, nogil=True)
def one(x):
    return x[0] + 1.0
one(numpy.ones(1))
called = time.perf_counter()
print(json.dumps({"import_s": imported - start, "first_call_s": called - imported, "total_s": called - start}))
"""


def test_numba_floor(environment, tmp_path):
    """What a warm fresh process costs with Numba alone (the warm-process target is this plus 0.05 s)."""
    script = tmp_path / "floor.py"
    script.write_text(_FLOOR)
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    runs = [json.loads(subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True,
                                      env=env, timeout=300).stdout) for _ in range(4)]
    warm = min(runs[1:], key=lambda r: r["total_s"])
    record({"floor": "numpy + numba + one cached call", "warm_total_s": round(warm["total_s"], 2),
            "warm_import_s": round(warm["import_s"], 2), "warm_first_call_s": round(warm["first_call_s"], 3)})
