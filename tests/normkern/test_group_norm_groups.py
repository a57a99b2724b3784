"""GroupNormBackward's host plan of normkern's own, ``groups``: the host's first choice, refused on the NPUs (their
plans unchanged), kernel == simulator bit for bit (the generic cases of test_group_norm_backward run it too), close to
float64 and to PyTorch's ``native_group_norm_backward``, the same bits on 1, 2 and 8 cores and at 1 and 2 threads,
every output mask, and ``check_determinism``."""

import dataclasses

import numpy as np
import pytest

import normkern
import tiling

from .test_group_norm_backward import assert_close_to_reference, make_problem, run_both

HOST = tiling.get_soc("host")
#: (N, C, HxW, group): 7x7 and 14x14 rows (a masked tail), rows of whole lane steps, a row of two segments, one
#: channel a group, one group.
SHAPES = [(3, 64, 49, 32), (2, 32, 196, 8), (4, 8, 64, 2), (1, 4, 20000, 2), (3, 6, 30, 6), (2, 5, 17, 1)]


def _same(a, b) -> bool:
    return np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


def test_the_host_plans_groups_and_the_npus_refuse_it():
    plan = tiling.plan_group_norm_backward(8, 256, 3136, 32, "float32", "host")
    assert plan.strategy is tiling.GroupNormBackwardStrategy.GROUPS and plan.workspace.user_bytes == 0
    assert plan.core_split.total == 32 and tiling.Plan.from_json(plan.to_json()) == plan
    assert plan.tree.describe() == "lanes64:pairwise/segments1:sequential/batches8:sequential"
    for soc in ("Ascend910B2", "Ascend950"):
        assert tiling.plan_group_norm_backward(8, 256, 3136, 32, "float32", soc).strategy.value in ("cann", "arch35")
        with pytest.raises(tiling.TilingError, match="normkern's own CPU plan"):
            tiling.plan_group_norm_backward(8, 256, 3136, 32, "float32", soc, "groups")


@pytest.mark.parametrize("dtype, out_dtype", [("float32", None), ("float16", None), ("bfloat16", None),
                                              ("float16", "float32"), ("bfloat16", "float32")])
@pytest.mark.parametrize("n, c, hxw, group", SHAPES)
def test_kernel_equals_simulator_and_stays_near_float64(n, c, hxw, group, dtype, out_dtype):
    for spread in (False, True):
        plan, inputs, got, expected = run_both(n, c, hxw, group, dtype, "host", seed=n + c + hxw, out_dtype=out_dtype,
                                               spread=spread)
        assert plan.strategy.value == "groups"
        for name, a, b in zip(("grad_input", "grad_gamma", "grad_beta"), got, expected, strict=True):
            assert a.dtype == b.dtype and _same(a, b), (name, spread)
        if not spread:
            assert_close_to_reference(inputs, got, n, c, hxw, group)


def test_close_to_pytorch():
    torch = pytest.importorskip("torch")
    n, c, hxw, group = 4, 64, 49, 8
    dy, x, mean, rstd, gamma = make_problem(n, c, hxw, group, "float32", seed=3)
    got = normkern.group_norm_backward(dy, x, mean, rstd, gamma, n, c, hxw, group, soc="host")
    want = torch.ops.aten.native_group_norm_backward(
        *(torch.from_numpy(t).double() for t in (dy, x, mean.reshape(n, group), rstd.reshape(n, group), gamma)),
        n, c, hxw, group, [True, True, True])
    for a, b in zip(got, want, strict=True):
        b = b.numpy()
        assert np.abs(a - b).max() <= 2e-6 * np.abs(b).max()


def test_the_bits_are_the_same_on_every_split_and_thread_count(threads):
    """Cores own whole groups and sum the batch in order: 1, 2 or 8 cores, 1 or 2 threads, one answer."""
    n, c, hxw, group = 3, 24, 300, 6
    dy, x, mean, rstd, gamma = make_problem(n, c, hxw, group, "float32", seed=5, spread=True)
    want = normkern.group_norm_backward(dy, x, mean, rstd, gamma, n, c, hxw, group, soc="host")
    for cores in (1, 2, 8):
        soc = dataclasses.replace(HOST, vector_cores=cores)
        for count in sorted({1, normkern.get_num_threads()}):
            threads(count, exact=True)
            got = normkern.group_norm_backward(dy, x, mean, rstd, gamma, n, c, hxw, group, soc=soc)
            assert all(_same(a, b) for a, b in zip(got, want, strict=True)), (cores, count)


def test_every_output_mask_gives_the_same_outputs():
    n, c, hxw, group = 2, 8, 49, 4
    dy, x, mean, rstd, gamma = make_problem(n, c, hxw, group, "float16", seed=7)
    full = normkern.group_norm_backward(dy, x, mean, rstd, gamma, n, c, hxw, group, soc="host")
    for mask in ((True, False, False), (False, True, False), (False, False, True), (False, True, True)):
        got = normkern.group_norm_backward(dy, x, mean, rstd, gamma, n, c, hxw, group, mask, soc="host")
        for want, value, asked in zip(full, got, mask, strict=True):
            assert (value is None) if not asked else _same(value, want)
    none = normkern.group_norm_backward(dy, x, mean, rstd, None, n, c, hxw, group, soc="host")
    ones = normkern.group_norm_backward(dy, x, mean, rstd, np.ones(c, np.float16), n, c, hxw, group, soc="host")
    assert all(_same(a, b) for a, b in zip(none, ones, strict=True))


def test_check_determinism_says_deterministic():
    n, c, hxw, group = 3, 8, 20, 2
    dy, x, mean, rstd, gamma = make_problem(n, c, hxw, group, "float32", seed=9)
    report = normkern.check_determinism("group_norm_backward", dict(
        grad_out=dy, input=x, mean=mean, rstd=rstd, gamma=gamma, N=n, C=c, HxW=hxw, group=group), runs=3,
        socs=["host"])
    assert report.deterministic
