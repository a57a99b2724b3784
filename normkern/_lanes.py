"""The lanes level of every reduction tree, in compiled code.

Lane ``j`` of a 64-lane float32 accumulator adds a row's elements ``j, j+64, j+128, ...`` in
ascending order (a row always starts at lane 0; a partial last chunk feeds lanes ``< t``). The
body takes four 64-element vectors per step and updates each lane once per step: LLVM then emits
four independent vector add chains and reassociates nothing (no fast-math anywhere). ``fold``
adds lane ``j+w`` onto lane ``j`` for w = 32, 16, 8, 4, 2, 1.
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

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
    """Pairwise fold of the 64 lanes (destroys them); returns the block sum.

    Six loops of constant width, so that each compiles to a few vector adds."""
    for j in range(32):
        lanes[j] += lanes[j + 32]
    for j in range(16):
        lanes[j] += lanes[j + 16]
    for j in range(8):
        lanes[j] += lanes[j + 8]
    for j in range(4):
        lanes[j] += lanes[j + 4]
    lanes[0] += lanes[2]
    lanes[1] += lanes[3]
    lanes[0] += lanes[1]
    return lanes[0]


@njit(cache=True, error_model="numpy")
def fold_halves(buf, length, used):
    """ReduceSum of ``buf[0:length]`` in the A2 fold-halves order; returns the sum, destroys ``buf``.

    With ``h`` the largest ``64 * 2**k`` below ``length``: the tail ``buf[h:length]`` is added onto
    ``buf[0:length-h]``, then the upper half onto the lower half down to 64 elements, then the 64
    lanes fold pairwise (``fold``). Only ``buf[0:used]`` is read: the rest must be +0, which adds
    nothing (an accumulator that starts at +0 never holds -0, so skipping it changes no bit).
    ``buf`` must hold at least 64 elements.
    """
    half = LANES
    while half * 2 < length:
        half *= 2
    if length > LANES:
        while half >= LANES:
            extra = used - half
            if extra > 0:
                lo = buf[0:extra]
                hi = buf[half:half + extra]
                for i in range(extra):
                    lo[i] += hi[i]
                used = half
            half //= 2
    for i in range(used, LANES):
        buf[i] = 0.0
    return fold(buf)


#: Bytes per cache line: the prefetch step.
_LINE_BYTES = 64
#: Bytes of a row summed between two rounds of prefetches of the row after it.
_PIECE_BYTES = 4096


def _prefetch_intrinsic(locality: int, where: str):
    @intrinsic
    def prefetch(typingctx, arr, index):
        if not isinstance(arr, types.Array) or arr.ndim != 1 or not isinstance(index, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            array_type = signature.args[0]
            array = context.make_array(array_type)(context, builder, args[0])
            pointer = cgutils.get_item_pointer(context, builder, array_type, array, [args[1]], wraparound=False)
            byte_pointer = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            function = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]), "llvm.prefetch.p0i8")
            # (address, read, locality, data cache)
            builder.call(function, [builder.bitcast(pointer, byte_pointer), ir.Constant(i32, 0),
                                    ir.Constant(i32, locality), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return types.none(arr, index), codegen

    prefetch.__doc__ = (f"A read prefetch (``llvm.prefetch``, locality {locality}: {where}) of the line "
                        "holding ``arr[index]``. A hint only: it loads nothing into the program, so no result "
                        "can depend on it.")
    return prefetch


_prefetch_read = _prefetch_intrinsic(3, "into every cache level")
_prefetch_l2 = _prefetch_intrinsic(1, "into L2, not L1 (prefetcht2)")


@njit(cache=True, inline="always", error_model="numpy")
def prefetch_row(row):
    """Ask for every cache line of a short row that the loop will read a few rows later.

    The hardware prefetchers follow long rows on their own; rows of a few hundred elements, one per
    plane at a stride of C*HxW, each start cold, and there the hint measured 25-30% faster."""
    for i in range(0, row.shape[0], _LINE_BYTES // row.itemsize):
        _prefetch_read(row, i)


@njit(cache=True, error_model="numpy")
def accumulate_prefetching(lanes, row, following):
    """``accumulate(lanes, row)`` while asking for ``following`` (the row read next) into L2.

    The row is summed in 4 KiB pieces (a multiple of 64 elements, so each lane still adds its
    elements in ascending order: same bits as ``accumulate``), each after the prefetches of the
    same piece of ``following``. A plane row of 56x56 float32 is 12.5 KiB at a stride of C*HxW;
    the hardware prefetcher restarts on each, and this keeps the next one on its way: pass 1 of
    64x128x56x56 measured 1.48 -> 1.23 times a contiguous read of the same bytes. Not inlined: as a
    second inlined copy of the lane loop in the caller it added 1.7 s to the first call's compile,
    out of line 0.9 s."""
    n = row.shape[0]
    piece = _PIECE_BYTES // row.itemsize
    for start in range(0, n, piece):
        stop = min(start + piece, n)
        prefetch_l2_piece(following, start, stop)
        accumulate(lanes, row[start:stop])


@njit(cache=True, inline="always", error_model="numpy")
def prefetch_l2_piece(row, start, stop):
    """Ask for the cache lines of ``row[start:stop]`` (clipped to the row) into L2."""
    for i in range(start, min(stop, row.shape[0]), _LINE_BYTES // row.itemsize):
        _prefetch_l2(row, i)
