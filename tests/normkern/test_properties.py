"""Kernel == simulator over random problems and random SoC figures (Hypothesis)."""

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import normkern
import tiling
from normkern.ops.batch_norm_gather_stats import simulate as simulate_gather
from normkern.ops.batch_norm_stats import arrival_order
from normkern.ops.batch_norm_stats import simulate as simulate_stats

from .conftest import bits, make_input

socs = st.builds(
    lambda cores, ub: dataclasses.replace(tiling.get_soc("Ascend910B2"), name="random", arch="host",
                                          vector_cores=cores, ub_bytes=ub, ub_raw_bytes=ub),
    st.integers(1, 9), st.integers(2048, 12000))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=2, max_size=4).map(tuple),
       st.sampled_from(["float32", "float16", "bfloat16"]), socs,
       st.sampled_from([None, "split_c", "split_r", "atomic"]), st.integers(0, 2**31))
def test_batch_norm_stats_kernel_equals_simulator(shape, dtype, soc, strategy, seed):
    x = make_input(shape, dtype, seed=seed % 1000)
    try:
        plan = tiling.plan_batch_norm_stats(shape, dtype, soc, strategy)
    except tiling.TilingError:
        return
    mean, invstd = normkern.batch_norm_stats(x, 1e-4, soc=soc, strategy=strategy, arrival_seed=seed)
    sim_mean, sim_invstd = simulate_stats(plan, x, 1e-4, arrival_order(plan, seed))
    assert np.array_equal(bits(mean), bits(sim_mean)) and np.array_equal(bits(invstd), bits(sim_invstd))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.integers(1, 70), socs,
       st.sampled_from([None, "common", "workspace", "first_axis_common", "first_axis_workspace"]),
       st.integers(0, 1000))
def test_gather_stats_kernel_equals_simulator(d, c, soc, strategy, seed):
    rng = np.random.default_rng(seed)
    mean = rng.standard_normal((d, c)).astype(np.float32)
    invstd = rng.uniform(0.2, 3.0, (d, c)).astype(np.float32)
    counts = rng.integers(1, 10_000, d).astype(np.float32)
    try:
        plan = tiling.plan_batch_norm_gather_stats_with_counts(d, c, "float32", soc, strategy)
    except tiling.TilingError:
        return
    rm, rv = np.zeros(c, np.float32), np.ones(c, np.float32)
    mean_all, invstd_all = normkern.batch_norm_gather_stats_with_counts(
        np.empty((1, c), np.float32), mean, invstd, rm, rv, 0.3, 1e-3, counts, soc=soc, strategy=strategy)
    expected = simulate_gather(plan, mean, invstd, counts, np.zeros(c, np.float32), np.ones(c, np.float32),
                               0.3, 1e-3)
    for got, want in zip((mean_all, invstd_all, rm, rv), expected, strict=True):
        assert np.array_equal(bits(got), bits(want))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 12), st.integers(1, 300), st.sampled_from(["float32", "float16", "bfloat16"]),
       socs, st.booleans(), st.integers(0, 1000))
def test_fast_batch_norm_backward_kernel_equals_simulator(n, c, hw, dtype, soc, training, seed):
    from .test_fast_batch_norm_backward import run_both

    try:
        plan, _, got, expected = run_both((n, c, hw), dtype, soc, training, seed=seed)
    except normkern.TilingError:
        return
    for name, a, b in zip(("grad_input", "grad_weight", "grad_bias"), got, expected, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8)), (name, str(plan))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(1, 6), st.integers(1, 6), st.integers(1, 300),
       st.sampled_from(["float32", "float16", "bfloat16"]), socs, st.sampled_from([None, "atomic"]),
       st.integers(0, 1000))
def test_group_norm_backward_kernel_equals_simulator(n, group, c_g, hxw, dtype, soc, strategy, seed):
    from .test_group_norm_backward import run_both

    try:
        plan, _, got, expected = run_both(n, group * c_g, hxw, group, dtype, soc, strategy, seed=seed)
    except normkern.TilingError:
        return
    for name, a, b in zip(("grad_input", "grad_gamma", "grad_beta"), got, expected, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8)), (name, str(plan))
