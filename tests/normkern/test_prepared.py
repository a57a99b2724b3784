"""Prepared calls (``normkern.prepare``) and repeatable aclnn executors: checked once, then run on new arrays of
the same shapes and dtypes; their results are the plan simulator's on those arrays, bit for bit."""

import numpy as np
import pytest

import normkern
import tiling
from normkern import aclnn
from normkern import registry as _registry
from normkern.examples import example_inputs

RECORDS = _registry.records()


def _example(record, dtype="float32", seed=0):
    shape = (6, 4) if record.shape_ranks == (2, 2) else (3, 4, 5)
    options = {option.dest: option.kwargs.get("default", True) for option in record.options}
    return example_inputs(record.name, shape, dtype, seed=seed, **options)


def _copy(kw):
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kw.items()}


def _same_bits(got, want):
    return np.array_equal(np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8))


def _results(record, results, kw):
    """Every output of a call (as ``OpRecord.call`` lists them), the updated inputs of ``kw`` included."""
    if len(record.outputs) == 1:
        results = (results,)
    return (*results, *(kw.get(name) for name in record.updated))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.name)
def test_a_prepared_call_runs_new_arrays_as_the_simulator_does(record, dtype):
    first, second = _example(record, dtype, seed=0), _example(record, dtype, seed=1)
    prepared = normkern.prepare(record.name, **first, soc="host", arrival_seed=0)
    plan = prepared.plan
    pristine = _copy(second)
    outputs = _results(record, prepared(**second), second)
    simulated = record.simulate(plan, pristine)
    for got, want in zip(outputs, simulated, strict=True):
        assert _same_bits(got, want)
    # and they are not the first arrays' results: the prepared call read the new ones
    first_outputs = record.simulate(plan, _copy(first))
    assert any(not _same_bits(a, b) for a, b in zip(outputs, first_outputs, strict=True) if a is not None)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.name)
def test_positional_and_keyword_calls_agree(record):
    kw = _example(record)
    prepared = normkern.prepare(record.name, **kw, soc="host", arrival_seed=0)
    positional = [kw.get(name, spec[2]) for name, spec in zip(prepared.parameters, prepared._specs, strict=True)]
    a = _results(record, prepared(*[_copy({"v": v})["v"] for v in positional]), {})
    b = _results(record, prepared(**_copy(kw)), {})
    for x, y in zip(a, b, strict=True):
        assert (x is None and y is None) or _same_bits(x, y)


def _stats_call():
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    return x, normkern.prepare("batch_norm_stats", x, 1e-5, soc="host")


@pytest.mark.parametrize("args, param, rule", [
    ((np.zeros((2, 3, 5), np.float32), 1e-5), "input", r"must be a float32 array of shape \(2, 3, 4\)"),
    ((np.zeros((2, 3, 4), np.float16), 1e-5), "input", r"must be a float32 array of shape \(2, 3, 4\)"),
    ((np.zeros((2, 3, 4), np.float32), 1e-3), "eps", r"must be 1e-05 \(the prepared call's\), got 0.001"),
    ((None, 1e-5), "input", r"must be a float32 array of shape \(2, 3, 4\) \(the prepared call's\), got None"),
])
def test_a_call_that_does_not_match_the_binding_is_refused(args, param, rule):
    _, prepared = _stats_call()
    with pytest.raises(normkern.InvalidParameterError, match=rf"\[batch_norm_stats\] {param} {rule}"):
        prepared(*args)


def test_the_common_keywords_are_fixed_when_prepared():
    x, prepared = _stats_call()
    with pytest.raises(normkern.InvalidParameterError, match=r"soc was fixed when the call was prepared"):
        prepared(x, 1e-5, soc="Ascend910B2")
    with normkern.set_default_soc("Ascend910B2"):
        prepared(x, 1e-5)
    assert prepared.plan.soc.name == "host"


def test_out_arrays_are_checked_and_written_and_a_refused_call_writes_nothing():
    x, _ = _stats_call()
    mean, invstd = np.empty(3, np.float32), np.empty(3, np.float32)
    prepared = normkern.prepare("batch_norm_stats", x, 1e-5, soc="host", out=(mean, invstd))
    new_mean, new_invstd = np.full(3, 7, np.float32), np.full(3, 7, np.float32)
    got = prepared(x * 2, 1e-5, out=(new_mean, new_invstd))
    assert got[0] is new_mean and got[1] is new_invstd
    want = normkern.batch_norm_stats(x * 2, 1e-5, soc="host")
    assert _same_bits(new_mean, want[0]) and _same_bits(new_invstd, want[1])
    untouched = np.full(3, 7, np.float32)
    with pytest.raises(normkern.InvalidParameterError, match=r"out\[1\] must be a float32 array of shape \(3,\)"):
        prepared(x, 1e-5, out=(untouched, np.empty(4, np.float32)))
    assert (untouched == 7).all()
    shared = np.empty(6, np.float32)  # the op's own overlap rule, on the new arrays
    with pytest.raises(normkern.InvalidParameterError, match=r"mean must not share memory with invstd"):
        prepared(x, 1e-5, out=(shared[:3], shared[2:5]))


def test_arrays_bound_as_one_must_stay_one():
    """grad_out given as input too (one array in two slots): a call must give one array for both."""
    kw = _example(_registry.get("fast_batch_norm_backward"))
    x = kw["input"]
    prepared = normkern.prepare("fast_batch_norm_backward", **(kw | {"grad_out": x}), soc="host")
    other = x.copy()
    call = kw | {"grad_out": other}
    with pytest.raises(normkern.InvalidParameterError, match=r"input must be the same array as grad_out"):
        prepared(**call)
    prepared(**(kw | {"grad_out": other, "input": other}))


def test_prepare_checks_like_the_op():
    with pytest.raises(normkern.InvalidParameterError, match=r"\[batch_norm_stats\] input must have rank 2 to 8"):
        normkern.prepare("batch_norm_stats", np.zeros(5, np.float32), 1e-5)
    with pytest.raises(normkern.InvalidParameterError, match=r"\[normkern.prepare\] op must be one of"):
        normkern.prepare("layer_norm", np.zeros(5, np.float32))
    with pytest.raises(normkern.InvalidParameterError, match=r"\[batch_norm_stats\] arguments must be the op's own"):
        normkern.prepare("batch_norm_stats", np.zeros((2, 3), np.float32), 1e-5, bogus=1)


# --- repeatable aclnn executors ---------------------------------------------------------------------------

def _gather_executor():
    """A BatchNormGatherStatsWithCounts executor on the host plan: inputs (input, mean, invstd, runningMean,
    runningVar, counts), outputs (meanAll, invstdAll)."""
    rng = np.random.default_rng(3)
    arrays = {"input": np.zeros((4, 3, 2), np.float32), "mean": rng.standard_normal((2, 3)).astype(np.float32),
              "invstd": (rng.random((2, 3)) + 0.5).astype(np.float32),
              "running_mean": np.zeros(3, np.float32), "running_var": np.ones(3, np.float32),
              "counts": np.array([5, 7], np.float32), "mean_all": np.empty(3, np.float32),
              "invstd_all": np.empty(3, np.float32)}
    status, size, executor = aclnn.aclnnBatchNormGatherStatsWithCountsGetWorkspaceSize(
        arrays["input"], arrays["mean"], arrays["invstd"], arrays["running_mean"], arrays["running_var"], 0.1, 1e-5,
        arrays["counts"], arrays["mean_all"], arrays["invstd_all"], soc="host")
    assert status == 0
    return arrays, size, executor


def _run(executor, size):
    return aclnn.aclnnBatchNormGatherStatsWithCounts(np.zeros(size, np.uint8), size, executor)


def test_a_one_shot_executor_runs_once():
    _, size, executor = _gather_executor()
    assert _run(executor, size) == 0
    assert _run(executor, size) == aclnn.ACLNN_ERR_PARAM_INVALID
    assert "must not have run already (call aclSetAclOpExecutorRepeatable" in aclnn.aclGetRecentErrMsg()


def test_a_repeatable_executor_runs_on_new_tensors_until_destroyed():
    arrays, size, executor = _gather_executor()
    assert aclnn.aclSetAclOpExecutorRepeatable(executor) == 0
    assert _run(executor, size) == 0 and _run(executor, size) == 0
    new_mean = arrays["mean"] + np.float32(1.5)
    new_out = np.empty(3, np.float32)
    assert aclnn.aclSetInputTensorAddr(executor, 1, arrays["mean"], new_mean) == 0
    assert aclnn.aclSetOutputTensorAddr(executor, 0, arrays["mean_all"], new_out) == 0
    assert _run(executor, size) == 0
    want, _ = normkern.batch_norm_gather_stats_with_counts(arrays["input"], new_mean, arrays["invstd"], None, None,
                                                           0.1, 1e-5, arrays["counts"], soc="host")
    assert _same_bits(new_out, want)
    assert aclnn.aclDestroyAclOpExecutor(executor) == 0
    assert _run(executor, size) == aclnn.ACLNN_ERR_PARAM_INVALID
    assert "executor must not be destroyed" in aclnn.aclGetRecentErrMsg()


@pytest.mark.parametrize("call, status, message", [
    (lambda e, a: aclnn.aclSetInputTensorAddr(None, 0, a["input"], a["input"]), 561103,
     "[aclSetInputTensorAddr] executor must not be None (null pointer)"),
    (lambda e, a: aclnn.aclSetInputTensorAddr(e, 0, None, a["input"]), 561103,
     "[aclSetInputTensorAddr] tensor must not be None (null pointer)"),
    (lambda e, a: aclnn.aclSetInputTensorAddr(e, 6, a["counts"], a["counts"]), 161002,
     "[aclSetInputTensorAddr] index must be in [0, 5], got 6"),
    (lambda e, a: aclnn.aclSetOutputTensorAddr(e, 0, a["mean"], a["mean_all"]), 161002,
     "[aclSetOutputTensorAddr] tensor must be the meanAll the first phase bound at index 0"),
    (lambda e, a: aclnn.aclSetInputTensorAddr(e, 1, a["mean"], np.zeros((2, 4), np.float32)), 161002,
     "[aclSetInputTensorAddr] addr must be a float32 array of shape (2, 3) (the mean it replaces)"),
    # the op's overlap rule: an output may not share memory with a statistic it reads
    (lambda e, a: aclnn.aclSetOutputTensorAddr(e, 1, a["invstd_all"], a["mean"][0]), 161002,
     "[batch_norm_gather_stats_with_counts] invstdAll must be mean itself (in place) or not share memory"),
])
def test_tensor_addresses_are_checked(call, status, message):
    arrays, _, executor = _gather_executor()
    assert aclnn.aclSetAclOpExecutorRepeatable(executor) == 0
    assert call(executor, arrays) == status
    assert aclnn.aclGetRecentErrMsg().startswith(message)


def test_only_a_repeatable_executor_takes_new_tensors():
    arrays, _, executor = _gather_executor()
    assert aclnn.aclSetInputTensorAddr(executor, 1, arrays["mean"], arrays["mean"].copy()) == 161002
    assert "executor must be repeatable (aclSetAclOpExecutorRepeatable)" in aclnn.aclGetRecentErrMsg()
    assert aclnn.aclSetAclOpExecutorRepeatable(None) == 561103


# -- the signature cache: an op's repeated calls run the Bound call of the first (``runtime.calls``) --


_LEAN_CASES = [(record, soc, strategy) for record in RECORDS
               for soc, strategy in (("host", None), ("Ascend910B2", None), ("Ascend910B2", "atomic"))
               if (strategy is None or strategy in {s.value for s in record.strategies})
               and tiling.support(record.name, tiling.get_soc(soc)).runs]


@pytest.mark.parametrize("record, soc, strategy", _LEAN_CASES,
                         ids=[f"{r.name}-{soc}-{strategy}" for r, soc, strategy in _LEAN_CASES])
def test_repeated_calls_run_as_prepared_calls_with_the_full_paths_bits(record, soc, strategy):
    record.signatures.clear()
    for seed in range(4):
        kw = _example(record, seed=seed)
        full = _copy(kw)
        want = _results(record, record.bind(**full, soc=soc, strategy=strategy, arrival_seed=7).run(), full)
        lean = _copy(kw)
        got = _results(record, record.function(**lean, soc=soc, strategy=strategy, arrival_seed=7), lean)
        assert all((g is None and w is None) or _same_bits(g, w) for g, w in zip(got, want, strict=True))
        assert len(record.signatures) == 1  # bound at the first call, then reused


def test_a_repeated_call_is_checked_for_overlaps_and_a_refused_one_writes_nothing():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    for _ in range(3):
        normkern.batch_norm_stats(x, 1e-5, out=(np.empty(3, np.float32), np.empty(3, np.float32)), soc="host")
    assert len(_registry.get("batch_norm_stats").signatures)
    before = x.copy()
    inside = x.reshape(-1)[:3]  # the same shape, dtype and strides as a fresh output: the same call signature
    with pytest.raises(normkern.InvalidParameterError, match=r"mean must be input itself \(in place\) or not "
                                                             "share memory with it"):
        normkern.batch_norm_stats(x, 1e-5, out=(inside, np.empty(3, np.float32)), soc="host")
    assert np.array_equal(x, before)


def test_a_call_that_differs_in_layout_setting_or_value_takes_the_full_path():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 6, 5)).astype(np.float32)
    op, record = normkern.batch_norm_stats, _registry.get("batch_norm_stats")
    record.signatures.clear()
    for _ in range(2):
        op(x, 1e-5, soc="host")
    assert len(record.signatures) == 1
    with normkern.set_default_soc("Ascend910B2"):
        a2 = [op(x, 1e-5), op(x, 1e-5)]
    host = op(x, 1e-5, soc="host")
    assert len(record.signatures) == 2  # one per (signature, default SoC)
    want_a2 = record.bind(x, 1e-5, soc="Ascend910B2").run()
    want_host = record.bind(x, 1e-5, soc="host").run()
    assert all(_same_bits(g, w) for got in a2 for g, w in zip(got, want_a2, strict=True))
    assert all(_same_bits(g, w) for g, w in zip(host, want_host, strict=True))
    strided = x[:, ::2]
    for _ in range(3):
        got = op(strided, 1e-5, soc="host")
    assert all(_same_bits(g, w) for g, w in zip(got, record.bind(strided, 1e-5, soc="host").run(), strict=True))
    read_only = np.empty(3, np.float32)
    read_only.flags.writeable = False
    with pytest.raises(normkern.InvalidParameterError, match="mean must be writeable"):
        op(strided, 1e-5, soc="host", out=(read_only, np.empty(3, np.float32)))


@pytest.mark.parametrize("record", RECORDS, ids=[r.name for r in RECORDS])
def test_the_signature_cache_keeps_no_array_of_a_call_alive(record):
    """A kept Bound holds the plan and the op's run, never the arrays of the call that bound it (nor does a
    worker thread of the launch keep them while it waits)."""
    import gc
    import weakref

    record.signatures.clear()
    kw = _example(record)
    refs = [weakref.ref(v) for v in kw.values() if isinstance(v, np.ndarray)]
    for _ in range(2):
        record.function(**kw, soc="host")
    assert len(record.signatures) == 1 and refs
    del kw
    gc.collect()
    assert all(ref() is None for ref in refs)
