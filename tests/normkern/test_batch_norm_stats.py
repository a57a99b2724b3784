"""BatchNormStats: kernel == simulator bit for bit, and both close to the float64 reference."""

import numpy as np
import pytest

import normkern
import tiling
from normkern.ops.batch_norm_stats import arrival_order, batch_norm_stats_reference, simulate
from tests.tolerances import assert_close

from .conftest import TINY, bits, make_input

STRATEGIES = ("split_c", "split_r", "atomic", "channels")
# float32 blocks on TINY hold 256 elements, half blocks 192 (see conftest).
BLOCK = {"float32": 256, "float16": 192, "bfloat16": 192}


def _boundary_shapes(dtype):
    block = BLOCK[dtype]
    shapes = []
    for hxw in (63, 64, 65, 255, 256, 257, block - 1, block, block + 1, 2 * block - 1, 2 * block, 2 * block + 1):
        shapes.append((3, 2, hxw))
    rows_per_block = block // 64          # planes of 64 elements, several per block
    for k in (1, 2):
        for n in (k * rows_per_block - 1, k * rows_per_block, k * rows_per_block + 1):
            shapes.append((n, 3, 8, 8))
    return sorted(set(shapes))


def _check_against_reference(x, mean, invstd, eps):
    """mean against the largest input (it cancels); invstd against its own largest value."""
    ref_mean, ref_invstd = batch_norm_stats_reference(x, eps)
    assert_close(mean, ref_mean, scale=np.abs(x.astype(np.float64)).max(), name="mean")
    assert_close(invstd, ref_invstd, name="invstd")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_kernel_equals_simulator_at_block_boundaries(dtype, strategy):
    for shape in _boundary_shapes(dtype):
        x = make_input(shape, dtype, seed=sum(shape))
        plan = tiling.plan_batch_norm_stats(shape, dtype, TINY, strategy)
        mean, invstd = normkern.batch_norm_stats(x, 1e-5, soc=TINY, strategy=strategy, arrival_seed=7)
        sim_mean, sim_invstd = simulate(plan, x, 1e-5, arrival_order(plan, 7))
        assert np.array_equal(bits(mean), bits(sim_mean)), (shape, plan)
        assert np.array_equal(bits(invstd), bits(sim_invstd)), (shape, plan)
        _check_against_reference(x, mean, invstd, 1e-5)


@pytest.mark.parametrize("soc", ["Ascend910B2", "Ascend950", "host"])
@pytest.mark.parametrize("shape", [(32, 64, 14, 14), (256, 4, 28, 28), (4, 3, 1000)])
def test_real_socs_match_simulator_and_reference(soc, shape):
    dtype = "bfloat16" if soc == "Ascend950" else "float32"
    x = make_input(shape, dtype, seed=1)
    plan = tiling.plan_batch_norm_stats(shape, dtype, soc)
    mean, invstd = normkern.batch_norm_stats(x, 1e-3, soc=soc)
    sim_mean, sim_invstd = simulate(plan, x, 1e-3)
    assert np.array_equal(bits(mean), bits(sim_mean)) and np.array_equal(bits(invstd), bits(sim_invstd))
    _check_against_reference(x, mean, invstd, 1e-3)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("strategy", ["split_c", "split_r"])
def test_long_rows_match_simulator(dtype, strategy):
    """Rows of 1024 elements and more, which pass 1 sums in 4 KiB pieces while it prefetches the
    next row: 1024 and 2048 elements are whole pieces for one dtype or the other, 2113 and 4167 end
    in a part piece, and 70001 and 130001 split each plane into segments with a shorter tail."""
    soc = "Ascend950" if dtype == "bfloat16" else "Ascend910B2"
    for shape in ((3, 2, 1023), (3, 2, 1024), (3, 2, 2048), (3, 2, 2113), (5, 3, 4167), (2, 2, 70001),
                  (4, 3, 130001)):
        x = make_input(shape, dtype, seed=sum(shape))
        for target in (soc, "host"):
            plan = tiling.plan_batch_norm_stats(shape, dtype, target, strategy)
            mean, invstd = normkern.batch_norm_stats(x, 1e-5, soc=target, strategy=strategy)
            sim_mean, sim_invstd = simulate(plan, x, 1e-5)
            assert np.array_equal(bits(mean), bits(sim_mean)), (shape, plan)
            assert np.array_equal(bits(invstd), bits(sim_invstd)), (shape, plan)
            _check_against_reference(x, mean, invstd, 1e-5)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_thread_count_does_not_change_a_bit(strategy, threads):
    x = make_input((40, 3, 300), "float32", seed=5)
    results = []
    for count in (1, 2):
        threads(count)
        results.append(normkern.batch_norm_stats(x, 1e-5, soc=TINY, strategy=strategy, arrival_seed=11))
    for a, b in zip(*results, strict=False):
        assert np.array_equal(bits(a), bits(b))


def test_the_plan_defines_the_bits():
    """Same data, plans for two SoCs: different orders, so (almost surely) different bits."""
    x = make_input((64, 4, 4000), "float32", seed=3)
    a2 = normkern.batch_norm_stats(x, 1e-5, soc="Ascend910B2")
    tiny = normkern.batch_norm_stats(x, 1e-5, soc=TINY)
    assert not (np.array_equal(bits(a2[0]), bits(tiny[0])) and np.array_equal(bits(a2[1]), bits(tiny[1])))


@pytest.mark.parametrize("rank", range(2, 9))
def test_every_rank(rank):
    shape = (3, 4) + (2,) * (rank - 2)
    x = make_input(shape, "float32")
    mean, invstd = normkern.batch_norm_stats(x, 1e-5, soc="host")
    _check_against_reference(x, mean, invstd, 1e-5)


def test_non_contiguous_input_gives_the_contiguous_result():
    base = make_input((6, 8, 10, 12), "float16")
    view = base[::2, 1::2, :, ::-1]
    expected = normkern.batch_norm_stats(np.ascontiguousarray(view), 1e-5)
    got = normkern.batch_norm_stats(view, 1e-5)
    assert all(np.array_equal(bits(a), bits(b)) for a, b in zip(expected, got, strict=False))


def test_channels_last_permutation_is_accepted():
    x = make_input((4, 5, 6, 3), "float32").transpose(0, 3, 1, 2)  # NHWC memory, NCHW view
    mean, invstd = normkern.batch_norm_stats(x, 1e-5)
    _check_against_reference(x, mean, invstd, 1e-5)


@pytest.mark.parametrize("shape", [(0, 3, 4), (2, 3, 0), (0, 3)])
def test_empty_input_gives_zero_mean_and_nan_invstd(shape):
    mean, invstd = normkern.batch_norm_stats(np.zeros(shape, np.float32), 1e-5)
    assert mean.dtype == invstd.dtype == np.float32
    assert np.array_equal(mean, np.zeros(3)) and np.isnan(invstd).all()


def test_out_arrays_are_filled_including_strided_ones():
    x = make_input((8, 6, 50), "float32")
    expected = normkern.batch_norm_stats(x, 1e-5)
    mean = np.full(6, np.nan, np.float32)
    holder = np.full(12, np.nan, np.float32)
    result = normkern.batch_norm_stats(x, 1e-5, out=(mean, holder[::2]))
    assert result[0] is mean and np.array_equal(bits(holder[::2]), bits(expected[1]))
    assert np.isnan(holder[1::2]).all()


def test_constant_channel_has_zero_variance():
    x = np.full((4, 2, 33), 2.5, np.float32)
    mean, invstd = normkern.batch_norm_stats(x, 0.25)
    assert np.array_equal(mean, [2.5, 2.5]) and np.array_equal(invstd, [2.0, 2.0])


def test_large_offset_two_pass_is_accurate():
    """Two-pass keeps the variance of data far from zero (a one-pass E[x^2]-E[x]^2 would not)."""
    x = (make_input((16, 2, 4096), "float32", offset=0.0) + 1000).astype(np.float32)
    mean, invstd = normkern.batch_norm_stats(x, 0.0, soc="host")
    _check_against_reference(x, mean, invstd, 0.0)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_zero_variance_and_zero_eps_give_ieee_infinity(strategy):
    """No exception from compiled code: 1/sqrt(0) is +inf, as on the NPU."""
    x = np.full((12, 3, 70), -1.5, np.float32)
    mean, invstd = normkern.batch_norm_stats(x, 0.0, soc=TINY, strategy=strategy, arrival_seed=0)
    assert np.array_equal(mean, [-1.5] * 3) and np.isposinf(invstd).all()


def test_core_order_of_a_deterministic_plan_is_shared_and_read_only():
    plan = tiling.plan_batch_norm_stats((4, 8, 100), "float32", "Ascend910B2", "split_r")
    order = arrival_order(plan)
    np.testing.assert_array_equal(order, np.tile(np.arange(plan.block_dim), (2, 1)))
    assert arrival_order(plan, 3) is order
    with pytest.raises(ValueError):
        order[0, 0] = 1
