"""normkern: Numba CPU kernels for the Ascend CANN (aclnn) normalization operators.

Each op runs a ``tiling`` plan exactly: the plan's core split, UB blocks and reduction tree decide
every floating-point addition, so a deterministic plan gives the same bits on every run and thread
count, and an atomic plan can be replayed from its arrival order.
"""

from . import _cache, aclnn
from ._config import get_default_soc, get_deterministic, set_default_soc, set_deterministic
from .determinism import DeterminismReport, check_determinism
from .errors import (
    DeterminismError,
    InvalidParameterError,
    NormkernError,
    NullPointerError,
    TilingError,
    UnsupportedError,
    WorkspaceError,
)
from .ops.batch_norm_gather_stats import batch_norm_gather_stats_with_counts
from .ops.batch_norm_stats import batch_norm_stats
from .ops.fast_batch_norm_backward import fast_batch_norm_backward
from .ops.group_norm_backward import group_norm_backward

# Every kernel's cache is keyed by the compiled helpers too (see normkern/_cache.py); before any compile.
_cache.key_by_helpers("normkern")

__version__ = "0.1.0"

__all__ = [
    "aclnn", "batch_norm_gather_stats_with_counts", "batch_norm_stats", "fast_batch_norm_backward",
    "group_norm_backward", "check_determinism", "DeterminismReport",
    "get_default_soc", "get_deterministic", "set_default_soc", "set_deterministic",
    "DeterminismError", "InvalidParameterError", "NormkernError", "NullPointerError", "TilingError",
    "UnsupportedError", "WorkspaceError",
]
