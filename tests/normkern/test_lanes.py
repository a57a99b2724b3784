"""The lanes level: its exact order, and that LLVM vectorizes it without fast-math; the short-row intrinsics' bits."""

import os
import re
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest
from numba import njit

from normkern.kernels import simulate
from normkern.kernels.dtypes import kernel_view
from normkern.kernels.lanes import (
    accumulate,
    accumulate_sqdev,
    fold,
    fold_capacity,
    fold_halves,
    short_row_dx_x,
    short_row_dx_x_hat,
    short_row_sums,
    short_row_sums_128,
    short_row_sums_256,
    short_row_width,
)
from normkern.kernels.views import row_view


@njit
def _sum(row):
    lanes = np.zeros(64, np.float32)
    accumulate(lanes, row)
    before = lanes.copy()
    return fold(lanes), before


@njit
def _sqdev(row, mean):
    lanes = np.zeros(64, np.float32)
    accumulate_sqdev(lanes, row, mean)
    return lanes


def _by_hand(row):
    lanes = np.zeros(64, np.float32)
    for i, value in enumerate(row):
        lanes[i % 64] = np.float32(lanes[i % 64] + value)
    before = lanes.copy()
    width = 32
    while width:
        for j in range(width):
            lanes[j] = np.float32(lanes[j] + lanes[j + width])
        width //= 2
    return lanes[0], before


def test_lane_order_matches_a_scalar_walk():
    rng = np.random.default_rng(4)
    for n in (0, 1, 63, 64, 65, 255, 256, 257, 1000):
        row = rng.standard_normal(n).astype(np.float32) * 1e3
        total, lanes = _sum(row)
        hand_total, hand_lanes = _by_hand(row)
        assert np.array_equal(lanes, hand_lanes) and total == hand_total, n
        deviations = (row - np.float32(0.5)) * (row - np.float32(0.5))
        assert np.array_equal(_sqdev(row, np.float32(0.5)), _by_hand(deviations.astype(np.float32))[1])


def test_lane_loops_compile_to_packed_adds():
    """A change that reintroduces a serial chain drops a kernel to a fraction of the bandwidth."""
    row = np.ones(1000, np.float32)
    _sum(row)
    _sqdev(row, np.float32(1.0))
    for fn in (_sum, _sqdev):
        asm = fn.inspect_asm(fn.signatures[0])
        assert re.search(r"\bv?addps\s+[^\n]*%[xyz]mm", asm), f"{fn.__name__}: no packed float32 add"


@njit
def _fold_halves(buf, length, used):
    return fold_halves(buf, length, used)


#: Lengths around every branch of ``fold_halves``: the 64-lane fold alone, the register halvings of
#: 128, 256 and 512, and one, two and three memory passes of three levels above 512.
FOLD_LENGTHS = (1, 2, 31, 63, 64, 65, 100, 127, 128, 129, 196, 255, 256, 257, 448, 511, 512, 513, 784, 1023,
                1024, 1025, 3136, 4095, 4096, 4097, 8192, 9216, 32768, 32769, 40000)


def _fold_input(rng, length, used):
    """Values of magnitudes 1e-20..1e20 (so the order shows in the bits), +0 from ``used`` on."""
    values = (rng.standard_normal(length) * 10.0 ** rng.integers(-20, 20, length)).astype(np.float32)
    values[used:] = 0.0
    return values


@pytest.mark.parametrize("length", FOLD_LENGTHS)
def test_fold_halves_is_the_simulator_order(length):
    """Compiled fold (register halvings, fused memory levels) against the level-by-level NumPy walk;
    past ``used`` the compiled buffer holds NaN, which it must never read."""
    rng = np.random.default_rng(length)
    for used in sorted({length, length // 2, int(rng.integers(0, length + 1)), 0}):
        values = _fold_input(rng, length, used)
        expected = simulate.fold_halves(values)
        # the smallest buffer (tail step over memory) and fold_capacity's (tail step in registers up to 256)
        for size in (max(length, 64), fold_capacity(length)):
            buf = np.full(size, np.nan, np.float32)
            buf[:used] = values[:used]
            got = _fold_halves(buf, length, used)
            assert np.float32(got).view(np.uint32) == np.float32(expected).view(np.uint32), (length, used, size)


def test_fold_halves_keeps_negative_zero_and_infinities():
    """With ``used == length`` every element is added, -0 included: -0 + -0 stays -0."""
    for length in (64, 100, 200, 512, 4097):
        buf = np.full(fold_capacity(length), -0.0, np.float32)
        assert np.float32(_fold_halves(buf.copy(), length, length)).view(np.uint32) == 0x80000000, length
        buf[length:] = np.nan  # past the length: loaded by the register tail step, never added
        assert np.float32(_fold_halves(buf.copy(), length, length)).view(np.uint32) == 0x80000000, length
        buf[length // 3] = np.inf
        assert _fold_halves(buf.copy(), length, length) == np.inf
        buf[length // 2] = -np.inf
        assert np.isnan(_fold_halves(buf, length, length))


def test_fold_is_the_pairwise_walk_and_leaves_its_lanes():
    rng = np.random.default_rng(7)
    for _ in range(50):
        lanes = _fold_input(rng, 64, 64)
        before = lanes.copy()
        assert np.float32(_sum_lanes(lanes)).view(np.uint32) == np.float32(simulate.pairwise64(before)).view(np.uint32)
        np.testing.assert_array_equal(lanes, before)


@njit
def _sum_lanes(lanes):
    return fold(lanes)


def test_bounds_checked_build_refuses_a_fold_of_a_short_buffer(tmp_path):
    """The register fold loads 64 lanes at once: a bounds-checked build refuses a shorter buffer, and
    a fold_halves whose ``used`` prefix is longer than its buffer."""
    script = textwrap.dedent("""
        import numpy as np
        from numba import njit
        from normkern.kernels.lanes import fold, fold_halves

        @njit
        def lanes_sum(buf):
            return fold(buf)

        @njit
        def halves_sum(buf, length):
            return fold_halves(buf, length, length)

        assert lanes_sum(np.ones(64, np.float32)) == 64
        for call in (lambda: lanes_sum(np.ones(63, np.float32)), lambda: halves_sum(np.ones(40, np.float32), 40),
                     lambda: halves_sum(np.ones(300, np.float32), 301)):
            try:
                call()
            except IndexError:
                continue
            raise SystemExit("no IndexError")
        print("refused")
    """)
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "refused"


@njit
def _short_sums(dy, x, r, neg_mr, n, width):
    dy_row, x_row = row_view(dy, 0, n), row_view(x, 0, n)
    if width == 64:
        return short_row_sums(dy_row, x_row, r, neg_mr)
    if width == 128:
        return short_row_sums_128(dy_row, x_row, r, neg_mr)
    return short_row_sums_256(dy_row, x_row, r, neg_mr)


@njit
def _short_dx(dy, x, dx, start, n, p, a, b, r, neg_mr, with_x_hat):
    rows = row_view(dy, start, n), row_view(x, start, n), row_view(dx, start, n)
    if with_x_hat:
        short_row_dx_x_hat(rows[0], rows[1], rows[2], p, a, b, r, neg_mr)
    else:
        short_row_dx_x(rows[0], rows[1], rows[2], p, a, b, r, neg_mr)


def _short_rows(rng, dtype, n):
    values = (rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3)).astype(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-42, 65504.0], np.float32)
    if rng.random() < 0.3:
        picks = rng.integers(0, n, size=min(n, 3))
        values[picks] = rng.choice(specials, size=picks.size)
    return values.astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_short_row_sums_are_the_fold_halves_of_the_filled_buffers(dtype):
    """Every length 1..256 at its width (64, 128, 256): both sums bit for bit the simulator's fold-halves of
    the float32 rows a UB-like buffer would hold (dy, and (x * r + neg_mr) * dy rounded op by op)."""
    rng = np.random.default_rng(5)
    np_dtype = np.dtype(dtype) if dtype != "bfloat16" else ml_dtypes.bfloat16
    assert [short_row_width(n) for n in (1, 64, 65, 128, 129, 256, 257)] == [64, 64, 128, 128, 256, 256, 0]
    for n in [*range(1, 257), *rng.integers(1, 257, size=64)]:
        n = int(n)
        dy, x = _short_rows(rng, np_dtype, n), _short_rows(rng, np_dtype, n)
        if rng.random() < 0.1:
            dy[:] = -0.0  # a row of -0: lanes past the length are +0, as the buffer's
        r, neg_mr = np.float32(rng.uniform(0.1, 4)), np.float32(rng.uniform(-3, 3))
        d = dy.astype(np.float32)
        with np.errstate(all="ignore"):
            products = ((x.astype(np.float32) * r) + neg_mr) * d
        got = _short_sums(kernel_view(dy), kernel_view(x), r, neg_mr, n, short_row_width(n))
        for value, row in zip(got, (d, products), strict=True):
            want = simulate.fold_halves(row)
            assert np.float32(value).view(np.uint32) == np.float32(want).view(np.uint32) or (
                np.isnan(value) and np.isnan(want)), (dtype, n)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_short_row_dx_is_the_scalar_formula_and_writes_only_the_row(dtype):
    rng = np.random.default_rng(6)
    np_dtype = np.dtype(dtype) if dtype != "bfloat16" else ml_dtypes.bfloat16
    for n in [*range(1, 257), *rng.integers(1, 257, size=32)]:
        n, start = int(n), int(rng.integers(0, 5))
        dy, x = _short_rows(rng, np_dtype, start + n + 3), _short_rows(rng, np_dtype, start + n + 3)
        p, a, b, r, neg_mr = (np.float32(v) for v in rng.uniform(-2, 2, 5))
        for with_x_hat in (True, False):
            dx = np.full(start + n + 3, 7.0, np_dtype)
            _short_dx(kernel_view(dy), kernel_view(x), kernel_view(dx), start, n, p, a, b, r, neg_mr, with_x_hat)
            d, xs = dy[start:start + n].astype(np.float32), x[start:start + n].astype(np.float32)
            with np.errstate(all="ignore"):
                if with_x_hat:
                    xs = xs * r + neg_mr
                want = (d * p - (xs * a + b)).astype(np_dtype)
            got = dx[start:start + n]
            same = (got.view(np.uint16 if np_dtype != np.float32 else np.uint32)
                    == want.view(np.uint16 if np_dtype != np.float32 else np.uint32)) | (
                np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32)))
            assert same.all(), (dtype, n, with_x_hat)
            assert (dx[:start].astype(np.float32) == 7.0).all() and (dx[start + n:].astype(np.float32) == 7.0).all()


@njit
def _accumulate_onto(lanes, row, mean, squared):
    if squared:
        accumulate_sqdev(lanes, row, mean)
    else:
        accumulate(lanes, row)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_accumulate_onto_any_lanes_is_the_scalar_walk_in_every_dtype(dtype):
    """Rows of every length up to 130 (the partial last chunk in one vector step) added onto lanes that already
    hold values, -0 and NaN among them: each lane adds its elements in order and lanes the chunk does not
    reach keep their bits."""
    rng = np.random.default_rng(8)
    np_dtype = np.dtype(dtype) if dtype != "bfloat16" else ml_dtypes.bfloat16
    for n in range(0, 131):
        row = (rng.standard_normal(n) * 100).astype(np_dtype)
        start = rng.standard_normal(64).astype(np.float32)
        start[rng.integers(0, 64, 4)] = np.array([-0.0, np.nan, np.inf, -0.0], np.float32)
        mean = np.float32(0.25)
        for squared in (False, True):
            lanes = start.copy()
            _accumulate_onto(lanes, kernel_view(row), mean, squared)
            want = start.copy()
            for i, value in enumerate(row.astype(np.float32)):
                term = (value - mean) * (value - mean) if squared else value
                want[i % 64] = np.float32(want[i % 64] + term)
            assert np.array_equal(lanes.view(np.uint32), want.view(np.uint32)), (dtype, n, squared)
