"""The FastBatchNormBackward slice: plan (``tiling.fast_batch_norm_backward``), kernel, simulator, reference."""

from .api import OP, bytes_moved, fast_batch_norm_backward, fused_views, prepare, statistics, unfused_view
from .reference import fast_batch_norm_backward_reference
from .registration import RECORD
from .simulator import simulate

__all__ = ["RECORD", "OP", "bytes_moved", "fast_batch_norm_backward", "fused_views", "prepare", "statistics",
           "unfused_view", "fast_batch_norm_backward_reference", "simulate"]
