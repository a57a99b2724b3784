"""``row_view``: the flat slice it stands for, shared memory, and CI's bounds check on its range."""

import os
import subprocess
import sys
import textwrap

import numpy as np
from numba import njit

from normkern.kernels.views import row_view


@njit
def _copy_view(arr, start, length):
    return row_view(arr, start, length).copy()


@njit
def _fill_view(arr, start, length, value):
    view = row_view(arr, start, length)
    for i in range(view.shape[0]):
        view[i] = value


def test_view_is_the_flat_slice():
    arr = np.arange(2 * 3 * 7, dtype=np.uint16).reshape(2, 3, 7)
    for start, length in ((0, 7), (8, 7), (35, 7), (41, 1), (13, 0)):
        np.testing.assert_array_equal(_copy_view(arr, start, length), arr.reshape(-1)[start:start + length])


def test_view_writes_into_its_array_and_nowhere_else():
    arr = np.zeros((3, 5), np.float32)
    _fill_view(arr, 6, 3, np.float32(2.5))
    expected = np.zeros(15, np.float32)
    expected[6:9] = 2.5
    np.testing.assert_array_equal(arr.reshape(-1), expected)


def test_bounds_checked_build_refuses_a_range_past_the_array(tmp_path):
    script = textwrap.dedent("""
        import numpy as np
        from numba import njit
        from normkern.kernels.views import row_view

        @njit
        def total(arr, start, length):
            return row_view(arr, start, length).sum()

        arr = np.ones((2, 5), np.float32)
        assert total(arr, 5, 5) == 5
        for start, length in ((6, 5), (-1, 2), (0, 11)):
            try:
                total(arr, start, length)
            except IndexError:
                continue
            raise SystemExit(f"no IndexError for ({start}, {length})")
        print("refused")
    """)
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "refused"
