"""The BatchNormReduceBackward slice: plan (``tiling.batch_norm_backward_reduce``), kernel, simulator,
reference."""

from .api import OP, arrival_order, batch_norm_backward_reduce, bytes_moved, prepare
from .reference import batch_norm_backward_reduce_reference
from .registration import RECORD
from .simulator import simulate

__all__ = ["RECORD", "OP", "arrival_order", "batch_norm_backward_reduce", "bytes_moved", "prepare",
           "batch_norm_backward_reduce_reference", "simulate"]
