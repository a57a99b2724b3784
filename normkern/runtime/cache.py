"""The cache: Numba's on-disk cache, keyed by the compiled helpers as well as by each kernel's own code.

Numba files a cached kernel under its own source file and bytecode. The helpers every kernel
compiles in (every module of ``normkern.kernels``, an op's own row modules, and the plan arithmetic of
``tiling`` that a kernel compiles) are not part of that key: after an edit to one
of them (a ``git pull`` in an editable install), a kernel whose own file did not change would load
its old machine code, with the old helper inside, and run it. ``key_by_helpers`` gives each cached
kernel of normkern a cache whose key also holds a digest of the helpers' sources, so an edited
helper means a cache miss and a fresh compile. Entries of other helper versions stay in the index
and are simply not found.
"""

from __future__ import annotations

import hashlib
import sys
import warnings
from pathlib import Path

import numba

try:  # Numba's private cache internals, as in the pinned range (pyproject.toml)
    from numba.core.caching import FunctionCache
    from numba.core.dispatcher import Dispatcher
except ImportError:  # pragma: no cover - a Numba that moved them
    FunctionCache = Dispatcher = None

#: The modules compiled into the kernels besides their own (inlined or linked into the callers): the shared
#: building blocks, and the row modules FastBatchNormBackward's bodies share.
HELPER_MODULES = (*sorted(f"kernels/{p.name}" for p in (Path(__file__).parent.parent / "kernels").glob("*.py")),
                  "ops/fast_batch_norm_backward/rows.py", "ops/fast_batch_norm_backward/sweeps.py")
#: The ``tiling`` modules whose plain functions a kernel compiles in (the plan's own arithmetic).
TILING_MODULES = ("fast_batch_norm_backward.py",)


def helpers_digest() -> str:
    """SHA-256 of the helper modules' sources, ``HELPER_MODULES`` then ``TILING_MODULES``."""
    import tiling

    digest = hashlib.sha256()
    package = Path(__file__).parent.parent
    for folder, names in ((package, HELPER_MODULES), (Path(tiling.__file__).parent, TILING_MODULES)):
        for name in names:
            digest.update((folder / name).read_bytes())
    return digest.hexdigest()


#: The digest the caches are keyed by (computed once, at import).
DIGEST = helpers_digest()


def internals_present() -> bool:
    """Whether this Numba has the cache internals the helper key replaces (``FunctionCache._index_key``,
    ``Dispatcher._cache``)."""
    return FunctionCache is not None and Dispatcher is not None and callable(getattr(FunctionCache, "_index_key",
                                                                                     None))


if FunctionCache is not None:
    class HelperKeyedCache(FunctionCache):
        """A ``FunctionCache`` whose index key ends with ``DIGEST``."""

        def _index_key(self, sig, codegen):
            return (*super()._index_key(sig, codegen), DIGEST)


def key_by_helpers(package: str) -> int:
    """Give every caching dispatcher defined in the loaded modules of ``package`` (``"normkern"``,
    ``"bench"``) a ``HelperKeyedCache``; returns how many were changed. Call before the first compile
    (normkern does it at import). A Numba whose internals moved keeps its own caching, with a warning:
    then an edited helper needs the cache cleared by hand."""
    if not internals_present():
        warnings.warn(f"normkern: Numba {numba.__version__} does not have the cache internals normkern keys by its "
                      "helpers (tested range: see pyproject.toml); kernels use Numba's own caching, so after "
                      "editing a helper module clear NUMBA_CACHE_DIR", RuntimeWarning, stacklevel=2)
        return 0
    changed = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith(package + "."):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, Dispatcher) and type(getattr(value, "_cache", None)) is FunctionCache \
                    and value.py_func.__module__ == module.__name__:
                value._cache = HelperKeyedCache(value.py_func)
                changed += 1
    return changed
