"""The GroupNormBackward slice: plan (``tiling.group_norm_backward``), kernel, simulator, reference."""

from .api import OP, arrival_order, bytes_moved, group_norm_backward, prepare, task_statistics, task_views
from .reference import group_norm_backward_reference
from .registration import RECORD
from .simulator import simulate

__all__ = ["RECORD", "OP", "arrival_order", "bytes_moved", "group_norm_backward", "prepare", "task_statistics",
           "task_views", "group_norm_backward_reference", "simulate"]
