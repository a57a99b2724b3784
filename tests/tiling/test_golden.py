"""Golden plans: reviewed once against the hand arithmetic in the other tests; a change to any field
shows as ``field: old -> new``. ``NORMKERN_UPDATE_GOLDEN=1 python -m pytest tests/tiling`` rewrites them
after an intended change (review the diff)."""

import json
import os
from pathlib import Path

import pytest

import tiling
from tiling import plan_batch_norm_stats

GOLDEN = Path(__file__).parent / "golden"

GOLDEN_CASES = {
    "a2_f32_32x64x56x56": lambda: plan_batch_norm_stats((32, 64, 56, 56), "float32", "Ascend910B2"),
    "a2_f16_8x2x200x200": lambda: plan_batch_norm_stats((8, 2, 200, 200), "float16", "Ascend910B2"),
    "a950_bf16_256x4x14x14_atomic": lambda: plan_batch_norm_stats((256, 4, 14, 14), "bfloat16", "Ascend950",
                                                                  "atomic"),
    "gather_a950_f32_8x2048": lambda: tiling.plan_batch_norm_gather_stats_with_counts(8, 2048, "float32",
                                                                                      "Ascend950"),
    "gather_a950_f32_300x64": lambda: tiling.plan_batch_norm_gather_stats_with_counts(300, 64, "float32",
                                                                                      "Ascend950"),
    "fastbn_a2_f32_8x64x32x32": lambda: tiling.plan_fast_batch_norm_backward((8, 64, 32, 32), "float32",
                                                                            "Ascend910B2"),
    "fastbn_a2_f32_256x64x7x7": lambda: tiling.plan_fast_batch_norm_backward((256, 64, 7, 7), "float32",
                                                                            "Ascend910B2"),
    "fastbn_a2_f16_32x256x56x56": lambda: tiling.plan_fast_batch_norm_backward((32, 256, 56, 56), "float16",
                                                                              "Ascend910B2"),
    "groupnorm_a2_f32_n12_c64_hw16384_g32": lambda: tiling.plan_group_norm_backward(12, 64, 128 * 128, 32, "float32",
                                                                                    "Ascend910B2"),
    "groupnorm_a2_f16_n2_c320_hw4096_g32": lambda: tiling.plan_group_norm_backward(2, 320, 4096, 32, "float16",
                                                                                   "Ascend910B2"),
    "groupnorm_a2_bf16_n8_c32_hw49_g8": lambda: tiling.plan_group_norm_backward(8, 32, 49, 8, "bfloat16",
                                                                                "Ascend910B2"),
    "groupnorm_a950_f32_n2_c120_hw5120_g4": lambda: tiling.plan_group_norm_backward(2, 120, 64 * 80, 4, "float32",
                                                                                    "Ascend950"),
    "groupnorm_a950_f16_n1_c2130_hw1664x1664_g71": lambda: tiling.plan_group_norm_backward(
        1, 2130, 1664 * 1664, 71, "float16", "Ascend950"),
    "groupnorm_a950_f32_n3800_c8_hw1_g2": lambda: tiling.plan_group_norm_backward(3800, 8, 1, 2, "float32",
                                                                                  "Ascend950"),
    "elemt_a2_f16_32x64x56x56": lambda: tiling.plan_batch_norm_elemt((32, 64, 56, 56), "float16", "Ascend910B2"),
    "bnreduce_a950_f32_32x64x56x56": lambda: tiling.plan_batch_norm_backward_reduce((32, 64, 56, 56), "float32",
                                                                                    "Ascend950"),
    "bnreduce_a2_bf16_256x4x14x14_atomic": lambda: tiling.plan_batch_norm_backward_reduce(
        (256, 4, 14, 14), "bfloat16", "Ascend910B2", "atomic"),
    "elemtbw_a950_f16_f32_8x512x7x7": lambda: tiling.plan_batch_norm_backward_elemt(
        (8, 512, 7, 7), "float16", "Ascend950", stats_dtype="float32", devices=4),
}


def _diff(old, new, path=""):
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            yield from _diff(old.get(key), new.get(key), f"{path}.{key}" if path else key)
    elif old != new:
        yield f"{path}: {old} -> {new}"


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_plans(name):
    """Plans reviewed by hand once; a change to any field shows as ``field: old -> new``."""
    plan = GOLDEN_CASES[name]()
    path = GOLDEN / f"{name}.json"
    if os.environ.get("NORMKERN_UPDATE_GOLDEN"):
        path.write_text(plan.to_json() + "\n")
    golden = json.loads(path.read_text())
    changes = list(_diff(golden, json.loads(plan.to_json())))
    assert not changes, "plan changed:\n" + "\n".join(changes)
