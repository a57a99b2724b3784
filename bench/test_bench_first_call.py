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

from normkern import _registry

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
record = normkern._registry.get(op)
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
