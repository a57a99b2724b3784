"""Everything the README shows runs: its Python blocks, its example commands, and its op table is the
support table."""

import re
import shlex
from pathlib import Path

import pytest

import tiling
from normkern.cli import main

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _blocks(language: str) -> list[str]:
    """The fenced blocks of ``language`` ("" for plain fences), in order."""
    blocks, current, kind = [], None, None
    for line in README.splitlines():
        if line.startswith("```"):
            if current is None:
                current, kind = [], line[3:].strip()
            else:
                if kind == language:
                    blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_the_readme_is_for_users_and_short():
    assert len(README.splitlines()) <= 300


def test_every_python_block_runs_in_order(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the files the tour writes
    namespace: dict = {}
    blocks = _blocks("python")
    assert len(blocks) >= 5
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    assert "batch_norm_stats[split_c] Ascend910B2" in capsys.readouterr().out


def _commands() -> list[str]:
    """The example commands, a line ending in a backslash joined to the next."""
    text = "\n".join(_blocks("")).replace("\\\n", " ")
    lines = [line.split("#")[0].strip() for line in text.splitlines()]
    return [line for line in lines if line.startswith("normkern ") and "[" not in line and "..." not in line]


@pytest.mark.parametrize("command", _commands())
def test_every_example_command_runs(command, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the files the commands write
    assert main(shlex.split(command)[1:]) == 0
    output = capsys.readouterr().out
    if "--check" in command:
        assert re.search(r"^bitwise_equal_to_simulator +True$", output, re.M)


def test_the_op_table_is_the_support_table():
    lines = README.splitlines()
    start = lines.index("| op | Atlas A2/A3 | Atlas training | Ascend 950 | host |")
    end = lines.index("", start)
    header, _, *rows = lines[start:end]
    families = [cell.strip() for cell in header.strip("|").split("|")][1:]
    assert families == [tiling.FAMILIES[arch].split(" (")[0] for arch in ("DAV_2201", "DAV_1001", "DAV_3510", "host")]
    shown = {}
    for row in rows:
        op, *cells = [cell.strip() for cell in row.strip("|").split("|")]
        shown.update({(op, arch): cell for arch, cell in zip(("DAV_2201", "DAV_1001", "DAV_3510", "host"), cells,
                                                             strict=True)})
    words = {"all three": ("float32", "float16", "bfloat16"), "float32, float16": ("float32", "float16")}
    for entry in tiling.support_table():
        if entry.family == "DAV_2002":
            # "Atlas inference (Ascend310P3) has none of these ops but batch_norm, which normkern does not plan there"
            assert not entry.dtypes or (entry.op == "batch_norm" and entry.tiling is None)
            continue
        cell = shown.pop((entry.op, entry.family))
        if not entry.dtypes:
            assert cell == "no kernel"
            continue
        dtypes, source = cell.split(": ")
        assert words[dtypes] == entry.dtypes
        assert source == {"cann-ops-nn": "exact", "modeled": "modeled", None: "not planned"}[entry.tiling]
    assert shown == {}
