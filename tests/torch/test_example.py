"""examples/train_syncbn_ddp.py runs as the README says, alone and under torchrun with two ranks, and its loss
falls."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_syncbn_ddp.py"


def _losses(stdout: str) -> list[float]:
    return [float(m) for m in re.findall(r"loss (\d+\.\d+)", stdout)]


@pytest.mark.parametrize("launcher", [[], [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]],
                         ids=["one process", "torchrun 2 ranks"])
def test_the_example_trains(launcher):
    command = (launcher or [sys.executable]) + [str(EXAMPLE), "--steps", "60"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, check=True)
    losses = _losses(result.stdout)
    assert len(losses) == 7, result.stdout + result.stderr
    assert losses[-1] < 0.8 * losses[0]
    assert f"({2 if launcher else 1} rank(s))" in result.stdout
