"""The host plans of normkern's own on the synchronized path: BatchNormStats ``channels``, BatchNormReduceBackward
``planes``, BatchNormElemt and BatchNormElemtBackward ``channels``. Each is the host's first choice; the reductions
are the orders of BatchNorm's training statistics and of FastBatchNormBackward's ``planes`` sums, bit for bit (a
SyncBatchNorm on one process and a BatchNorm agree); the bits are the same on 1, 2 and 8 cores and at 1 and 2
threads; ``check_determinism`` says so; the NPU SoCs refuse them."""

import dataclasses

import numpy as np
import pytest

import normkern
import tiling
from normkern.ops.batch_norm_backward_reduce import simulate as reduce_simulate
from normkern.ops.batch_norm_stats import batch_norm_stats_reference
from normkern.ops.batch_norm_stats import simulate as stats_simulate
from tests.tolerances import assert_close

from .conftest import make_input, make_spread_input

HOST = tiling.get_soc("host")
#: Streams of one chunk, of several (16384 elements each), planes of 49 and 3000, a plane of two segments, float32
#: planes of whole lane steps (6400, one cut by a chunk's end) summed where they lie.
SHAPES = [(8, 5, 7, 7), (6, 3, 3000), (3, 2, 11000), (2, 3, 20000), (5, 4), (2, 3, 2, 3, 5), (3, 2, 6400)]
F32 = np.float32


def _same(a, b) -> bool:
    return np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


def _coefficients(c, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.5, 1.5, c).astype(F32), (0.3 * rng.standard_normal(c)).astype(F32)


def test_host_chooses_its_own_plans_and_the_npus_refuse_them():
    shape = (4, 8, 7, 7)
    assert tiling.plan_batch_norm_stats(shape, soc="host").strategy.value == "channels"
    assert tiling.plan_batch_norm_backward_reduce(shape, soc="host").strategy.value == "planes"
    assert tiling.plan_batch_norm_elemt(shape, soc="host").strategy.value == "channels"
    assert tiling.plan_batch_norm_backward_elemt(shape, soc="host").strategy.value == "channels"
    for soc in ("Ascend910B2", "Ascend950"):
        assert tiling.plan_batch_norm_stats(shape, soc=soc).strategy.value in ("split_c", "split_r")
        with pytest.raises(tiling.TilingError, match="normkern's own CPU plan"):
            tiling.plan_batch_norm_stats(shape, soc=soc, strategy="channels")
        with pytest.raises(tiling.TilingError, match="normkern's own CPU plan"):
            tiling.plan_batch_norm_backward_elemt(shape, soc=soc, strategy="channels")
    with pytest.raises(tiling.TilingError, match="normkern's own CPU plan"):
        tiling.plan_batch_norm_backward_reduce(shape, soc="Ascend910B2", strategy="planes")
    plan = tiling.plan_batch_norm_backward_reduce(shape, soc="host")
    assert plan.tree == tiling.plan_fast_batch_norm_backward(shape, soc="host").tree
    assert tiling.Plan.from_json(plan.to_json()) == plan


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_stats_are_batch_norms_and_the_reduce_sums_are_the_planes_backwards(dtype):
    """The two pairs share their orders: the same bits, and each equals its simulator and stays near float64."""
    for seed, shape in enumerate(SHAPES):
        x = make_spread_input(shape, dtype, seed) if seed % 2 else make_input(shape, dtype, seed)
        dy = make_input(shape, dtype, seed + 10)
        w, b = _coefficients(shape[1], seed)
        mean, invstd = normkern.batch_norm_stats(x, 1e-5, soc="host")
        _, save_mean, save_invstd = normkern.batch_norm(x, w, b, None, None, True, 0.1, 1e-5, soc="host")
        assert _same(mean, save_mean) and _same(invstd, save_invstd), shape
        sim = stats_simulate(tiling.plan_batch_norm_stats(shape, dtype, "host"), x, 1e-5)
        assert _same(mean, sim[0]) and _same(invstd, sim[1]), shape
        ref_mean, ref_invstd = batch_norm_stats_reference(x, 1e-5)
        assert_close(mean, ref_mean, scale=np.abs(x.astype(np.float64)).max(), dtype="float32", name="mean")
        assert_close(invstd, ref_invstd, dtype="float32", name="invstd")

        running_var = (F32(1) / (invstd * invstd)).astype(F32)
        sums = normkern.batch_norm_backward_reduce(dy, x, mean, invstd, w, True, True, True, soc="host")
        _, grad_weight, grad_bias = normkern.fast_batch_norm_backward(dy, x, w, mean, running_var, mean, invstd, True,
                                                                      1e-5, soc="host")
        assert _same(sums[3], grad_bias) and _same(sums[0], grad_bias) and _same(sums[2], grad_weight), shape
        plan = tiling.plan_batch_norm_backward_reduce(shape, dtype, "host")
        for got, want in zip(sums, reduce_simulate(plan, dy, x, mean, invstd), strict=True):
            assert _same(got, want), shape
        dy64, x64 = dy.astype(np.float64), x.astype(np.float64)
        axes = (0, *range(2, x.ndim))
        xmu = (dy64 * (x64 - mean.astype(np.float64).reshape((-1,) + (1,) * (x.ndim - 2)))).sum(axis=axes)
        scale = float((np.abs(dy64) * np.abs(x64 - x64.mean())).sum(axis=axes).max()) + 1
        assert_close(sums[1], xmu, scale=scale, dtype="float32", name="sum_dy_xmu")


def test_the_bits_are_the_same_on_every_split_and_thread_count(threads):
    """Cores own whole channels and each channel's order is the plan's: 1, 2 or 8 cores, a stream staged whole or a
    chunk at a time, one or two threads: one answer from each op."""
    shape = (3, 9, 11000)  # planes of 11000: staged (whole, or a chunk at a time on a host of 64 KiB of L2)
    x = make_spread_input(shape, "float32", 4)
    dy = make_input(shape, "float32", 5)
    w, b = _coefficients(shape[1])
    counts = np.array([shape[0] * shape[2]], F32)

    def run(soc):
        mean, invstd = normkern.batch_norm_stats(x, 1e-5, soc=soc)
        sums = normkern.batch_norm_backward_reduce(dy, x, mean, invstd, w, True, True, True, soc=soc)
        y = normkern.batch_norm_elemt(x, w, b, mean, invstd, 1e-5, soc=soc)
        dx = normkern.batch_norm_backward_elemt(dy, x, mean, invstd, w, sums[0], sums[1], counts, soc=soc)
        return mean, invstd, *sums, y, dx

    socs = [dataclasses.replace(HOST, vector_cores=k) for k in (1, 2, 8)]
    socs.append(dataclasses.replace(HOST, name="small L2", ub_bytes=64 << 10, ub_raw_bytes=64 << 10))
    assert not tiling.plan_batch_norm_stats(shape, soc=socs[-1]).staged
    want = run(HOST)
    for soc in socs:
        for count in sorted({1, normkern.get_num_threads()}):
            threads(count, exact=True)  # every op on that many threads, whatever its size
            assert all(_same(g, s) for g, s in zip(run(soc), want, strict=True)), (soc.name, count)


def test_the_elementwise_plans_give_the_templates_bits():
    """No element depends on another: the host's ``channels`` plans and the template model's flat ranges agree."""
    shape = (4, 6, 5, 7)
    x, dy = make_input(shape, "float16", 1), make_input(shape, "float16", 2)
    w, b = _coefficients(6)
    mean, invstd = normkern.batch_norm_stats(x, 1e-5, soc="host")
    counts = np.array([4 * 35], F32)
    for strategy in (None, "elementwise"):
        got = (normkern.batch_norm_elemt(x, w, b, mean, invstd, 1e-5, soc="host", strategy=strategy),
               normkern.batch_norm_backward_elemt(dy, x, mean, invstd, w, b, mean, counts, soc="host",
                                                  strategy=strategy))
        if strategy is None:
            want = got
        assert all(_same(g, s) for g, s in zip(got, want, strict=True))


def test_check_determinism_says_deterministic():
    x = make_input((4, 3, 50), "float32", 3)
    dy = make_input((4, 3, 50), "float32", 4)
    mean, invstd = normkern.batch_norm_stats(x, 1e-5, soc="host")
    for op, kwargs in (("batch_norm_stats", dict(input=x, eps=1e-5)),
                       ("batch_norm_backward_reduce", dict(grad_out=dy, input=x, mean=mean, invstd=invstd, weight=None,
                                                           input_g=True, weight_g=True, bias_g=True))):
        report = normkern.check_determinism(op, kwargs, runs=3, socs=["host"])
        assert report.deterministic, op
