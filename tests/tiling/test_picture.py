"""Plan pictures: the drawn shares are each core's ranges, each cell of the index space exactly once."""

import itertools
import xml.etree.ElementTree as ET

import pytest

import tiling

NS = "{http://www.w3.org/2000/svg}"

PLANS = {
    "stats split_c": lambda: tiling.plan_batch_norm_stats((32, 64, 56, 56), "float32", "Ascend910B2"),
    "stats split_r": lambda: tiling.plan_batch_norm_stats((64, 4, 400), "float32", "Ascend910B2"),
    "stats atomic": lambda: tiling.plan_batch_norm_stats((64, 4, 400), "float16", "Ascend910B2", "atomic"),
    "reduce_backward split_c": lambda: tiling.plan_batch_norm_backward_reduce((8, 100, 7, 7), "float32", "host"),
    "fast_bn cross-core": lambda: tiling.plan_fast_batch_norm_backward(
        (32, 256, 56, 56), "float16", "Ascend910B2", None, training=True, weight_dtype="float32"),
    "fast_bn full_load": lambda: tiling.plan_fast_batch_norm_backward(
        (8, 64, 7, 7), "float32", "Ascend910B2", None, training=True, weight_dtype="float32"),
    "fast_bn host planes": lambda: tiling.plan_fast_batch_norm_backward(
        (16, 1024, 7, 7), "float32", "host", None, training=False, weight_dtype="float32"),
    "group_norm mode 1": lambda: tiling.plan_group_norm_backward(8, 64, 196, 8, "float32", "Ascend910B2"),
    "group_norm atomic": lambda: tiling.plan_group_norm_backward(8, 256, 3136, 32, "float32", "Ascend910B2",
                                                                 "atomic"),
    "group_norm mode 3": lambda: tiling.plan_group_norm_backward(2, 4, 200000, 2, "float32", "Ascend910B2"),
    "elemt": lambda: tiling.plan_batch_norm_elemt((32, 64, 56, 56), "float32", "Ascend910B2"),
    "gather": lambda: tiling.plan_batch_norm_gather_stats_with_counts(8, 1024, "float32", "Ascend910B2"),
}


def drawn(svg: str):
    root = ET.fromstring(svg)
    assert root.tag == NS + "svg"
    shares = [(int(r.get("data-core")), int(r.get("data-phase")), tuple(map(int, r.get("data-rows").split(","))),
               tuple(map(int, r.get("data-cols").split(","))), r) for r in root.iter(NS + "rect")
              if r.get("class") == "share"]
    return root, shares


def core_ranges(plan):
    """What each core was handed, read from the plan's own split (or job table), not from ``shares()``."""
    (_, rows), (_, cols) = plan.index_axes()
    if plan.op == "fast_batch_norm_backward":
        return {(j.core, j.phase, (j.channel_start, j.channel_start + j.channel_count),
                 (j.block_start, j.block_start + j.block_count)) for j in plan.jobs()}
    out = set()
    for core, (start, count) in enumerate(plan.core_split.ranges()):
        if not count:
            continue
        if rows == 1 or plan.strategy.value in ("split_r", "atomic") and plan.op != "group_norm_backward":
            out.add((core, 0, (0, rows), (start, start + count)))
        else:
            out.add((core, 0, (start, start + count), (0, cols)))
    return out


@pytest.mark.parametrize("name", PLANS)
def test_the_drawn_shares_are_each_cores_ranges_and_cover_the_space_once(name):
    plan = PLANS[name]()
    root, shares = drawn(plan.to_svg())
    assert {s[:4] for s in shares} == core_ranges(plan)
    assert len(shares) == len(core_ranges(plan))
    (_, rows), (_, cols) = plan.index_axes()
    assert sum((r1 - r0) * (c1 - c0) for _, _, (r0, r1), (c0, c1), _ in shares) == rows * cols
    for a, b in itertools.combinations(shares, 2):  # no cell drawn twice
        assert a[2][1] <= b[2][0] or b[2][1] <= a[2][0] or a[3][1] <= b[3][0] or b[3][1] <= a[3][0], (a[:4], b[:4])
    panel = next(r for r in root.iter(NS + "rect") if r.get("fill") == "#f4f4f4")
    box = [float(panel.get(k)) for k in ("x", "y", "width", "height")]
    for *_, rect in shares:  # inside the panel, in proportion to the ranges
        x, y, w, h = (float(rect.get(k)) for k in ("x", "y", "width", "height"))
        assert box[0] - 0.01 <= x and x + w <= box[0] + box[2] + 0.02
        assert box[1] - 0.01 <= y and y + h <= box[1] + box[3] + 0.02


def test_ub_blocks_workspace_and_tree_are_drawn():
    plan = PLANS["stats split_c"]()
    root, shares = drawn(plan.to_svg())
    lines = [line for line in root.iter(NS + "line") if line.get("class") == "block"]
    assert len(lines) == len(shares) * (plan.block_split.parts - 1)  # each core's channel in UB blocks
    regions = {(r.get("data-name"), int(r.get("data-offset")), int(r.get("data-bytes")))
               for r in root.iter(NS + "rect") if r.get("class") == "region"}
    assert regions == {("system", 0, plan.workspace.system_bytes)}
    atomic = PLANS["stats atomic"]()
    root, _ = drawn(atomic.to_svg(arrival=[2, 0, 1]))
    regions = {r.get("data-name"): int(r.get("data-offset")) for r in root.iter(NS + "rect")
               if r.get("class") == "region"}
    assert regions == {"system": 0, **{r.name: atomic.workspace.system_bytes + r.offset
                                       for r in atomic.workspace.regions}}
    levels = [r for r in root.iter(NS + "rect") if r.get("class") == "level"]
    assert len(levels) == len(atomic.tree.levels) + 1  # and the result
    texts = " ".join(t.text or "" for t in root.iter(NS + "text"))
    assert "arrival e.g. 2, 0, 1" in texts and "NON-DETERMINISTIC" in texts
    assert f"block_dim {atomic.block_dim}" in texts


def test_many_cores_are_labelled_as_runs():
    plan = PLANS["fast_bn cross-core"]()
    texts = [t.text for t in ET.fromstring(plan.to_svg()).iter(NS + "text")]
    whole = sum(1 for j in plan.jobs() if j.phase == 0)
    assert f"whole channels: {whole} shares on {whole} cores, sizes 5 x 32 ({whole})" in texts
