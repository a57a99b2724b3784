"""The BatchNormElemtBackward slice: plan (``tiling.elementwise``), kernel, simulator, reference."""

from .api import OP, batch_norm_backward_elemt, bytes_moved, channel_factors, prepare
from .reference import batch_norm_backward_elemt_reference
from .registration import RECORD
from .simulator import simulate

__all__ = ["RECORD", "OP", "batch_norm_backward_elemt", "bytes_moved", "channel_factors", "prepare",
           "batch_norm_backward_elemt_reference", "simulate"]
