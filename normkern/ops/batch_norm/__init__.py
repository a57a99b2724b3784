"""The BatchNorm slice: plan (``tiling.batch_norm``), kernels, simulator, reference."""

from .api import OP, batch_norm, bytes_moved, prepare
from .reference import batch_norm_reference
from .registration import RECORD
from .simulator import simulate

__all__ = ["RECORD", "OP", "batch_norm", "bytes_moved", "prepare", "batch_norm_reference", "simulate"]
