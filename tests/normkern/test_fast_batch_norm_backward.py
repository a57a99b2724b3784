"""FastBatchNormBackward: kernel == simulator bit for bit on every template, and both close to float64."""

import dataclasses

import numpy as np
import pytest

import normkern
import tiling
from normkern.ops.fast_batch_norm_backward import (
    fast_batch_norm_backward_reference,
    fused_views,
    simulate,
    statistics,
    unfused_view,
)
from tests.tolerances import assert_close

from .conftest import DTYPES, bits, make_input

EPS = 1e-5
#: 5 cores and an 8 KiB UB: float32 bUbBlock 504 (half 496), full load only up to bAlign ~400.
SMALL = dataclasses.replace(tiling.get_soc("Ascend910B2"), name="small", arch="host", vector_cores=5,
                            ub_bytes=8192, ub_raw_bytes=8192, system_workspace_bytes=4096)
#: (shape, the template SMALL picks, why the shape is there): the A2 templates, so with the host model's
#: one-plane passes off (``a2_templates``)
CASES = [
    ((5, 7, 63), "full_load", "fold of 320 around 64 * 2**k"),
    ((5, 7, 64), "full_load", "b1 = 64, no padding"),
    ((5, 7, 65), "full_load", "b1Align pads every plane"),
    ((6, 3, 10), "full_load", "fold of 96 (64 + a tail)"),
    ((1, 3, 8), "full_load", "fold shorter than 64 lanes"),
    ((6, 1, 40), "full_load", "A == 1 folds N into HW"),
    ((2, 10, 495), "split_load", "split HW, one chunk short of the bUbBlock"),
    ((2, 10, 504), "split_load", "split HW, exactly bUbBlock"),
    ((2, 10, 505), "split_load", "split HW, one element into a second chunk"),
    ((2, 10, 1009), "split_load", "split HW, three chunks"),
    ((29, 10, 30), "split_load", "split N, two passes of 15 planes - 1"),
    ((30, 10, 30), "split_load", "split N, exactly two passes"),
    ((31, 10, 30), "split_load", "split N, two passes + 1 plane"),
    ((46, 10, 30), "split_load", "split N, three passes + 1 plane"),
    ((100, 10, 30), "split_load", "split N, six passes + 10 planes: added 4, 2 and 1 at a time"),
    ((2, 10, 2017), "split_load", "split HW, four whole chunks + 1 element: added 4 at a time, then 1"),
    ((4, 7, 5000), "split_load_cross_core", "whole channels, then groups of 2 splitting HW"),
    ((7, 6, 3025), "split_load_cross_core", "groups of 5 splitting HW, a member starting on a tail chunk"),
    ((400, 8, 50), "split_load_cross_core", "whole channels, pairs (an odd core idles), a group of 5"),
    ((400, 3, 50), "split_load_cross_core", "pairs then a group, no whole channels"),
    ((400, 4, 50), "split_load_cross_core", "pairs then groups of 2"),
    ((1001, 3, 2, 2), "split_load", "N > 1000, HW <= 32: the op_api transpose"),
]


@pytest.fixture
def a2_templates(monkeypatch):
    """SMALL is a host-arch SoC with a small UB, to run the A2 templates at small shapes: the host model's
    one-plane passes (``HOST_PLANE_PASS_MAX``) are turned off while a test plans on it."""
    monkeypatch.setattr(tiling.fast_batch_norm_backward, "HOST_PLANE_PASS_MAX", 0)
    monkeypatch.setattr(tiling.fast_batch_norm_backward, "HOST_OWN_PLAN", False)
    tiling.fast_batch_norm_backward._plan_cached.cache_clear()
    yield
    tiling.fast_batch_norm_backward._plan_cached.cache_clear()


def make_problem(shape, dtype, seed=0):
    """grad_out, input and float32 weight and statistics as a training step would produce them."""
    rng = np.random.default_rng(seed + 10_000)  # not make_input's stream: dy must not be a multiple of x - mean
    x = make_input(shape, dtype, seed)
    dy = rng.standard_normal(shape).astype(DTYPES[dtype])
    c = shape[1]
    axes = (0, *range(2, len(shape)))
    x64 = x.astype(np.float64)
    save_mean = x64.mean(axis=axes).astype(np.float32)
    var = x64.var(axis=axes)
    save_invstd = (1 / np.sqrt(var + EPS)).astype(np.float32)
    weight = rng.uniform(0.5, 1.5, c).astype(np.float32)
    running_mean = (save_mean + rng.uniform(-0.1, 0.1, c)).astype(np.float32)
    running_var = (var * rng.uniform(0.9, 1.1, c)).astype(np.float32)
    return dy, x, weight, running_mean, running_var, save_mean, save_invstd


def run_both(shape, dtype, soc, training, strategy=None, seed=0):
    """The op's outputs and the simulator's, for the same plan."""
    dy, x, w, rm, rv, sm, si = make_problem(shape, dtype, seed)
    got = normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, si, training, EPS, soc=soc, strategy=strategy)
    plan = tiling.plan_fast_batch_norm_backward(shape, dtype, soc, strategy, training=training, weight_dtype="float32")
    mean, scale, weight = statistics(plan, w, rm, rv, sm, si, EPS)
    dy3, x3 = fused_views(plan, dy, x)
    sim_dx, sim_gw, sim_gb = simulate(plan, dy3, x3, mean, scale, weight)
    expected = (unfused_view(plan, sim_dx.astype(x.dtype)), sim_gw, sim_gb)
    return plan, (dy, x, w, rm, rv, sm, si), got, expected


def assert_close_to_reference(inputs, got, training, dtype):
    """Each output against its largest magnitude; grad_input is rounded to the input dtype."""
    ref = fast_batch_norm_backward_reference(*inputs, training, EPS)
    for name, value, want in zip(("grad_input", "grad_weight", "grad_bias"), got, ref, strict=True):
        assert_close(value, want, name=name)


@pytest.mark.usefixtures("a2_templates")
@pytest.mark.parametrize("training", [True, False], ids=["train", "infer"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape, template, why", CASES, ids=[c[2] for c in CASES])
def test_kernel_equals_simulator_on_every_template(shape, template, why, dtype, training):
    plan, inputs, got, expected = run_both(shape, dtype, SMALL, training, seed=sum(shape))
    assert plan.strategy.value == template, plan
    for name, a, b in zip(("grad_input", "grad_weight", "grad_bias"), got, expected, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8)), (name, plan)
    assert_close_to_reference(inputs, got, training, dtype)


@pytest.mark.usefixtures("a2_templates")
@pytest.mark.parametrize("offset", [0, 3], ids=["own", "out+12B"])
@pytest.mark.parametrize("shape, template, why", CASES, ids=[c[2] for c in CASES])
def test_streamed_training_grad_input_gives_the_simulators_bits(shape, template, why, offset, monkeypatch):
    """float32 training dx written by streaming stores (taken from ``STREAM_MIN_BYTES`` and
    ``STREAM_MIN_ROW_BYTES``, here always): every template's rows, split-HW chunks and the partial
    lines at their ends, with grad_input ``offset`` elements into its buffer; nothing written outside."""
    from normkern.ops.fast_batch_norm_backward import api

    monkeypatch.setattr(api, "STREAM_MIN_BYTES", 0)
    monkeypatch.setattr(api, "STREAM_MIN_ROW_BYTES", 0)
    dy, x, w, rm, rv, sm, si = make_problem(shape, "float32", seed=sum(shape))
    buffer = np.full(x.size + offset + 16, np.nan, np.float32)
    gi = buffer[offset:offset + x.size].reshape(shape)
    out = (gi, np.empty(shape[1], np.float32), np.empty(shape[1], np.float32))
    normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, si, True, EPS, soc=SMALL, out=out)
    plan = tiling.plan_fast_batch_norm_backward(shape, "float32", SMALL, training=True, weight_dtype="float32")
    dy3, x3 = fused_views(plan, dy, x)
    sim_dx, sim_gw, sim_gb = simulate(plan, dy3, x3, *statistics(plan, w, rm, rv, sm, si, EPS))
    assert np.array_equal(bits(gi), bits(unfused_view(plan, sim_dx))), plan
    assert np.array_equal(bits(out[1]), bits(sim_gw)) and np.array_equal(bits(out[2]), bits(sim_gb))
    assert np.isnan(buffer[:offset]).all() and np.isnan(buffer[offset + x.size:]).all()


@pytest.mark.parametrize("soc", ["Ascend910B2", "Ascend910B4", "host"])
@pytest.mark.parametrize("shape", [(8, 64, 32, 32), (256, 64, 7, 7), (4, 100, 120, 120), (16, 30, 40, 40)],
                         ids=["full_load", "split_n", "cross_core_split_hw", "cross_core_pairs"])
def test_real_socs_match_simulator_and_reference(soc, shape):
    plan, inputs, got, expected = run_both(shape, "float32", soc, True, seed=3)
    for a, b in zip(got, expected, strict=True):
        assert np.array_equal(bits(a), bits(b)), plan
    assert_close_to_reference(inputs, got, True, "float32")


#: (shape, why): the host model's one-plane passes (``HOST_PLANE_PASS_MAX``) on the host SoC
PLANE_CASES = [
    ((8, 16, 7, 7), "7x7 planes, a 64-lane fold"),
    ((4, 8, 14, 14), "14x14 planes, b1Align pads"),
    ((3, 5, 28, 28), "28x28 planes, a fold of 784"),
    ((2, 3, 32, 32), "planes of 1024, the longest that go one a pass"),
    ((25, 3, 32, 32), "cross-core groups of one-plane passes"),
    ((1, 6, 1, 1), "planes of one element"),
]


#: (shape, why): the host's own ``planes`` plan
OWN_CASES = [
    ((8, 16, 7, 7), "7x7 planes, two sweeps of four"),
    ((7, 3, 14, 14), "a sweep of four and three planes one at a time"),
    ((3, 4, 20000), "planes cut into two segments of at most 16384"),
    ((6, 5), "rank 2: planes of one element"),
    ((1, 6, 1, 1), "one plane of one element"),
    ((5, 2, 3, 40), "rank 4, planes of 120"),
]


@pytest.mark.parametrize("training", [True, False], ids=["train", "infer"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape, why", OWN_CASES, ids=[c[1] for c in OWN_CASES])
def test_the_hosts_own_plan_equals_the_simulator(shape, why, dtype, training):
    plan, inputs, got, expected = run_both(shape, dtype, "host", training, seed=sum(shape))
    assert plan.strategy is tiling.FastBatchNormBackwardStrategy.PLANES and plan.deterministic, plan
    segments = -(-plan.b1 // 16384)
    assert plan.tree.describe() == f"planes{shape[0]}:sequential/lanes64:pairwise/segments{segments}:sequential"
    for name, a, b in zip(("grad_input", "grad_weight", "grad_bias"), got, expected, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8)), (name, plan)
    assert_close_to_reference(inputs, got, training, dtype)


def test_the_hosts_own_plan_gives_the_same_bits_on_any_split(threads):
    """Cores own whole channels: 1, 2 or 8 cores, one thread or all, one answer."""
    host = tiling.get_soc("host")
    dy, x, w, rm, rv, sm, si = make_problem((9, 11, 6, 6), "float32", seed=4)
    want = normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, si, True, EPS, soc="host")
    for cores in (1, 2, 8):
        soc = dataclasses.replace(host, vector_cores=cores)
        for count in sorted({1, normkern.get_num_threads()}):
            threads(count)
            got = normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, si, True, EPS, soc=soc)
            assert all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(got, want, strict=True))


@pytest.mark.usefixtures("host_templates")
@pytest.mark.parametrize("training", [True, False], ids=["train", "infer"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape, why", PLANE_CASES, ids=[c[1] for c in PLANE_CASES])
def test_host_plane_passes_equal_the_simulator(shape, why, dtype, training):
    plan, inputs, got, expected = run_both(shape, dtype, "host", training, seed=sum(shape))
    args = plan.kernel_args()
    assert args.split_hw == 1 and args.hw_blocks == 1 and args.fold_len == plan.b1_align, plan
    for name, a, b in zip(("grad_input", "grad_weight", "grad_bias"), got, expected, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8)), (name, plan)
    assert_close_to_reference(inputs, got, training, dtype)


def test_the_a2_plans_are_the_exact_tilings():
    assert tiling.plan_fast_batch_norm_backward((4, 100, 120, 120), "float32", "Ascend910B2").tiling_key == 40011
    assert tiling.plan_fast_batch_norm_backward((16, 30, 40, 40), "float32", "Ascend910B2").tiling_data[
        "morehalfChannel"] == 1


@pytest.mark.usefixtures("a2_templates")
@pytest.mark.parametrize("strategy", ["full_load", "split_load", "split_load_cross_core"])
def test_thread_count_does_not_change_a_bit(strategy, threads):
    shape = {"full_load": (5, 7, 63), "split_load": (31, 10, 30), "split_load_cross_core": (400, 8, 50)}[strategy]
    dy, x, w, rm, rv, sm, si = make_problem(shape, "float32")
    results = []
    for count in (1, 2):
        threads(count)
        results.append(normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, si, True, EPS, soc=SMALL))
    for a, b in zip(*results, strict=True):
        assert np.array_equal(bits(a), bits(b))


def test_the_plan_defines_the_bits():
    dy, x, w, rm, rv, sm, si = make_problem((16, 50, 40, 40), "float32", seed=4)
    a2 = normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, si, True, EPS, soc="Ascend910B2")
    host = normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, si, True, EPS, soc="host")
    assert not all(np.array_equal(bits(a), bits(b)) for a, b in zip(a2, host, strict=True))


@pytest.mark.usefixtures("a2_templates")
@pytest.mark.parametrize("mask", [(True, False, False), (False, True, True), (False, False, True),
                                  (True, True, False), (False, False, False)])
@pytest.mark.parametrize("training", [True, False])
def test_output_mask_returns_none_and_keeps_the_rest(mask, training):
    dy, x, w, rm, rv, sm, si = make_problem((400, 8, 50), "float16")
    full = normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, si, training, EPS, soc=SMALL)
    part = normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, si, training, EPS, mask, soc=SMALL)
    for whole, masked, wanted in zip(full, part, mask, strict=True):
        assert (masked is None) if not wanted else np.array_equal(whole.view(np.uint8), masked.view(np.uint8))


def test_missing_tensors_take_cann_fills():
    dy, x, _, _, _, _, _ = make_problem((6, 4, 9), "float32")
    ones, zeros = np.ones(4, np.float32), np.zeros(4, np.float32)
    for training in (True, False):
        filled = normkern.fast_batch_norm_backward(dy, x, ones, zeros, ones, zeros, ones, training, 0.0)
        missing = normkern.fast_batch_norm_backward(dy, x, None, None, None, None, None, training, 0.0)
        for a, b in zip(filled, missing, strict=True):
            assert np.array_equal(bits(a), bits(b))


def test_save_invstd_is_the_reciprocal_standard_deviation():
    """Doubling save_invstd doubles grad_weight exactly (a variance input would scale it by 1/sqrt(2))."""
    dy, x, w, rm, rv, sm, si = make_problem((8, 3, 20), "float32")
    _, gw1, _ = normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, si, True, EPS)
    _, gw2, _ = normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, (2 * si).astype(np.float32), True, EPS)
    assert np.array_equal(gw2, 2 * gw1)


def test_version_changes_nothing():
    dy, x, w, rm, rv, sm, si = make_problem((8, 3, 20), "float32")
    v0 = normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, si, True, EPS, version=0)
    v1 = normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, si, True, EPS, version=1)
    assert all(np.array_equal(bits(a), bits(b)) for a, b in zip(v0, v1, strict=True))


def test_inference_zero_root_gives_zero_scale_as_the_a2_kernel():
    """running_var + eps == 0: the A2 kernel's ``var == 0 ? 0 : 1 / var`` makes grad_input and grad_weight 0."""
    dy, x, w, rm, _, sm, si = make_problem((4, 2, 16), "float32")
    gi, gw, gb = normkern.fast_batch_norm_backward(dy, x, w, rm, np.zeros(2, np.float32), sm, si, False, 0.0)
    assert not gi.any() and not gw.any() and np.isfinite(gb).all()


@pytest.mark.parametrize("rank", range(2, 9))
def test_every_rank(rank):
    shape = (3, 4) + (2,) * (rank - 2)
    dy, x, w, rm, rv, sm, si = make_problem(shape, "float32")
    got = normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, si, True, EPS, soc="host")
    assert got[0].shape == shape
    assert_close_to_reference((dy, x, w, rm, rv, sm, si), got, True, "float32")


def test_non_contiguous_inputs_and_outputs():
    dy, x, w, rm, rv, sm, si = make_problem((6, 8, 10, 12), "bfloat16")
    expected = normkern.fast_batch_norm_backward(dy[:, ::2], x[:, ::2].copy(), w[::2], rm[::2], rv[::2], sm[::2],
                                                 si[::2], True, EPS)
    holder = np.full((6, 4, 10, 24), np.nan, x.dtype)
    gw = np.full(8, np.nan, np.float32)
    got = normkern.fast_batch_norm_backward(dy[:, ::2], x[:, ::2], w[::2], rm[::2], rv[::2], sm[::2], si[::2], True,
                                            EPS, out=(holder[..., ::2], gw[::2], np.empty(4, np.float16)))
    assert got[0].base is holder and np.array_equal(bits(holder[..., ::2].copy()), bits(expected[0]))
    assert np.isnan(holder[..., 1::2].astype(np.float32)).all() and np.isnan(gw[1::2]).all()
    assert np.array_equal(gw[::2], expected[1]) and got[2].dtype == np.float16
    assert np.array_equal(got[2], expected[2].astype(np.float16))


@pytest.mark.parametrize("shape", [(0, 3, 4), (2, 3, 0), (0, 3)])
def test_empty_input_gives_empty_grad_input_and_zero_sums(shape):
    x = np.zeros(shape, np.float32)
    gi, gw, gb = normkern.fast_batch_norm_backward(x, x, None, None, None, None, None, True, EPS)
    assert gi.shape == shape and np.array_equal(gw, np.zeros(3)) and np.array_equal(gb, np.zeros(3))


def test_mixed_precision_grads_take_the_weight_dtype():
    dy, x, w, rm, rv, sm, si = make_problem((4, 3, 50), "float16")
    gi, gw, gb = normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, si, True, EPS)
    assert gi.dtype == np.float16 and gw.dtype == gb.dtype == np.float32
    half = [t.astype(np.float16) for t in (w, rm, rv, sm, si)]
    gi2, gw2, gb2 = normkern.fast_batch_norm_backward(dy, x, *half, True, EPS)
    assert gw2.dtype == gb2.dtype == np.float16


# -- PyTorch, where installed: native_batch_norm_backward under PyTorch's and torch_npu's tolerances --

#: The op-plugin BatchNorm case table (PyTorch notes 4b) with N cut where the tensor would be large.
OP_PLUGIN_SHAPES = [(256, 672), (58, 28, 16), (32, 672, 7, 7), (16, 58, 28, 28), (2, 512, 4, 28, 28)]


def _npu_rtol_equal(got, want, prec):
    """torch_npu's assertRtolEqual: fails only if more than a ``prec`` fraction fails both checks."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    diff = np.abs(got - want)
    rtol_bad = (diff / (np.maximum(np.abs(got), np.abs(want)) + 1e-9) > prec).sum()
    atol_bad = (diff > prec).sum()
    return not (rtol_bad > got.size * prec and atol_bad > got.size * prec)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", OP_PLUGIN_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_torch_native_batch_norm_backward(shape, training, dtype):
    torch = pytest.importorskip("torch")
    dy, x, w, rm, rv, sm, si = make_problem(shape, dtype, seed=7)

    def tt(a):
        if a.dtype == DTYPES["bfloat16"]:
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(a)

    want = torch.ops.aten.native_batch_norm_backward(tt(dy), tt(x), *map(torch.from_numpy, (w, rm, rv, sm, si)),
                                                     training, EPS, [True, True, True])
    got = normkern.fast_batch_norm_backward(dy, x, w, rm, rv, sm, si, training, EPS)
    reduced = x.size // x.shape[1]
    for name, g, t in zip(("grad_input", "grad_weight", "grad_bias"), got, want, strict=True):
        # PyTorch's defaults for the output's dtype; sums of `reduced` terms get an atol growing with sqrt(n)
        extra = {} if name == "grad_input" or g.dtype != np.float32 else {"rtol": 1.3e-6, "atol": 1e-5 * reduced ** 0.5}
        torch.testing.assert_close(tt(g), t, **extra)
        # op-plugin test_batchnorm_backward.py: prec 1e-4 (half 1e-3), grad_weight 1e-2
        prec = 1e-2 if name == "grad_weight" else 1e-4 if g.dtype == np.float32 else 1e-3
        assert _npu_rtol_equal(g.astype(np.float32), t.float().numpy(), prec), name
