import dataclasses
import subprocess
import sys

import pytest

from tiling import Combine, ReduceLevel, ReductionTree, get_soc, host_soc, soc_names


def test_a2_figures_from_the_research_notes():
    soc = get_soc("Ascend910B2")
    assert (soc.vector_cores, soc.cube_cores) == (48, 24)
    assert (soc.ub_raw_bytes, soc.ub_bytes) == (196608, 196352)
    assert soc.system_workspace_bytes == 16 * 1024 * 1024
    assert get_soc("Ascend910B4").vector_cores == 40
    assert get_soc("Ascend910").system_workspace_bytes == 2 * 1024 * 1024
    assert get_soc("Ascend950").ub_bytes == 245760
    assert "vector_cores" in get_soc("Ascend910B3").unverified
    assert get_soc(None) is get_soc("Ascend910B2")


def test_every_name_resolves_and_unknown_names_fail():
    for name in soc_names():
        assert get_soc(name).name == name
    with pytest.raises(ValueError, match="unknown SoC 'Ascend999'"):
        get_soc("Ascend999")


def test_custom_soc_is_a_dataclass_replace():
    custom = dataclasses.replace(get_soc("Ascend910B2"), vector_cores=40, ub_bytes=196608)
    assert get_soc(custom) is custom
    with pytest.raises(ValueError, match="ub_bytes must not exceed"):
        dataclasses.replace(get_soc("Ascend910B2"), ub_bytes=10**6)


def test_host_describes_this_machine():
    soc = host_soc()
    assert soc.vector_cores >= 1 and soc.ub_bytes >= 64 * 1024 and soc.system_workspace_bytes == 0


def test_determinism_is_derived_from_atomic_fan_in():
    lanes = ReduceLevel("lanes", Combine.PAIRWISE, 64)
    assert ReductionTree((lanes, ReduceLevel("cores", Combine.ATOMIC, 2))).deterministic
    assert not ReductionTree((lanes, ReduceLevel("cores", Combine.ATOMIC, 3))).deterministic
    assert ReductionTree((lanes, ReduceLevel("cores", Combine.SEQUENTIAL, 48))).deterministic


def test_tiling_imports_neither_numba_nor_normkern():
    code = "import sys, tiling; tiling.plan_batch_norm_stats((2, 3, 4), 'float32'); " \
           "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'normkern')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
