"""The kernels' Numba cache is keyed by the compiled helpers: an edited helper is a cache miss."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from numba.core.dispatcher import Dispatcher

import normkern
from normkern.runtime import cache as _cache

_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from normkern.runtime import cache as _cache
    from normkern.kernels.lanes import fold_halves

    if sys.argv[1] != "same":
        _cache.DIGEST = sys.argv[1]  # as if a helper's source had changed
    fold_halves(np.ones(100, np.float32), 100, 100)
    print(json.dumps({"hits": sum(fold_halves.stats.cache_hits.values()),
                      "misses": sum(fold_halves.stats.cache_misses.values())}))
""")


def test_every_kernel_cache_is_keyed_by_the_helpers():
    keyed = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith("normkern"):
            continue
        for value in vars(module).values():
            if isinstance(value, Dispatcher) and value.py_func.__module__ == name:
                assert isinstance(value._cache, _cache.HelperKeyedCache), f"{name}.{value.__name__}"
                keyed += 1
    assert keyed >= 40  # every op's kernels and the helpers
    assert normkern.ops.batch_norm_stats.kernel.split_c._cache.__class__ is _cache.HelperKeyedCache
    assert _cache.DIGEST == _cache.helpers_digest()


_KEYS = textwrap.dedent("""
    import json, sys
    import normkern
    from numba.core.dispatcher import Dispatcher
    from normkern.runtime import cache as _cache

    keys = {}
    for name, module in sorted(sys.modules.items()):
        for attr, value in sorted(vars(module).items()) if name.startswith("normkern") else ():
            if isinstance(value, Dispatcher) and isinstance(value._cache, _cache.HelperKeyedCache):
                keys[f"{name}.{attr}"] = repr(value._cache._index_key("sig", value.targetctx.codegen()))
    print(json.dumps(keys))
""")


def test_every_kernel_has_the_same_cache_key_in_every_process():
    """Numba keys a cached closure by its cell values' pickle, and a dispatcher's differs per process:
    a kernel closing over one would compile in every process and never load."""
    keys = [json.loads(subprocess.run([sys.executable, "-c", _KEYS], capture_output=True, text=True, check=True,
                                      timeout=300).stdout) for _ in range(2)]
    assert len(keys[0]) >= 40 and "normkern.ops.fast_batch_norm_backward.kernel.channels_training" in keys[0]
    assert keys[0] == keys[1]


def test_every_helper_a_kernel_compiles_in_is_in_the_key():
    """A module a kernel module compiles in (``from ...kernels.x import``, or an op's own ``from .rows import``)
    is part of the digest, and so is every module those import in turn."""
    root = Path(normkern.__file__).parent
    imported = set()
    for kernel in root.glob("ops/*/kernel*.py"):
        text = kernel.read_text()
        imported |= {f"kernels/{m}.py" for m in re.findall(r"^from \.\.\.kernels\.(\w+) import", text, re.MULTILINE)}
        own = re.findall(r"^from \.(\w+) import", text, re.MULTILINE)
        imported |= {f"ops/{kernel.parent.name}/{m}.py" for m in own}
    for helper in _cache.HELPER_MODULES:
        folder = str(Path(helper).parent)
        imported |= {f"{folder}/{m}.py" for m in re.findall(r"^from \.(\w+) import", (root / helper).read_text(),
                                                             re.MULTILINE)}
        imported |= {f"kernels/{m}.py" for m in re.findall(r"^from \.\.\.kernels\.(\w+) import",
                                                           (root / helper).read_text(), re.MULTILINE)}
    assert {"kernels/streaming.py", "kernels/lanes.py", "kernels/planes.py", "ops/fast_batch_norm_backward/rows.py"} \
        <= imported
    assert imported <= set(_cache.HELPER_MODULES)


def test_an_edited_helper_misses_the_cache_and_recompiles(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))

    def run(digest):
        out = subprocess.run([sys.executable, "-c", _SCRIPT, digest], env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    assert run("same") == {"hits": 0, "misses": 1}  # first compile, saved
    assert run("same") == {"hits": 1, "misses": 0}  # loaded
    assert run("edited") == {"hits": 0, "misses": 1}  # another helper version: compiled again
    assert run("same") == {"hits": 1, "misses": 0}  # the first version's entry is still there


def test_the_test_run_keeps_its_numba_cache_out_of_the_source_tree():
    """The README's promise: a test run caches its kernels in ``.numba-cache/tests`` (or in a set
    NUMBA_CACHE_DIR, as CI sets it), and adds nothing to ``__pycache__`` beside the sources."""
    import numba
    import numpy as np

    from tests.conftest import CACHE_DIR_GIVEN, SOURCE_TREE_CACHES_AT_START, TEST_CACHE_DIR, source_tree_caches

    expected = os.environ.get("NUMBA_CACHE_DIR")
    assert expected and numba.config.CACHE_DIR == expected
    if not CACHE_DIR_GIVEN:
        assert Path(expected) == TEST_CACHE_DIR
    normkern.batch_norm_stats(np.ones((2, 3, 5), np.float32), 1e-5, soc="host")  # compiles or loads a kernel
    added = sorted(source_tree_caches() - SOURCE_TREE_CACHES_AT_START)
    assert added == [], f"the test run wrote Numba cache files beside the sources: {added[:3]}"


def test_a_numba_without_the_internals_keeps_its_own_caching_with_a_warning(monkeypatch):
    import pytest

    monkeypatch.setattr(_cache, "FunctionCache", type("Moved", (), {}))
    assert not _cache.internals_present()
    with pytest.warns(RuntimeWarning, match="does not have the cache internals"):
        assert _cache.key_by_helpers("normkern") == 0
