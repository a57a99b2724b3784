"""normkern: Numba CPU kernels for the Ascend CANN (aclnn) normalization operators.

Each op runs a ``tiling`` plan exactly: the plan's core split, UB blocks and reduction tree decide
every floating-point addition, so a deterministic plan gives the same bits on every run and thread
count, and an atomic plan can be replayed from its arrival order.
"""

from . import aclnn
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
from .registry import records as _records
from .runtime import cache as _cache
from .runtime import get_num_threads, set_num_threads
from .runtime.calls import PreparedCall, prepare
from .runtime.settings import get_default_soc, get_deterministic, set_default_soc, set_deterministic

# Every kernel's cache is keyed by the compiled helpers too (see normkern/runtime/cache.py); before any compile.
_cache.key_by_helpers("normkern")

__version__ = "0.1.0"

# Every registered op is ``normkern.<name>``.
globals().update({_record.name: _record.function for _record in _records()})

__all__ = [
    *(_record.name for _record in _records()), "aclnn", "check_determinism", "DeterminismReport", "prepare",
    "PreparedCall",
    "get_default_soc", "get_deterministic", "get_num_threads", "set_default_soc", "set_deterministic",
    "set_num_threads",
    "DeterminismError", "InvalidParameterError", "NormkernError", "NullPointerError", "TilingError",
    "UnsupportedError", "WorkspaceError",
]
