"""The BatchNormGatherStatsWithCounts slice: plan (``tiling.batch_norm_gather_stats``), kernel, simulator."""

from .api import OP, batch_norm_gather_stats_with_counts, prepare
from .reference import batch_norm_gather_stats_reference
from .registration import RECORD
from .simulator import simulate

__all__ = ["RECORD", "OP", "batch_norm_gather_stats_with_counts", "prepare", "batch_norm_gather_stats_reference",
           "simulate"]
