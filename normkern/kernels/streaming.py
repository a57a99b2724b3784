"""Streaming (non-temporal) stores of whole cache lines, for outputs too large to stay in cache.

A plain store first reads its line into the cache (a read for ownership) and later writes it
back, so an output that the caches cannot hold crosses the memory bus twice. A non-temporal store
(``vmovntps`` on x86-64, ``stnp`` on AArch64) writes a whole 64-byte line without reading it. A
kernel computes a piece of its output into a small scratch that stays in L1, then hands each whole
line of it to ``stream_line``; the partial lines at the ends of a row are stored plainly. Streamed
lines are weakly ordered: a thread calls ``store_fence`` once it has written its rows, before the
parallel region ends and another thread or the caller reads them.

These are hints to the memory system: the values written are the scratch's, bit for bit.
"""

from __future__ import annotations

import numpy as np
from llvmlite import binding, ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

from .lanes import LINE_BYTES
from .views import _CHECKED


def worth_streaming(out: np.ndarray, min_bytes: int) -> bool:
    """Whether a kernel should stream ``out`` (a C-contiguous output it writes in place): float32,
    the one dtype whose dx pass the traffic bounds (the conversion bounds the half dtypes'), at least
    ``min_bytes`` (the op's threshold, beyond what the caches keep between calls), and aligned to its
    element size, which ``elements_to_line`` needs to find the line boundaries."""
    return out.dtype == np.float32 and out.flags.aligned and out.nbytes >= min_bytes


def _is_flat(arr) -> bool:
    return isinstance(arr, types.Array) and arr.layout == "C"


@intrinsic
def _data_address(typingctx, arr):
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        return builder.ptrtoint(make_array(signature.args[0])(context, builder, args[0]).data, ir.IntType(64))

    return types.int64(arr), codegen


@intrinsic
def _stream_line(typingctx, dst, index, src, start):
    if not (_is_flat(dst) and _is_flat(src) and dst.dtype == src.dtype and isinstance(index, types.Integer)
            and isinstance(start, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        dst_type, index_type, src_type, start_type = signature.args
        element = context.get_data_type(dst_type.dtype)
        size = context.get_abi_sizeof(element)
        line = ir.VectorType(element, LINE_BYTES // size)
        target = make_array(dst_type)(context, builder, args[0])
        source = make_array(src_type)(context, builder, args[2])
        to = builder.gep(target.data, [context.cast(builder, args[1], index_type, types.intp)])
        frm = builder.gep(source.data, [context.cast(builder, args[3], start_type, types.intp)])
        value = builder.load(builder.bitcast(frm, line.as_pointer()), align=size)
        store = builder.store(value, builder.bitcast(to, line.as_pointer()), align=LINE_BYTES)
        store.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return types.none(dst, index, src, start), codegen


#: x86-64 orders non-temporal stores with ``sfence``; LLVM lowers a ``fence seq_cst`` there to a locked
#: stack operation, which Linux, too, does not rely on for write-combining stores (its ``mb()`` is an mfence).
_X86 = binding.get_process_triple().startswith(("x86_64", "i386", "i686"))


@intrinsic
def _fence(typingctx):
    def codegen(context, builder, signature, args):
        if _X86:
            sfence = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                    "llvm.x86.sse.sfence")
            builder.call(sfence, [])
        else:
            builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.none(), codegen


@njit(cache=True, inline="always", error_model="numpy")
def elements_to_line(arr, start):
    """Elements of the flat ``arr`` from ``start`` to the next cache-line boundary (0 when ``arr[start]``
    begins a line). ``arr`` must be aligned to its element size, as every NumPy allocation is."""
    size = arr.itemsize
    return ((LINE_BYTES - (_data_address(arr) + start * size) % LINE_BYTES) % LINE_BYTES) // size


@njit(cache=True, inline="always", error_model="numpy")
def stream_line(dst, index, src, start):
    """The line ``dst[index:index + 64 // itemsize]`` of the flat ``dst`` (``index`` must begin a line,
    see ``elements_to_line``) written from ``src[start:...]`` with one non-temporal store."""
    if _CHECKED:
        count = LINE_BYTES // dst.itemsize
        if index < 0 or index + count > dst.size or start < 0 or start + count > src.size \
                or (_data_address(dst) + index * dst.itemsize) % LINE_BYTES:
            raise IndexError("stream_line: a line outside its array, or not on a line boundary")
    _stream_line(dst, index, src, start)


@njit(cache=True, inline="always", error_model="numpy")
def store_fence():
    """Order this thread's streamed lines before its later stores (``sfence``; elsewhere a full fence)."""
    _fence()


@njit(cache=True, inline="always", error_model="numpy")
def line_span(arr, start, n):
    """(lines_start, lines_end): the whole cache lines inside ``arr[start:start + n]`` of the flat
    ``arr``, as element indices; ``[start, lines_start)`` and ``[lines_end, start + n)`` are the
    partial lines at its ends (either may be empty, and lines_start == lines_end when there is none)."""
    line = LINE_BYTES // arr.itemsize
    lines_start = start + min(n, elements_to_line(arr, start))
    return lines_start, lines_start + (start + n - lines_start) // line * line


@njit(cache=True, inline="always", error_model="numpy")
def stream_out(dst, index, src, count):
    """``dst[index:index + count] = src[0:count]`` by streaming stores; ``index`` begins a line of the
    flat ``dst`` and ``count`` is a whole number of lines (see ``line_span``)."""
    line = LINE_BYTES // dst.itemsize
    for k in range(0, count, line):
        stream_line(dst, index + k, src, k)
