import dataclasses

import ml_dtypes
import numpy as np
import pytest

import tiling

DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}

#: A small SoC so that shapes either side of every block boundary stay cheap:
#: float32 blocks of (3072 - 1024) // 8 = 256 elements, half blocks of 192; 5 vector cores.
TINY = dataclasses.replace(tiling.get_soc("Ascend910B2"), name="tiny", vector_cores=5, ub_bytes=3072,
                           ub_raw_bytes=3072, arch="host", system_workspace_bytes=4096)


def make_input(shape, dtype, seed=0, offset=3.0):
    """Values with a non-zero mean (so the two passes matter), exactly representable in ``dtype``."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 1.5 + offset).astype(DTYPES[dtype])


def make_spread_input(shape, dtype, seed=0):
    """Values of both signs spread over six decades. Balanced reduction trees of different shapes
    round differently on them; on values of one magnitude they often round alike, so a bit-for-bit
    test fed only those can pass a wrong tree."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, shape)).astype(DTYPES[dtype])


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.fixture
def threads():
    """Run the body at a given normkern thread count, restoring it afterwards."""
    import normkern

    before = normkern.get_num_threads()
    yield normkern.set_num_threads
    normkern.set_num_threads(before)
