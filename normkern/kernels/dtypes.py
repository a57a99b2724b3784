"""Element types inside compiled code.

Numba has no float16 or bfloat16 arithmetic, so half inputs travel as their 16-bit patterns and
the array type alone selects the widening at compile time: float16 as ``uint16`` (widened by LLVM
``fpext half -> float``, a vcvtph2ps), bfloat16 as ``int16`` (shifted into the high half of a
float32). Both are exact. Outputs narrow the other way, rounding to nearest-even as NumPy and
ml_dtypes do (``from_f32``): float16 by LLVM ``fptrunc float -> half`` (a vcvtps2ph), bfloat16 by
integer rounding of the float32 bits, NaN becoming the canonical quiet NaN as in ml_dtypes. One
kernel specialization per input dtype, nothing more.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

FLOAT16 = np.dtype(np.float16)
FLOAT32 = np.dtype(np.float32)

#: The dtype each input dtype is viewed as when it enters compiled code (bfloat16 joins when first seen).
_KERNEL_VIEW = {FLOAT32: FLOAT32, FLOAT16: np.dtype(np.uint16)}
_NAMES = {FLOAT32: "float32", FLOAT16: "float16"}


def bfloat16() -> np.dtype:
    """ml_dtypes' bfloat16, imported on first use rather than with normkern: recent ml_dtypes take most
    of a second to import, and a caller who holds a bfloat16 array has imported it already."""
    import ml_dtypes

    dtype = np.dtype(ml_dtypes.bfloat16)
    _NAMES[dtype] = "bfloat16"
    _KERNEL_VIEW[dtype] = np.dtype(np.int16)
    return dtype


def dtype_name(dtype) -> str:
    """The dtype's name; a dict look-up for the three compute dtypes (``np.dtype.name`` is slow)."""
    name = _NAMES.get(dtype)
    if name is None:
        name = np.dtype(dtype).name
        if name == "bfloat16":
            bfloat16()  # registered for the look-ups that follow
    return name


def kernel_view(x: np.ndarray) -> np.ndarray:
    """``x`` reinterpreted as the array type its kernels are compiled for."""
    view = _KERNEL_VIEW.get(x.dtype)
    if view is None:
        dtype_name(x.dtype)  # registers bfloat16
        view = _KERNEL_VIEW[x.dtype]
    return x if view is x.dtype else x.view(view)


@intrinsic
def _f16_bits_to_f32(typingctx, bits):
    if bits != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(types.uint16), codegen


@intrinsic
def _bf16_bits_to_f32(typingctx, bits):
    if bits != types.int16:
        return None

    def codegen(context, builder, signature, args):
        wide = builder.shl(builder.zext(args[0], ir.IntType(32)), ir.Constant(ir.IntType(32), 16))
        return builder.bitcast(wide, ir.FloatType())

    return types.float32(types.int16), codegen


@intrinsic
def _f32_to_f16_bits(typingctx, value, like):
    if value != types.float32 or like != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))

    return types.uint16(types.float32, types.uint16), codegen


@intrinsic
def _f32_to_bf16_bits(typingctx, value, like):
    if value != types.float32 or like != types.int16:
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        bits = builder.bitcast(args[0], i32)
        magnitude = builder.and_(bits, ir.Constant(i32, 0x7FFFFFFF))
        is_nan = builder.icmp_unsigned(">", magnitude, ir.Constant(i32, 0x7F800000))
        odd = builder.and_(builder.lshr(bits, ir.Constant(i32, 16)), ir.Constant(i32, 1))
        rounded = builder.lshr(builder.add(builder.add(bits, ir.Constant(i32, 0x7FFF)), odd), ir.Constant(i32, 16))
        quiet = builder.or_(builder.and_(builder.lshr(bits, ir.Constant(i32, 16)), ir.Constant(i32, 0x8000)),
                            ir.Constant(i32, 0x7FC0))
        return builder.trunc(builder.select(is_nan, quiet, rounded), ir.IntType(16))

    return types.int16(types.float32, types.int16), codegen


def from_f32(value, like):
    """Round a float32 to the element type of ``like`` (compiled code only)."""
    raise NotImplementedError("from_f32 is only available inside @njit code")


@overload(from_f32)
def _from_f32_overload(value, like):
    if like == types.float32:
        return lambda value, like: value
    if like == types.uint16:
        return lambda value, like: _f32_to_f16_bits(value, like)
    if like == types.int16:
        return lambda value, like: _f32_to_bf16_bits(value, like)
    return None


def to_f32(value):
    """Widen one element to float32 (compiled code only)."""
    raise NotImplementedError("to_f32 is only available inside @njit code")


@overload(to_f32)
def _to_f32_overload(value):
    if value == types.float32:
        return lambda value: value
    if value == types.uint16:
        return lambda value: _f16_bits_to_f32(value)
    if value == types.int16:
        return lambda value: _bf16_bits_to_f32(value)
    return None
