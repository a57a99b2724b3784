"""The lanes level of every reduction tree, in compiled code.

Lane ``j`` of a 64-lane float32 accumulator adds a row's elements ``j, j+64, j+128, ...`` in
ascending order (a row always starts at lane 0; a partial last chunk feeds lanes ``< t``). The
body takes four 64-element vectors per step and updates each lane once per step: LLVM then emits
four independent vector add chains and reassociates nothing (no fast-math anywhere). ``fold``
adds lane ``j+w`` onto lane ``j`` for w = 32, 16, 8, 4, 2, 1.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

from tiling.reduction import LANES

from .dtypes import to_f32
from .views import _CHECKED, row_view

STEP = 4 * LANES
F32_ZERO = np.float32(0.0)


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
    if pos < n:  # the partial last chunk in one vector step (a scalar loop a lane cost more than a short row)
        _check_width(lanes, LANES)
        _add_tail(lanes, row, pos, F32_ZERO)


@njit(cache=True, error_model="numpy")
def lane_add(lanes, row):
    """``accumulate(lanes, row)``, not inlined: the kernels that call it (``lane_sum`` and the rows that add onto
    lanes another row left) share one compiled copy of the lane loop (a float32 row), which is most of a kernel's
    compile time."""
    accumulate(lanes, row)


@njit(cache=True, inline="always", error_model="numpy")
def lane_sum(lanes, row):
    """``row``'s sum in the lanes order: ``lanes`` zeroed, ``lane_add``, ``fold``."""
    lanes[:] = 0.0
    lane_add(lanes, row)
    return fold(lanes)


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
    if pos < n:
        _check_width(lanes, LANES)
        _add_tail_sqdev(lanes, row, pos, mean)


@njit(cache=True, error_model="numpy")
def lane_add_sqdev(lanes, row, mean):
    """``accumulate_sqdev(lanes, row, mean)``, not inlined (as ``lane_add``)."""
    accumulate_sqdev(lanes, row, mean)


@njit(cache=True, inline="always", error_model="numpy")
def lane_sum_sqdev(lanes, row, mean):
    """``sum (row - mean)^2`` in the lanes order, each square rounded: what ``lane_sum`` gives of the rounded
    squares, with no buffer of them written and read back."""
    lanes[:] = 0.0
    lane_add_sqdev(lanes, row, mean)
    return fold(lanes)


def _halving_sum_intrinsic(width: int, mode: str):
    """An intrinsic summing ``buf[0:width]`` (float32, C-contiguous) by halves in vector registers: the
    upper half added onto the lower half, lane by lane, down to one lane. Its second argument, if any:

    - ``mode="first"``, ``count``: lanes ``>= count`` are +0 before the first step (loaded, not used);
    - ``mode="tail"``, ``extra``: ``buf[width:width + extra]`` is first added onto ``buf[0:extra]``
      (the fold-halves tail step; ``buf[width:2 * width]`` is loaded, the lanes past ``extra`` of it
      are not used, so the buffer must hold ``2 * width`` elements).

    The same IEEE additions as the loops ``buf[j] += buf[j + w/2]`` over memory, in the same order, so
    the same bits; but the loops stored each level and loaded it back at once, and a narrower load
    of a wider store waits for the store to complete (64 lanes: 17 -> 9 ns)."""
    i32 = ir.IntType(32)
    lanes_type = ir.VectorType(ir.FloatType(), width)

    def reduce(builder, vector):
        return _halve_to_one(builder, vector, width)

    def load(builder, buf, offset):
        pointer = builder.gep(buf.data, [ir.Constant(ir.IntType(64), offset)])
        return builder.load(builder.bitcast(pointer, lanes_type.as_pointer()), align=4)

    def lanes_below(context, builder, value, value_type):
        """The mask of lanes ``j < value``."""
        n = context.cast(builder, value, value_type, types.int32)
        first = builder.insert_element(ir.Constant(ir.VectorType(i32, width), ir.Undefined), n, ir.Constant(i32, 0))
        n_all = builder.shuffle_vector(first, first, ir.Constant(ir.VectorType(i32, width), [0] * width))
        return builder.icmp_signed("<", ir.Constant(ir.VectorType(i32, width), list(range(width))), n_all)

    def is_buffer(buf):
        return isinstance(buf, types.Array) and buf.dtype == types.float32 and buf.ndim == 1 and buf.layout == "C"

    if mode == "plain":
        @intrinsic
        def halving_sum(typingctx, buf):
            if not is_buffer(buf):
                return None

            def codegen(context, builder, signature, args):
                return reduce(builder, load(builder, make_array(signature.args[0])(context, builder, args[0]), 0))

            return types.float32(buf), codegen
    else:
        @intrinsic
        def halving_sum(typingctx, buf, count):
            if not is_buffer(buf) or not isinstance(count, types.Integer):
                return None

            def codegen(context, builder, signature, args):
                array = make_array(signature.args[0])(context, builder, args[0])
                vector = load(builder, array, 0)
                keep = lanes_below(context, builder, args[1], signature.args[1])
                if mode == "first":
                    vector = builder.select(keep, vector, ir.Constant(lanes_type, [0.0] * width))
                else:
                    vector = builder.select(keep, builder.fadd(vector, load(builder, array, width)), vector)
                return reduce(builder, vector)

            return types.float32(buf, count), codegen

    return halving_sum


_sum64 = _halving_sum_intrinsic(64, "plain")
_sum64_first = _halving_sum_intrinsic(64, "first")
_sum128 = _halving_sum_intrinsic(128, "plain")
_sum256 = _halving_sum_intrinsic(256, "plain")
_sum512 = _halving_sum_intrinsic(512, "plain")
_sum64_tail = _halving_sum_intrinsic(64, "tail")
_sum128_tail = _halving_sum_intrinsic(128, "tail")
_I1, _I16, _I32 = ir.IntType(1), ir.IntType(16), ir.IntType(32)
#: The widest row the short-row intrinsics take: 256 float32 lanes are 16 AVX-512 registers.
SHORT_ROW_MAX = 256


def _f32x(width):
    return ir.VectorType(ir.FloatType(), width)


def _is_short_row(row) -> bool:
    """A row the short-row intrinsics take: 1-D C-contiguous float32, or a half dtype's uint16 / int16 view."""
    return isinstance(row, types.Array) and row.ndim == 1 and row.layout == "C" and row.dtype in (
        types.float32, types.uint16, types.int16)


def _lanes_below(builder, n, offset, width):
    """The mask of lanes ``j`` with ``offset + j < n`` (``n`` an i32)."""
    first = builder.insert_element(ir.Constant(ir.VectorType(_I32, width), None), n, ir.Constant(_I32, 0))
    n_all = builder.shuffle_vector(first, first, ir.Constant(ir.VectorType(_I32, width), [0] * width))
    return builder.icmp_signed("<", ir.Constant(ir.VectorType(_I32, width), list(range(offset, offset + width))),
                               n_all)


def _length(context, builder, array_type, value):
    return builder.trunc(make_array(array_type)(context, builder, value).nitems, _I32)


def _masked(builder, what: str, array_type, width):
    """``llvm.masked.load`` / ``llvm.masked.store`` of ``width`` elements of ``array_type``'s dtype."""
    element = ir.FloatType() if array_type.dtype == types.float32 else _I16
    vector = ir.VectorType(element, width)
    suffix = f"v{width}{'f32' if element is not _I16 else 'i16'}"
    mask = ir.VectorType(_I1, width)
    signature = ir.FunctionType(vector, [vector.as_pointer(), _I32, mask, vector]) if what == "load" else \
        ir.FunctionType(ir.VoidType(), [vector, vector.as_pointer(), _I32, mask])
    function = cgutils.get_or_insert_function(builder.module, signature, f"llvm.masked.{what}.{suffix}.p0{suffix}")
    return function, vector, ir.Constant(_I32, 4 if element is not _I16 else 2)


def _element_pointer(context, builder, array_type, value, offset, vector):
    """A ``vector`` pointer to element ``offset`` (a Python int, or an i64 value) of the array."""
    data = make_array(array_type)(context, builder, value).data
    if isinstance(offset, int):
        offset = ir.Constant(ir.IntType(64), offset)
    return builder.bitcast(builder.gep(data, [offset]), vector.as_pointer())


def _load_row(context, builder, array_type, value, mask, offset, width):
    """Lanes ``offset .. offset + width`` of the row widened to float32 where ``mask`` holds (+0 elsewhere,
    not read)."""
    function, vector, align = _masked(builder, "load", array_type, width)
    pointer = _element_pointer(context, builder, array_type, value, offset, vector)
    return _widen(builder, array_type, builder.call(function, [pointer, align, mask, ir.Constant(vector, None)]),
                  width)


def _widen(builder, array_type, loaded, width):
    """A vector of ``array_type``'s elements as float32, exactly."""
    if array_type.dtype == types.float32:
        return loaded
    if array_type.dtype == types.uint16:  # float16 bits
        return builder.fpext(builder.bitcast(loaded, ir.VectorType(ir.HalfType(), width)), _f32x(width))
    wide = builder.zext(loaded, ir.VectorType(_I32, width))  # bfloat16 bits: the upper half of a float32
    return builder.bitcast(builder.shl(wide, ir.Constant(ir.VectorType(_I32, width), [16] * width)), _f32x(width))


def _store_row(context, builder, array_type, value, mask, offset, width, result):
    """Lanes of the float32 vector ``result`` where ``mask`` holds stored at ``offset`` on in the row, rounded to
    its dtype to nearest-even as ``dtypes.from_f32`` rounds one element (bfloat16: NaN quieted, sign kept)."""
    function, vector, align = _masked(builder, "store", array_type, width)
    if array_type.dtype == types.uint16:
        result = builder.bitcast(builder.fptrunc(result, ir.VectorType(ir.HalfType(), width)), vector)
    elif array_type.dtype == types.int16:
        i32x = ir.VectorType(_I32, width)

        def const(v):
            return ir.Constant(i32x, [v] * width)

        bits = builder.bitcast(result, i32x)
        is_nan = builder.icmp_unsigned(">", builder.and_(bits, const(0x7FFFFFFF)), const(0x7F800000))
        odd = builder.and_(builder.lshr(bits, const(16)), const(1))
        rounded = builder.lshr(builder.add(builder.add(bits, const(0x7FFF)), odd), const(16))
        quiet = builder.or_(builder.and_(builder.lshr(bits, const(16)), const(0x8000)), const(0x7FC0))
        result = builder.trunc(builder.select(is_nan, quiet, rounded), vector)
    builder.call(function, [result, _element_pointer(context, builder, array_type, value, offset, vector), align, mask])


def _splat(builder, value, width):
    one = builder.insert_element(ir.Constant(_f32x(width), None), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, one, ir.Constant(ir.VectorType(_I32, width), [0] * width))


def _halve_to_one(builder, vector, width):
    """Lane ``j + w`` added onto lane ``j`` for w = width/2, ..., 1 (``lo + hi``): the halvings of fold-halves."""
    w = width
    while w > 1:
        h = w // 2
        lo = builder.shuffle_vector(vector, vector, ir.Constant(ir.VectorType(_I32, h), list(range(h))))
        hi = builder.shuffle_vector(vector, vector, ir.Constant(ir.VectorType(_I32, h), list(range(h, w))))
        vector = builder.fadd(lo, hi)
        w = h
    return builder.extract_element(vector, ir.Constant(_I32, 0))


def _is_lanes(lanes) -> bool:
    """A 64-lane float32 accumulator: 1-D C-contiguous float32."""
    return isinstance(lanes, types.Array) and lanes.dtype == types.float32 and lanes.ndim == 1 and lanes.layout == "C"


def _tail(context, builder, row_type, row, start_type, start):
    """(start as i64, the mask of lanes ``j < n - start``) of a row's partial last chunk."""
    start = context.cast(builder, start, start_type, types.int64)
    count = builder.trunc(builder.sub(make_array(row_type)(context, builder, row).nitems, start), _I32)
    return start, _lanes_below(builder, count, 0, LANES)


def _add_where(context, builder, lanes_type, lanes, mask, addend):
    """``lanes[j] += addend[j]`` where ``mask`` holds, the other lanes kept (a select, not an add of 0)."""
    pointer = builder.bitcast(make_array(lanes_type)(context, builder, lanes).data, _f32x(LANES).as_pointer())
    current = builder.load(pointer, align=4)
    builder.store(builder.select(mask, builder.fadd(current, addend), current), pointer, align=4)


def _lanes_tail_intrinsic(squared: bool):
    """An intrinsic adding the partial last chunk of a row onto the first lanes of a 64-lane accumulator in one
    vector step: lane ``j < n - start`` += ``row[start + j]`` (``squared``: ``(row[start + j] - mean)**2``, the
    square rounded before the add), the other lanes kept as they are (a select, not an add of 0); the same
    IEEE operation per lane as the scalar loop it replaces, so the same bits. The row's elements past ``n``
    are not read (a masked load)."""

    def typer(lanes, row, start, mean):
        return _is_lanes(lanes) and _is_short_row(row) and isinstance(start, types.Integer) and mean == types.float32

    @intrinsic
    def add_tail(typingctx, lanes, row, start, mean):
        if not typer(lanes, row, start, mean):
            return None

        def codegen(context, builder, signature, args):
            lanes_type, row_type = signature.args[0], signature.args[1]
            start, mask = _tail(context, builder, row_type, args[1], signature.args[2], args[2])
            loaded = _load_row(context, builder, row_type, args[1], mask, start, LANES)
            if squared:
                deviation = builder.fsub(loaded, _splat(builder, args[3], LANES))
                loaded = builder.fmul(deviation, deviation)
            _add_where(context, builder, lanes_type, args[0], mask, loaded)
            return context.get_dummy_value()

        return types.none(lanes, row, start, mean), codegen

    return add_tail


_add_tail = _lanes_tail_intrinsic(False)
_add_tail_sqdev = _lanes_tail_intrinsic(True)


@intrinsic
def add_tail_pair(typingctx, sums, products, dy_row, x_row, start, shift):
    """The partial last chunk of a row onto two 64-lane accumulators in one vector step: lane ``j < n - start``
    of ``sums`` += ``dy[start + j]`` and of ``products`` += ``dy[start + j] * (x[start + j] - shift)`` (the
    difference and the product each rounded), the other lanes kept (a select, not an add of 0): the same IEEE
    operations per lane as the scalar loop it replaces. The rows' elements past ``n`` are not read."""
    if not (_is_lanes(sums) and _is_lanes(products) and _is_short_row(dy_row) and x_row == dy_row
            and isinstance(start, types.Integer) and shift == types.float32):
        return None

    def codegen(context, builder, signature, args):
        row_type = signature.args[2]
        start, mask = _tail(context, builder, row_type, args[2], signature.args[4], args[4])
        dy = _load_row(context, builder, row_type, args[2], mask, start, LANES)
        x = _load_row(context, builder, row_type, args[3], mask, start, LANES)
        product = builder.fmul(dy, builder.fsub(x, _splat(builder, args[5], LANES)))
        _add_where(context, builder, signature.args[0], args[0], mask, dy)
        _add_where(context, builder, signature.args[1], args[1], mask, product)
        return context.get_dummy_value()

    return types.none(sums, products, dy_row, x_row, start, shift), codegen


def _short_row_sums_intrinsic(width: int):
    """An intrinsic ``(ReduceSum(dy), ReduceSum((x * r + neg_mr) * dy))`` of a row in the fold-halves order of
    ``fold_halves(buf, n, n)`` on a buffer the row was copied to, for rows of ``width // 2 < n <= width``
    (``width`` 64: any ``n <= 64``): the row's lanes read straight into vector registers, the tail step (lanes
    ``h + j`` added onto lanes ``j < n - h``, ``h = width // 2``) and the halvings there, the same IEEE
    operations in the same order, so the same bits, with no buffer stored and loaded back (a short row's
    stores cost as much as its arithmetic). Lanes past the row are not read (masked loads); a row outside
    the width's range would be folded in another tree, which its callers rule out (``short_row_width``)."""
    half = width // 2

    @intrinsic
    def short_row_sums(typingctx, dy_row, x_row, r, neg_mr):
        if not (_is_short_row(dy_row) and x_row == dy_row and r == types.float32 and neg_mr == types.float32):
            return None

        def codegen(context, builder, signature, args):
            row_type = signature.args[0]
            n = _length(context, builder, row_type, args[0])

            def lanes(offset, count):
                mask = _lanes_below(builder, n, offset, count)
                dy = _load_row(context, builder, row_type, args[0], mask, offset, count)
                x = _load_row(context, builder, row_type, args[1], mask, offset, count)
                x_hat = builder.fadd(builder.fmul(x, _splat(builder, args[2], count)), _splat(builder, args[3], count))
                products = builder.select(mask, builder.fmul(x_hat, dy), ir.Constant(_f32x(count), [0.0] * count))
                return mask, dy, products

            if width == LANES:
                _, dy, products = lanes(0, LANES)
                sums = [_halve_to_one(builder, dy, LANES), _halve_to_one(builder, products, LANES)]
            else:
                _, dy, products = lanes(0, half)
                tail, dy_tail, products_tail = lanes(half, half)
                sums = [_halve_to_one(builder, builder.select(tail, builder.fadd(low, high), low), half)
                        for low, high in ((dy, dy_tail), (products, products_tail))]
            return context.make_tuple(builder, signature.return_type, sums)

        return types.UniTuple(types.float32, 2)(dy_row, x_row, r, neg_mr), codegen

    return short_row_sums


def _short_row_dx_intrinsic(form: str):
    """An intrinsic writing a row of at most ``SHORT_ROW_MAX`` elements of dx from dy and x, every lane in
    float32 in the order of the scalar loop it replaces, rounded to dx's dtype as ``from_f32``:

    - ``"x_hat"``: ``dy * p - ((x * r + neg_mr) * a + b)``
    - ``"x"``: ``dy * p - (x * a + b)`` (``r`` and ``neg_mr`` unused)

    (GroupNormBackward's mode-0 dx of an aligned and an unaligned channel), in vectors of 64 lanes. Lanes past
    the row's length are neither read nor written."""

    @intrinsic
    def short_row_dx(typingctx, dy_row, x_row, dx_row, p, a, b, r, neg_mr):
        if not (_is_short_row(dy_row) and x_row == dy_row and _is_short_row(dx_row)
                and all(v == types.float32 for v in (p, a, b, r, neg_mr))):
            return None

        def codegen(context, builder, signature, args):
            row_type = signature.args[0]
            n = _length(context, builder, row_type, args[0])
            sp, sa, sb, sr, sneg = (_splat(builder, v, LANES) for v in args[3:8])
            def block(offset):
                mask = _lanes_below(builder, n, offset, LANES)
                dy = _load_row(context, builder, row_type, args[0], mask, offset, LANES)
                x = _load_row(context, builder, row_type, args[1], mask, offset, LANES)
                if form == "x_hat":
                    x = builder.fadd(builder.fmul(x, sr), sneg)
                out = builder.fsub(builder.fmul(dy, sp), builder.fadd(builder.fmul(x, sa), sb))
                _store_row(context, builder, signature.args[2], args[2], mask, offset, LANES, out)

            block(0)
            for offset in range(LANES, SHORT_ROW_MAX, LANES):  # the blocks the row reaches
                with cgutils.if_likely(builder, builder.icmp_signed(">", n, ir.Constant(_I32, offset))):
                    block(offset)
            return context.get_dummy_value()

        return types.none(dy_row, x_row, dx_row, p, a, b, r, neg_mr), codegen

    return short_row_dx


short_row_sums = _short_row_sums_intrinsic(LANES)
short_row_sums_128 = _short_row_sums_intrinsic(2 * LANES)
short_row_sums_256 = _short_row_sums_intrinsic(4 * LANES)
short_row_dx_x_hat = _short_row_dx_intrinsic("x_hat")
short_row_dx_x = _short_row_dx_intrinsic("x")


def short_row_width(n: int) -> int:
    """The width of the short-row intrinsics for rows of ``n`` elements (0: too long for them)."""
    if n <= LANES:
        return LANES
    return 2 * LANES if n <= 2 * LANES else SHORT_ROW_MAX if n <= SHORT_ROW_MAX else 0


#: The widest halving summed in registers; wider buffers are first halved in memory, three levels a pass.
REGISTER_WIDTH = 512
#: The widest halving whose fold-halves tail step also runs in registers. Wider, the two halves
#: no longer fit the 32 vector registers, and the memory tail step is faster.
TAIL_REGISTER_WIDTH = 128


@njit(cache=True, inline="always", error_model="numpy")
def _first_half(length):
    """The ``h`` of a fold-halves ReduceSum of ``length``: the largest ``64 * 2**k`` below it (64 at least)."""
    half = LANES
    while half * 2 < length:
        half *= 2
    return half


@njit(cache=True, inline="always", error_model="numpy")
def fold_capacity(length):
    """Elements a ``fold_halves`` buffer of ``length`` should hold: ``2 * h`` for the ``h`` of that
    length (at least 64), so the tail step's registers can load a whole upper half."""
    return 2 * _first_half(length) if length > LANES else LANES


@njit(cache=True, inline="always", error_model="numpy")
def _check_width(buf, width):
    if _CHECKED and buf.shape[0] < width:
        raise IndexError("a fold reads past the end of its buffer")


@njit(cache=True, inline="always", error_model="numpy")
def fold(lanes):
    """Pairwise fold of the 64 lanes: lane ``j + w`` added onto lane ``j`` for w = 32, 16, 8, 4, 2, 1;
    returns the block sum. Summed in registers (``_halving_sum_intrinsic``); ``lanes`` is not written."""
    _check_width(lanes, LANES)
    return _sum64(lanes)


@njit(cache=True, inline="always", error_model="numpy")
def fold_halves(buf, length, used):
    """ReduceSum of ``buf[0:length]`` in the A2 fold-halves order (``_fold_halves``): a buffer of at most 64
    elements, a short row's, is folded in registers here, inlined; longer ones out of line, where the
    levels' code is compiled once. A bounds-checked build folds every buffer out of line, where its width is
    checked."""
    if length <= LANES and not _CHECKED:
        if used >= LANES:
            return _sum64(buf)
        return _sum64_first(buf, used)
    return _fold_halves(buf, length, used)


@njit(cache=True, inline="always", error_model="numpy")
def fold_short(buf, used):
    """``fold_halves(buf, used, used)`` of a buffer of at most 64 used elements (``buf`` holds 64 at least),
    in registers, inlined: for the kernels whose every fold is of a short row, which then compile no
    out-of-line fold."""
    _check_width(buf, LANES)
    if used >= LANES:
        return _sum64(buf)
    return _sum64_first(buf, used)


@njit(cache=True, error_model="numpy")
def _fold_halves(buf, length, used):
    """ReduceSum of ``buf[0:length]`` in the A2 fold-halves order; returns the sum, destroys ``buf``.

    With ``h`` the largest ``64 * 2**k`` below ``length``: the tail ``buf[h:length]`` is added onto
    ``buf[0:length-h]``, then the upper half onto the lower half down to 64 elements, then the 64
    lanes fold pairwise (``fold``). Only ``buf[0:used]`` is read: the rest must be +0, which adds
    nothing (an accumulator that starts at +0 never holds -0, so skipping it changes no bit).
    ``buf`` must hold at least ``max(used, 64)`` elements; one of ``fold_capacity(length)`` lets the
    tail step of lengths up to 256 run in registers as well.

    Levels above ``REGISTER_WIDTH`` run three at a time over memory (one pass instead of three); the
    last ones, and the 64-lane fold, in registers. Paired with the level-by-level loops: the same bits.
    """
    _check_width(buf, max(used, LANES))
    half = _first_half(length)
    if length > LANES:
        while half >= LANES and used <= half:  # nothing beyond ``half`` to add at this level
            half //= 2
    if length <= LANES or half < LANES:
        if used >= LANES:
            return _sum64(buf)
        return _sum64_first(buf, used)
    extra = used - half
    if half <= TAIL_REGISTER_WIDTH and buf.shape[0] >= 2 * half:  # the tail step in registers too
        if half == LANES:
            return _sum64_tail(buf, extra)
        return _sum128_tail(buf, extra)
    lo = buf[0:extra]
    hi = buf[half:used]
    for i in range(extra):
        lo[i] += hi[i]
    while half > REGISTER_WIDTH:
        q = half // 8
        for i in range(q):
            buf[i] = (((buf[i] + buf[i + 4 * q]) + (buf[i + 2 * q] + buf[i + 6 * q]))
                      + ((buf[i + q] + buf[i + 5 * q]) + (buf[i + 3 * q] + buf[i + 7 * q])))
        half = q
    if half == LANES:
        return _sum64(buf)
    if half == 2 * LANES:
        return _sum128(buf)
    if half == 4 * LANES:
        return _sum256(buf)
    return _sum512(buf)


#: Bytes per cache line: the prefetch step (and what ``_streaming.stream_line`` writes).
LINE_BYTES = 64
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
    plane at a stride of C*HxW, each start cold, and there the hint pays."""
    for i in range(0, row.shape[0], LINE_BYTES // row.itemsize):
        _prefetch_read(row, i)


@njit(cache=True, error_model="numpy")
def accumulate_prefetching(lanes, row, following):
    """``accumulate(lanes, row)`` while asking for ``following`` (the row read next) into L2.

    The row is summed in 4 KiB pieces (a multiple of 64 elements, so each lane still adds its
    elements in ascending order: same bits as ``accumulate``), each after the prefetches of the
    same piece of ``following``. A plane row of 56x56 float32 is 12.5 KiB at a stride of C*HxW;
    the hardware prefetcher restarts on each, and this keeps the next one on its way. Not inlined: a
    second inlined copy of the lane loop in the caller would cost compile time for little."""
    n = row.shape[0]
    piece = _PIECE_BYTES // row.itemsize
    for start in range(0, n, piece):
        stop = min(start + piece, n)
        prefetch_l2_piece(following, start, stop)
        accumulate(lanes, row[start:stop])


@njit(cache=True, inline="always", error_model="numpy")
def prefetch_l2_piece(row, start, stop):
    """Ask for the cache lines of ``row[start:stop]`` (clipped to the row) into L2."""
    for i in range(start, min(stop, row.shape[0]), LINE_BYTES // row.itemsize):
        _prefetch_l2(row, i)


@njit(cache=True, inline="always", error_model="numpy")
def accumulate_products(lanes, k, dy, x, shift):
    """lanes[k, 0, j] += dy[i] and lanes[k, 1, j] += dy[i] * (x[i] - shift) for i = j + 64 v, v ascending (each
    product rounded before its add): the two sums of a row in one pass (BatchNormReduceBackward's rows,
    GroupNormBackward's ``groups`` rows).

    The lanes live in one array of the caller's own, ``lanes[k, 0 or 1, j]`` (``k`` a channel slot), indexed
    directly, and the row is added 64 elements at a time in one loop of constant trip count: LLVM then vectorizes
    it. (Lanes in views of a caller's array, or the four-chunk register loop of ``accumulate`` beside it, left
    the sums at half the speed or less.)"""
    n = dy.shape[0]
    pos = 0
    while pos + LANES <= n:  # whole 64-element chunks: a constant trip count, which LLVM vectorizes
        for j in range(LANES):
            g = to_f32(dy[pos + j])
            lanes[k, 0, j] += g
            lanes[k, 1, j] += g * (to_f32(x[pos + j]) - shift)
        pos += LANES
    if pos < n:  # the partial last chunk in one masked vector step (a short plane is all tail)
        add_tail_pair(row_view(lanes, 2 * k * LANES, LANES), row_view(lanes, (2 * k + 1) * LANES, LANES), dy, x, pos,
                      shift)


def _pair_lane_sums_intrinsic(width: int):
    """An intrinsic ``(sum dy, sum dy * (x - shift))`` of a row of at most ``width`` elements (64, 128 or 256) in the
    order of ``accumulate_products`` on zeroed lanes, then ``fold``: lane ``j`` is ``0 + v[j] + v[j+64] + ...``
    (each 64-element block of the row added in order; the lanes past the row add +0, which changes no lane: no lane
    is -0 after its first add onto +0) and the 64 lanes fold pairwise 32+32 .. 1+1; each difference and product
    rounded, the same IEEE operations, so the same bits. The row is read straight into vector registers (masked
    loads: nothing past it is read), with no lanes stored and read back (a short row's stores cost as much as its
    arithmetic)."""

    @intrinsic
    def pair_lane_sums(typingctx, dy_row, x_row, shift):
        if not (_is_short_row(dy_row) and x_row == dy_row and shift == types.float32):
            return None

        def codegen(context, builder, signature, args):
            row_type = signature.args[0]
            n = _length(context, builder, row_type, args[0])
            zero = ir.Constant(_f32x(LANES), [0.0] * LANES)
            sums, products = zero, zero
            for offset in range(0, width, LANES):
                mask = _lanes_below(builder, n, offset, LANES)
                dy = _load_row(context, builder, row_type, args[0], mask, offset, LANES)
                x = _load_row(context, builder, row_type, args[1], mask, offset, LANES)
                product = builder.fmul(dy, builder.fsub(x, _splat(builder, args[2], LANES)))
                sums = builder.fadd(sums, dy)
                products = builder.fadd(products, builder.select(mask, product, zero))
            result = [_halve_to_one(builder, sums, LANES), _halve_to_one(builder, products, LANES)]
            return context.make_tuple(builder, signature.return_type, result)

        return types.UniTuple(types.float32, 2)(dy_row, x_row, shift), codegen

    return pair_lane_sums


pair_lane_sums_64 = _pair_lane_sums_intrinsic(LANES)
pair_lane_sums_128 = _pair_lane_sums_intrinsic(2 * LANES)
pair_lane_sums_256 = _pair_lane_sums_intrinsic(4 * LANES)
