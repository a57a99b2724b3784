"""Which thread runs which of a plan's cores: balanced runs of cores, and no effect on a single bit."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import normkern
import tiling
from normkern.ops.batch_norm_stats import api as bns_api
from normkern.ops.fast_batch_norm_backward import api as fbnb_api
from normkern.ops.group_norm_backward import api as gn_api
from normkern.runtime import threads as _threads

from .conftest import TINY, bits, make_input


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=60), st.integers(1, 9))
def test_spans_cover_every_core_once_and_balance_the_work(work, threads):
    spans = _threads.thread_spans(work, threads)
    assert spans.dtype == np.int64 and spans.shape == (threads + 1,)
    assert spans[0] == 0 and spans[-1] == len(work) and np.all(np.diff(spans) >= 0)
    loads = [sum(work[spans[t]:spans[t + 1]]) for t in range(threads)]
    assert max(loads) <= sum(work) / threads + max(work)


def test_the_a2_batch_norm_stats_split_is_balanced():
    # 64x128x56x56 on the A2 plan: 32 cores of 3 channels, 16 of 2. prange over the 48 cores gave the
    # first thread 24 cores (72 channels) and the second 24 (56); the spans give 63 and 65.
    plan = tiling.plan_batch_norm_stats((64, 128, 56, 56), "float32", "Ascend910B2")
    work = plan.kernel_args().core_count
    spans = _threads.thread_spans(work, 2)
    assert [int(work[spans[t]:spans[t + 1]].sum()) for t in range(2)] == [63, 65]
    assert list(_threads.thread_spans([1] * 7, 3)) == [0, 2, 5, 7]
    assert list(_threads.thread_spans([5], 3)) == [0, 0, 1, 1]       # more threads than cores


def test_spans_are_kept_per_plan_and_thread_count(threads):
    plan = tiling.plan_batch_norm_stats((8, 64, 4, 4), "float32", "Ascend910B2")
    threads(1)
    one = _threads.plan_spans(plan, lambda: plan.kernel_args().core_count, 1 << 30)
    threads(2)
    two = _threads.plan_spans(plan, lambda: plan.kernel_args().core_count, 1 << 30)
    assert one == ((0, plan.block_dim),) and len(two) == 2 and two[0][0] == 0 and two[-1][1] == plan.block_dim
    assert _threads.plan_spans(plan, lambda: None, 1 << 30) is two                # not recomputed


def _skewed_row(items):
    """Spans as far from balanced as they go: every core (or group) on the last of four threads but one,
    which runs core 1 alone (the kernels must give the same bits whatever thread runs a core)."""
    return np.array([0, 0, min(1, items), min(1, items), items], np.int64)


def _skewed(plan, work, nbytes, per_thread):
    return _skewed_row(np.asarray(work()).shape[-1])


@pytest.mark.parametrize("strategy", ["split_c", "split_r"])
def test_batch_norm_stats_bits_do_not_depend_on_the_threads_cores(strategy, monkeypatch):
    x = make_input((40, 7, 300), "float32", seed=2)
    balanced = normkern.batch_norm_stats(x, 1e-5, soc=TINY, strategy=strategy)
    monkeypatch.setattr(bns_api, "call_runs", lambda *args: lambda: _skewed(*args))
    bns_api._calls.clear()  # the balanced call's Bound holds its runs
    skewed = normkern.batch_norm_stats(x, 1e-5, soc=TINY, strategy=strategy)
    assert all(np.array_equal(bits(a), bits(b)) for a, b in zip(balanced, skewed, strict=True))


@pytest.mark.parametrize("shape", [(8, 512, 7, 7), (5, 9, 40, 40)])
def test_fast_batch_norm_backward_bits_do_not_depend_on_the_threads_cores(shape, monkeypatch):
    rng = np.random.default_rng(1)
    dy, x = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    c = shape[1]
    w, mean = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    invstd = rng.uniform(0.5, 2, c).astype(np.float32)
    call = (dy, x, w, mean, invstd, mean, invstd, True, 1e-5)
    balanced = normkern.fast_batch_norm_backward(*call, soc="Ascend910B2")
    monkeypatch.setattr(fbnb_api, "phase_spans", lambda plan, args, leads, nbytes: lambda: tuple(
        _skewed_row(lead.size or args.phase_core_jobs.shape[1] - 1) for lead in leads))
    fbnb_api._calls.clear()  # the balanced call's Bound holds its runs
    skewed = normkern.fast_batch_norm_backward(*call, soc="Ascend910B2")
    assert all(np.array_equal(bits(a), bits(b)) for a, b in zip(balanced, skewed, strict=True))


def test_group_norm_backward_bits_do_not_depend_on_the_threads_cores(monkeypatch):
    rng = np.random.default_rng(3)
    n, c, hxw, g = 12, 16, 50, 4
    dy, x = (rng.standard_normal((n, c, hxw)).astype(np.float32) for _ in range(2))
    mean, rstd = rng.standard_normal(n * g).astype(np.float32), rng.uniform(0.5, 2, n * g).astype(np.float32)
    gamma = rng.standard_normal(c).astype(np.float32)
    balanced = normkern.group_norm_backward(dy, x, mean, rstd, gamma, n, c, hxw, g)
    monkeypatch.setattr(gn_api, "plan_spans", _skewed)
    skewed = normkern.group_norm_backward(dy, x, mean, rstd, gamma, n, c, hxw, g)
    assert all(np.array_equal(bits(a), bits(b)) for a, b in zip(balanced, skewed, strict=True))
