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
    """(start, stop) of every UB block of every core of an elementwise plan, in core order (a ``channels`` plan: each
    core's planes in its walk's order)."""
    if plan.strategy.value == "channels":
        for first, count in plan.core_split.ranges():
            for n in range(plan.shape[0]):
                for c in range(first, first + count):
                    yield (n * plan.c + c) * plan.hxw, (n * plan.c + c + 1) * plan.hxw
        return
    for core, (start, _) in enumerate(plan.core_split.ranges()):
        split = plan.block_split if core < plan.core_split.parts - 1 else plan.tail_block_split
        for offset, length in split.ranges():
            yield start + offset, start + offset + length


def stream_sums(streams: np.ndarray, chunk_elems: int, mean: np.ndarray | None) -> np.ndarray:
    """Per-channel sums of ``streams`` (C, R) in ``streams.channel_stats``' order (of ``(v - mean)^2``, each rounded,
    when ``mean`` is given): 64 lanes a chunk of ``chunk_elems``, folded pairwise, chunk sums in order."""
    total = np.zeros(streams.shape[0], F32)
    for start in range(0, streams.shape[1], chunk_elems):
        values = streams[:, start:start + chunk_elems]
        if mean is not None:
            values = values - mean[:, None]
            values = values * values
        lanes = np.zeros((streams.shape[0], LANES), F32)
        lanes_add(lanes, values)
        total = total + pairwise64(lanes)
    return total


def stream_stats(x3: np.ndarray, chunk_elems: int, eps) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mean, S2, invstd)`` per channel of a float32 (N, C, HxW) array (``streams.channel_stats``)."""
    streams = x3.transpose(1, 0, 2).reshape(x3.shape[1], -1)
    count = F32(streams.shape[1])
    mean = stream_sums(streams, chunk_elems, None) / count
    sqdev = stream_sums(streams, chunk_elems, mean)
    return mean, sqdev, F32(1.0) / np.sqrt(sqdev / count + F32(eps))


def planes_sums(args, dy: np.ndarray, x: np.ndarray, mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(sum dy, sum dy * (x - mean))`` per channel of float32 (N, C, HxW) arrays in ``planes.channel_sums``'
    order (``args`` a PlanesArgs): each segment's planes added position by position in plane order, the row summed
    by 64 lanes and folded, the segments' sums added in order; every channel side by side."""
    sums = [np.zeros(args.c, F32), np.zeros(args.c, F32)]
    for seg in range(args.segs_per_plane):
        cut = slice(seg * args.row_elems, min((seg + 1) * args.row_elems, args.hxw))
        rows = [np.zeros((args.c, cut.stop - cut.start), F32), np.zeros((args.c, cut.stop - cut.start), F32)]
        for plane in range(args.n):
            d = dy[plane, :, cut]
            rows[0] = rows[0] + d
            rows[1] = rows[1] + d * (x[plane, :, cut] - mean[:, None])
        for total, row in zip(sums, rows, strict=True):
            lanes = np.zeros((args.c, LANES), F32)
            lanes_add(lanes, row)
            total += pairwise64(lanes)
    return sums[0], sums[1]
