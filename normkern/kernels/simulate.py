"""The plan simulators' shared NumPy float32 walks and reduction orders (each written literally): the twins of
``lanes`` and ``planes``."""

from __future__ import annotations

import numpy as np

from tiling import LANES

F32 = np.float32


def pairwise64(buf: np.ndarray) -> F32 | np.ndarray:
    """The 64-lane pairwise fold (32+32, 16+16, ..., 1+1) of ``buf[..., :64]``, zero-padded when shorter:
    a scalar of a 1-D buffer, one sum per row of a 2-D one."""
    lanes = np.zeros((*buf.shape[:-1], LANES), F32)
    lanes[..., :min(buf.shape[-1], LANES)] = buf[..., :LANES]
    width = LANES // 2
    while width >= 1:
        lanes[..., :width] = lanes[..., :width] + lanes[..., width:2 * width]
        width //= 2
    return lanes[..., 0]


def fold_halves(values: np.ndarray) -> F32:
    """The A2 ReduceSum order on a whole buffer: tail onto the front, halves down to 64, then pairwise."""
    buf = np.asarray(values, F32).copy()
    n = buf.shape[0]
    if n > LANES:
        half = LANES
        while half * 2 < n:
            half *= 2
        buf[:n - half] = buf[:n - half] + buf[half:n]
        while half > LANES:
            half //= 2
            buf[:half] = buf[:half] + buf[half:2 * half]
    return pairwise64(buf[:min(n, LANES)])


def plane_row(plan, r: int) -> tuple[int, int, int]:
    """(plane, start, length) of a channel's row ``r`` (``planes.plane_row``)."""
    n, seg = divmod(r, plan.segs_per_plane)
    length = plan.seg_elems if seg < plan.segs_per_plane - 1 else plan.tail_seg_elems
    return n, seg * plan.seg_elems, length


def lanes_add(lanes: np.ndarray, values: np.ndarray) -> None:
    """lanes[:, j] += values[:, j + 64 v] for v ascending, one add at a time (``lanes.accumulate``, a row of
    channels at once)."""
    full = values.shape[1] // LANES
    if full:
        chunks = values[:, :full * LANES].reshape(values.shape[0], full, LANES)
        stacked = np.concatenate([lanes[:, None, :], chunks], axis=1)
        lanes[:] = np.add.accumulate(stacked, axis=1, dtype=F32)[:, -1]
    tail = values.shape[1] - full * LANES
    lanes[:, :tail] += values[:, full * LANES:]


def ub_blocks(plan):
    """(start, stop) of every UB block of every core of an elementwise plan, in core order."""
    for core, (start, _) in enumerate(plan.core_split.ranges()):
        split = plan.block_split if core < plan.core_split.parts - 1 else plan.tail_block_split
        for offset, length in split.ranges():
            yield start + offset, start + offset + length
