import os
import pathlib
import shutil

import pytest
from hypothesis import settings

#: Where the test run keeps its Numba cache when NUMBA_CACHE_DIR is not set.
TEST_CACHE_DIR = pathlib.Path(__file__).resolve().parents[1] / ".numba-cache" / "tests"


def _test_cache_dir() -> None:
    """The test run keeps its Numba cache in ``.numba-cache/tests`` (unless NUMBA_CACHE_DIR is set, as
    CI sets it), out of the source tree; entries of an edited helper are told apart by normkern
    itself (``normkern/runtime/cache.py`` keys every kernel by the helpers' digest). Anything else in
    ``.numba-cache`` (the per-digest directories of earlier versions) is removed. Runs before
    anything imports numba, which reads the variable once."""
    if "NUMBA_CACHE_DIR" in os.environ:
        return
    caches, current = TEST_CACHE_DIR.parent, TEST_CACHE_DIR
    if caches.is_dir():
        for stale in caches.iterdir():
            if stale != current:
                shutil.rmtree(stale, ignore_errors=True)
    os.environ["NUMBA_CACHE_DIR"] = str(current)


CACHE_DIR_GIVEN = "NUMBA_CACHE_DIR" in os.environ
_test_cache_dir()


def source_tree_caches() -> frozenset[str]:
    """Numba cache files beside the sources (where Numba puts them when no cache directory is set)."""
    root = pathlib.Path(__file__).resolve().parents[1]
    return frozenset(str(p.relative_to(root)) for package in ("normkern", "tiling")
                     for pattern in ("*.nbi", "*.nbc") for p in (root / package).rglob(pattern))


#: Those present before the test run compiled anything (a run of the CLI outside the tests leaves some).
SOURCE_TREE_CACHES_AT_START = source_tree_caches()


@pytest.fixture(autouse=True)
def every_call_on_every_thread():
    """The tests' inputs are small, and a small call runs on the calling thread alone
    (``normkern.runtime.threads_for``): here every call spreads over every thread
    (``set_num_threads(..., exact=True)``), so that each test also runs the launch on the worker threads.
    Tests of the size rule itself set their own count."""
    from normkern import runtime

    with runtime.set_num_threads(runtime.MAX_THREADS, exact=True):
        yield


# Shared CI machines are noisy: judge properties, not per-example time.
settings.register_profile("normkern", deadline=None, max_examples=100)
# Long fuzzing runs: python -m pytest tests/normkern/test_fuzz.py --hypothesis-profile=fuzz
settings.register_profile("fuzz", deadline=None, max_examples=3000)
settings.load_profile("normkern")


@pytest.fixture
def host_templates(monkeypatch):
    """The templates' host models chosen on a host SoC, normkern's own plans passed over (FastBatchNormBackward's
    ``planes``, BatchNormStats' ``channels``, BatchNormReduceBackward's ``planes``, GroupNormBackward's ``groups``),
    as a test of those models needs.
    A Bound already cached for a signature keeps its plan: such tests call with shapes of their own."""
    import tiling

    caches = (tiling.fast_batch_norm_backward._plan_cached, tiling.batch_norm_stats._plan_cached,
              tiling.batch_norm_backward_reduce._plan_cached, tiling.group_norm_backward._plan_cached)
    monkeypatch.setattr(tiling.fast_batch_norm_backward, "HOST_OWN_PLAN", False)
    monkeypatch.setattr(tiling.batch_norm_stats, "HOST_OWN_PLAN", False)
    monkeypatch.setattr(tiling.group_norm_backward_groups, "HOST_OWN_PLAN", False)
    for cache in caches:
        cache.cache_clear()
    yield
    for cache in caches:
        cache.cache_clear()
