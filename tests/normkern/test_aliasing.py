"""Outputs given as the very arrays of inputs (in-place backward, grad_weight into weight) give the
bits of separate outputs: nothing an op still reads is written first."""

import numpy as np
import pytest

import normkern

SHAPE = (4, 8, 5, 5)


def _bits(results):
    return [None if r is None else np.ascontiguousarray(r).view(np.uint8).copy() for r in results]


def _fbnb_inputs(shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    c = shape[1]
    weight = rng.uniform(0.5, 2, c).astype(np.float32)
    mean = rng.standard_normal(c).astype(np.float32)
    spread = rng.uniform(0.5, 2, c).astype(np.float32)
    return dy, x, weight, mean, spread


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("target", ["grad_input=grad_out", "grad_input=input", "grad_weight=weight",
                                    "grad_weight=mean", "grad_bias=invstd", "grad_bias=weight"])
@pytest.mark.parametrize("soc, shape", [("Ascend910B2", SHAPE), ("host", SHAPE),
                                        ("Ascend910B2", (32, 2, 56, 56))])  # full load; A2 cross-core groups
def test_fast_batch_norm_backward_outputs_may_be_its_inputs(training, target, soc, shape):
    dy, x, weight, mean, spread = _fbnb_inputs(shape)
    expected = _bits(normkern.fast_batch_norm_backward(dy, x, weight, mean, spread, mean, spread, training, 1e-5,
                                                       soc=soc))
    dy, x, weight, mean, spread = (a.copy() for a in (dy, x, weight, mean, spread))
    c = shape[1]
    outs = {"grad_input": np.empty(shape, np.float32), "grad_weight": np.empty(c, np.float32),
            "grad_bias": np.empty(c, np.float32)}
    name, source = target.split("=")
    outs[name] = {"grad_out": dy, "input": x, "weight": weight, "mean": mean, "invstd": spread}[source]
    got = normkern.fast_batch_norm_backward(dy, x, weight, mean, spread, mean, spread, training, 1e-5, soc=soc,
                                            out=(outs["grad_input"], outs["grad_weight"], outs["grad_bias"]))
    assert all(np.array_equal(a, b) for a, b in zip(_bits(got), expected, strict=True)), target


@pytest.mark.parametrize("target", ["grad_input=grad_out", "grad_input=input", "grad_gamma=gamma",
                                    "grad_beta=gamma"])
@pytest.mark.parametrize("strategy", [None, "atomic"])
def test_group_norm_backward_outputs_may_be_its_inputs(target, strategy):
    n, c, hw, g = SHAPE[0], SHAPE[1], SHAPE[2] * SHAPE[3], 2
    rng = np.random.default_rng(1)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    dy = rng.standard_normal(SHAPE).astype(np.float32)
    mean = rng.standard_normal(n * g).astype(np.float32)
    rstd = rng.uniform(0.5, 2, n * g).astype(np.float32)
    gamma = rng.uniform(0.5, 2, c).astype(np.float32)
    seed = 3 if strategy else None
    expected = _bits(normkern.group_norm_backward(dy, x, mean, rstd, gamma, n, c, hw, g, strategy=strategy,
                                                  arrival_seed=seed))
    dy, x, gamma = dy.copy(), x.copy(), gamma.copy()
    outs = {"grad_input": np.empty(SHAPE, np.float32), "grad_gamma": np.empty(c, np.float32),
            "grad_beta": np.empty(c, np.float32)}
    name, source = target.split("=")
    outs[name] = {"grad_out": dy, "input": x, "gamma": gamma}[source]
    got = normkern.group_norm_backward(dy, x, mean, rstd, gamma, n, c, hw, g, strategy=strategy, arrival_seed=seed,
                                       out=(outs["grad_input"], outs["grad_gamma"], outs["grad_beta"]))
    assert all(np.array_equal(a, b) for a, b in zip(_bits(got), expected, strict=True)), target


def _shifted_pair(shape):
    """Two arrays of ``shape`` over one buffer, the second one element after the first."""
    size = int(np.prod(shape))
    buf = np.random.default_rng(2).standard_normal(size + 1).astype(np.float32)
    return buf, buf[1:].reshape(shape), buf[:-1].reshape(shape)


def test_a_partly_overlapping_output_is_refused_before_anything_is_written():
    _, x, weight, mean, spread = _fbnb_inputs(SHAPE)
    buf, dy, shifted = _shifted_pair(SHAPE)
    before = buf.copy()
    c = SHAPE[1]
    with pytest.raises(normkern.InvalidParameterError) as info:
        normkern.fast_batch_norm_backward(dy, x, weight, mean, spread, mean, spread, True, 1e-5,
                                          out=(shifted, np.empty(c, np.float32), np.empty(c, np.float32)))
    assert info.value.status == 161002 and "gradInput" in str(info.value) and "gradOut" in str(info.value)
    np.testing.assert_array_equal(buf, before)
    same = np.empty(c, np.float32)
    with pytest.raises(normkern.InvalidParameterError, match="gradWeight must not share memory with gradBias"):
        normkern.fast_batch_norm_backward(dy, x, weight, mean, spread, mean, spread, True, 1e-5,
                                          out=(np.empty(SHAPE, np.float32), same, same))
    status, _, _ = normkern.aclnn.aclnnFastBatchNormBackwardGetWorkspaceSize(
        dy, x, weight, mean, spread, mean, spread, True, 1e-5, (True, True, True), 0, shifted,
        np.empty(c, np.float32), np.empty(c, np.float32))
    assert status == 161002


def test_group_norm_refuses_a_partly_overlapping_output():
    n, c, hw, g = SHAPE[0], SHAPE[1], SHAPE[2] * SHAPE[3], 2
    rng = np.random.default_rng(1)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    buf, dy, shifted = _shifted_pair(SHAPE)
    before = buf.copy()
    mean = rng.standard_normal(n * g).astype(np.float32)
    rstd = rng.uniform(0.5, 2, n * g).astype(np.float32)
    with pytest.raises(normkern.InvalidParameterError) as info:
        normkern.group_norm_backward(dy, x, mean, rstd, None, n, c, hw, g,
                                     out=(shifted, np.empty(c, np.float32), np.empty(c, np.float32)))
    assert info.value.status == 161002 and "gradInput" in str(info.value)
    np.testing.assert_array_equal(buf, before)


def test_statistics_ops_refuse_outputs_in_their_inputs():
    x = np.random.default_rng(3).standard_normal((4, 3, 5)).astype(np.float32)
    view = x.reshape(-1)[:3]  # a (C,) output inside the input it reads
    with pytest.raises(normkern.InvalidParameterError, match="mean must be input itself") as info:
        normkern.batch_norm_stats(x, 1e-5, out=(view, np.empty(3, np.float32)))
    assert info.value.status == 161002
    mean = np.random.default_rng(4).standard_normal((2, 3)).astype(np.float32)
    invstd = np.ones((2, 3), np.float32)
    counts = np.array([5.0, 7.0], np.float32)
    with pytest.raises(normkern.InvalidParameterError, match="meanAll must be mean itself"):
        normkern.batch_norm_gather_stats_with_counts(x, mean, invstd, None, None, 0.1, 1e-5, counts,
                                                     out=(mean[0], np.empty(3, np.float32)))
    shared = np.zeros(3, np.float32)
    with pytest.raises(normkern.InvalidParameterError, match="meanAll must not share memory with runningMean"):
        normkern.batch_norm_gather_stats_with_counts(x, mean, invstd, shared, np.ones(3, np.float32), 0.1, 1e-5,
                                                     counts, out=(shared, np.empty(3, np.float32)))


def test_a_workspace_over_an_op_tensor_is_refused_before_the_run():
    x = np.random.default_rng(5).standard_normal((4, 3, 5)).astype(np.float32)
    invstd = np.empty(3, np.float32)
    status, size, executor = normkern.aclnn.aclnnBatchNormStatsGetWorkspaceSize(x, 1e-5, np.empty(3, np.float32),
                                                                                invstd)
    assert status == 0 and size > 0
    arena = np.zeros(size + 12, np.uint8)
    mean = arena[size - 4:size + 8].view(np.float32)  # its first element lies in the workspace's last bytes
    status, _, executor = normkern.aclnn.aclnnBatchNormStatsGetWorkspaceSize(x, 1e-5, mean, invstd)
    assert status == 0
    assert normkern.aclnn.aclnnBatchNormStats(arena[:size], size, executor) == 161002
    assert "must not share memory with mean" in normkern.aclnn.aclGetRecentErrMsg()
    assert not arena.any()  # nothing written
    apart = np.zeros(size, np.uint8)
    assert normkern.aclnn.aclnnBatchNormStats(apart, size, executor) == 0
    np.testing.assert_allclose(mean, x.mean(axis=(0, 2)), rtol=1e-5)
