import hashlib
import os
import pathlib
import shutil

from hypothesis import settings


def _cache_keyed_by_shared_helpers() -> None:
    """Numba's on-disk cache checks only a function's own source file. A kernel cached before an
    edit to the compiled helpers every kernel links in (``_lanes``, ``_dtypes``, ``_views``) would keep running
    the old helpers, and the tests would judge stale code. So the test run keeps its Numba cache in
    a directory named by those files' contents (unless NUMBA_CACHE_DIR is set, as CI sets it):
    an edit to either starts a fresh cache, and an edit to an op's kernel still recompiles only it.
    Runs before anything imports numba, which reads the variable once."""
    if "NUMBA_CACHE_DIR" in os.environ:
        return
    root = pathlib.Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for name in ("_lanes.py", "_dtypes.py", "_views.py"):
        digest.update((root / "normkern" / name).read_bytes())
    caches = root / ".numba-cache"
    current = caches / digest.hexdigest()[:16]
    if caches.is_dir():
        for stale in caches.iterdir():
            if stale != current:
                shutil.rmtree(stale, ignore_errors=True)
    os.environ["NUMBA_CACHE_DIR"] = str(current)


_cache_keyed_by_shared_helpers()

# Shared CI machines are noisy: judge properties, not per-example time.
settings.register_profile("normkern", deadline=None, max_examples=100)
settings.load_profile("normkern")
