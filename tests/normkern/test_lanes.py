"""The lanes level: its exact order, and that LLVM vectorizes it without fast-math."""

import re

import numpy as np
from numba import njit

from normkern._lanes import accumulate, accumulate_sqdev, fold


@njit
def _sum(row):
    lanes = np.zeros(64, np.float32)
    accumulate(lanes, row)
    before = lanes.copy()
    return fold(lanes), before


@njit
def _sqdev(row, mean):
    lanes = np.zeros(64, np.float32)
    accumulate_sqdev(lanes, row, mean)
    return lanes


def _by_hand(row):
    lanes = np.zeros(64, np.float32)
    for i, value in enumerate(row):
        lanes[i % 64] = np.float32(lanes[i % 64] + value)
    before = lanes.copy()
    width = 32
    while width:
        for j in range(width):
            lanes[j] = np.float32(lanes[j] + lanes[j + width])
        width //= 2
    return lanes[0], before


def test_lane_order_matches_a_scalar_walk():
    rng = np.random.default_rng(4)
    for n in (0, 1, 63, 64, 65, 255, 256, 257, 1000):
        row = rng.standard_normal(n).astype(np.float32) * 1e3
        total, lanes = _sum(row)
        hand_total, hand_lanes = _by_hand(row)
        assert np.array_equal(lanes, hand_lanes) and total == hand_total, n
        deviations = (row - np.float32(0.5)) * (row - np.float32(0.5))
        assert np.array_equal(_sqdev(row, np.float32(0.5)), _by_hand(deviations.astype(np.float32))[1])


def test_lane_loops_compile_to_packed_adds():
    """A change that reintroduces a serial chain drops a kernel to a fraction of the bandwidth."""
    row = np.ones(1000, np.float32)
    _sum(row)
    _sqdev(row, np.float32(1.0))
    for fn in (_sum, _sqdev):
        asm = fn.inspect_asm(fn.signatures[0])
        assert re.search(r"\bv?addps\s+[^\n]*%[xyz]mm", asm), f"{fn.__name__}: no packed float32 add"
