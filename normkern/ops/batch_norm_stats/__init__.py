"""The BatchNormStats slice: plan (``tiling.batch_norm_stats``), kernel, simulator, reference."""

from .api import OP, arrival_order, batch_norm_stats, bytes_moved, prepare
from .reference import batch_norm_stats_reference
from .registration import RECORD
from .simulator import simulate

__all__ = [
    "RECORD", "OP", "arrival_order", "batch_norm_stats", "bytes_moved", "prepare", "batch_norm_stats_reference",
    "simulate",
]
