"""Numba's on-disk cache, keyed by the compiled helpers as well as by each kernel's own code.

Numba files a cached kernel under its own source file and bytecode. The helpers every kernel
compiles in (``_lanes``, ``_dtypes``, ``_views``, ``_streaming``, an op's own row modules, and the
plan arithmetic of ``tiling`` that a kernel compiles) are not part of that key: after an edit to one
of them (a ``git pull`` in an editable install), a kernel whose own file did not change would load
its old machine code, with the old helper inside, and run it. ``key_by_helpers`` gives each cached
kernel of normkern a cache whose key also holds a digest of the helpers' sources, so an edited
helper means a cache miss and a fresh compile. Entries of other helper versions stay in the index
and are simply not found.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from numba.core.caching import FunctionCache
from numba.core.dispatcher import Dispatcher

#: The modules compiled into every kernel (their functions are inlined or linked into the callers).
HELPER_MODULES = ("_lanes.py", "_dtypes.py", "_views.py", "_streaming.py", "ops/fast_batch_norm_backward/rows.py",
                  "ops/fast_batch_norm_backward/sweeps.py", "ops/batch_norm_elemt/kernel.py",
                  "ops/batch_norm_stats/kernel.py")
#: The ``tiling`` modules whose plain functions a kernel compiles in (the plan's own arithmetic).
TILING_MODULES = ("fast_batch_norm_backward.py",)


def helpers_digest() -> str:
    """SHA-256 of the helper modules' sources, ``HELPER_MODULES`` then ``TILING_MODULES``."""
    import tiling

    digest = hashlib.sha256()
    for folder, names in ((Path(__file__).parent, HELPER_MODULES), (Path(tiling.__file__).parent, TILING_MODULES)):
        for name in names:
            digest.update((folder / name).read_bytes())
    return digest.hexdigest()


#: The digest the caches are keyed by (computed once, at import).
DIGEST = helpers_digest()


class HelperKeyedCache(FunctionCache):
    """A ``FunctionCache`` whose index key ends with ``DIGEST``."""

    def _index_key(self, sig, codegen):
        return (*super()._index_key(sig, codegen), DIGEST)


def key_by_helpers(package: str) -> int:
    """Give every caching dispatcher defined in the loaded modules of ``package`` (``"normkern"``,
    ``"bench"``) a ``HelperKeyedCache``; returns how many were changed. Call before the first compile
    (normkern does it at import)."""
    changed = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith(package + "."):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, Dispatcher) and type(value._cache) is FunctionCache \
                    and value.py_func.__module__ == module.__name__:
                value._cache = HelperKeyedCache(value.py_func)
                changed += 1
    return changed
