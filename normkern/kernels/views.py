"""Row views that cost no reference counting, for loops over many short rows.

A Numba slice such as ``x[n, c, a:b]`` is a new array that shares its parent's owner, and making it
costs an atomic increment of the owner's count (and a decrement when it dies). Numba removes such
pairs only inside simple straight-line code; in a kernel's row loop they stay: on rows of 49 float32
(the 7x7 planes of FastBatchNormBackward) four slices a row took more time than the arithmetic.

``row_view(arr, start, length)`` is ``arr.reshape(-1)[start:start + length]`` of a C-contiguous
array, built with no owner, so nothing is counted. It is valid only while ``arr`` is alive, which
inside a kernel call it always is: the views are made from the call's own arguments and do not
outlive it. With ``NUMBA_BOUNDSCHECK=1`` (CI's second run) each view's range is checked against
``arr``, so a wrong offset fails there instead of reading past the buffer.
"""

from __future__ import annotations

from numba import njit, types
from numba.core import config
from numba.extending import intrinsic
from numba.np.arrayobj import make_array, populate_array

#: Read when a kernel compiles; CI's bounds-checked run compiles into a cache of its own.
_CHECKED = config.BOUNDSCHECK == 1


@intrinsic
def _unowned_flat_view(typingctx, arr, start, length):
    if not isinstance(arr, types.Array) or arr.layout != "C" or not isinstance(start, types.Integer) \
            or not isinstance(length, types.Integer):
        return None
    view_type = types.Array(arr.dtype, 1, "C")

    def codegen(context, builder, signature, args):
        source = make_array(signature.args[0])(context, builder, args[0])
        first = context.cast(builder, args[1], signature.args[1], types.intp)
        count = context.cast(builder, args[2], signature.args[2], types.intp)
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(arr.dtype)))
        view = make_array(view_type)(context, builder)
        populate_array(view, data=builder.gep(source.data, [first]), shape=[count], strides=[itemsize],
                       itemsize=itemsize, meminfo=None)
        return view._getvalue()

    return view_type(arr, start, length), codegen


@njit(cache=True, inline="always", error_model="numpy")
def row_view(arr, start, length):
    """``arr.reshape(-1)[start:start + length]`` of a C-contiguous array, without an owner (see the
    module docstring: valid while ``arr`` is)."""
    if _CHECKED and (start < 0 or length < 0 or start + length > arr.size):
        raise IndexError("row_view: range outside the array")
    return _unowned_flat_view(arr, start, length)
