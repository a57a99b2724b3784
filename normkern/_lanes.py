"""The lanes level of every reduction tree, in compiled code.

Lane ``j`` of a 64-lane float32 accumulator adds a row's elements ``j, j+64, j+128, ...`` in
ascending order (a row always starts at lane 0; a partial last chunk feeds lanes ``< t``). The
body takes four 64-element vectors per step and updates each lane once per step: LLVM then emits
four independent vector add chains and reassociates nothing (no fast-math anywhere). ``fold``
adds lane ``j+w`` onto lane ``j`` for w = 32, 16, 8, 4, 2, 1.
"""

from __future__ import annotations

from numba import njit

from ._dtypes import to_f32

LANES = 64
STEP = 4 * LANES


@njit(cache=True, inline="always", error_model="numpy")
def accumulate(lanes, row):
    """lanes[j] += row[j + 64 v] for v ascending."""
    n = row.shape[0]
    steps = n // STEP
    for v in range(steps):
        chunk = row[v * STEP:(v + 1) * STEP]
        for j in range(LANES):
            acc = lanes[j]
            acc += to_f32(chunk[j])
            acc += to_f32(chunk[LANES + j])
            acc += to_f32(chunk[2 * LANES + j])
            acc += to_f32(chunk[3 * LANES + j])
            lanes[j] = acc
    pos = steps * STEP
    while pos + LANES <= n:
        chunk = row[pos:pos + LANES]
        for j in range(LANES):
            lanes[j] += to_f32(chunk[j])
        pos += LANES
    tail = row[pos:n]
    for j in range(n - pos):
        lanes[j] += to_f32(tail[j])


@njit(cache=True, inline="always", error_model="numpy")
def accumulate_sqdev(lanes, row, mean):
    """lanes[j] += (row[j + 64 v] - mean)^2 for v ascending (the square rounded before the add)."""
    n = row.shape[0]
    steps = n // STEP
    for v in range(steps):
        chunk = row[v * STEP:(v + 1) * STEP]
        for j in range(LANES):
            acc = lanes[j]
            d0 = to_f32(chunk[j]) - mean
            acc += d0 * d0
            d1 = to_f32(chunk[LANES + j]) - mean
            acc += d1 * d1
            d2 = to_f32(chunk[2 * LANES + j]) - mean
            acc += d2 * d2
            d3 = to_f32(chunk[3 * LANES + j]) - mean
            acc += d3 * d3
            lanes[j] = acc
    pos = steps * STEP
    while pos + LANES <= n:
        chunk = row[pos:pos + LANES]
        for j in range(LANES):
            d = to_f32(chunk[j]) - mean
            lanes[j] += d * d
        pos += LANES
    tail = row[pos:n]
    for j in range(n - pos):
        d = to_f32(tail[j]) - mean
        lanes[j] += d * d


@njit(cache=True, inline="always", error_model="numpy")
def fold(lanes):
    """Pairwise fold of the 64 lanes (destroys them); returns the block sum."""
    width = LANES // 2
    while width >= 1:
        for j in range(width):
            lanes[j] += lanes[j + width]
        width //= 2
    return lanes[0]
