"""Reliability: every bad input a normkern error (or an aclnn status), executors bound to their op, settings and
the error slot per thread, and 8 threads of mixed calls bitwise equal to serial runs."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import normkern
from normkern import aclnn
from normkern import registry as _registry
from normkern.examples import example_inputs

RECORDS = _registry.records()


def _example(record, dtype="float32", seed=0):
    shape = (6, 4) if record.shape_ranks == (2, 2) else (3, 4, 5)
    options = {o.dest: o.kwargs.get("default", True) for o in record.options}
    return example_inputs(record.name, shape, dtype, seed=seed, **options)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.name)
@pytest.mark.parametrize("kind", ["big-endian", "masked"])
def test_foreign_arrays_are_normkern_errors_on_every_op(record, kind):
    kw = _example(record)
    name = next(k for k, v in kw.items() if isinstance(v, np.ndarray) and v.ndim >= 2)
    value = kw[name]
    kw[name] = value.astype(value.dtype.newbyteorder(">")) if kind == "big-endian" else np.ma.masked_array(value)
    rule = "byte order" if kind == "big-endian" else "plain numpy.ndarray"
    with pytest.raises(normkern.InvalidParameterError, match=rf"\[{record.name}\] .*{rule}") as info:
        record.function(**kw, soc="host")
    assert info.value.status == 161002


def test_aclnn_first_phase_returns_a_status_for_a_big_endian_array():
    x = np.ones((4, 3, 5), ">f4")
    status, size, executor = aclnn.aclnnBatchNormStatsGetWorkspaceSize(x, 1e-5, np.zeros(3, np.float32),
                                                                       np.zeros(3, np.float32))
    assert (status, size, executor) == (161002, 0, None)
    assert "byte order" in aclnn.aclGetRecentErrMsg()


def test_an_executor_runs_only_under_its_own_op():
    x = np.ones((4, 3, 5), np.float32)
    mean, invstd = np.full(3, 7.0, np.float32), np.full(3, 7.0, np.float32)
    status, size, executor = aclnn.aclnnBatchNormStatsGetWorkspaceSize(x, 1e-5, mean, invstd, soc="host")
    assert status == 0
    assert aclnn.aclnnGroupNormBackward(np.empty(size, np.uint8), size, executor) == 161002
    assert aclnn.aclGetRecentErrMsg() == ("[group_norm_backward] executor must be the executor group_norm_backward's "
                                          "first phase returned, got an executor of batch_norm_stats")
    assert (mean == 7).all()  # nothing ran
    assert aclnn.aclnnBatchNormStats(np.empty(size, np.uint8), size, "not an executor") == 161002


def test_an_empty_grad_out_beside_a_full_input_is_the_empty_exit():
    dy, x = np.zeros((0, 3), np.float32), np.ones((2, 3), np.float32)
    status, size, executor = aclnn.aclnnFastBatchNormBackwardGetWorkspaceSize(
        dy, x, None, None, None, None, None, True, 1e-5, (True, True, True), 0, None, None, None)
    assert (status, size) == (0, 0) and executor.plan.strategy.value == "empty"
    gi, gw, gb = normkern.fast_batch_norm_backward(dy, x, None, None, None, None, None, True, 1e-5)
    assert gi.shape == x.shape and (gw == 0).all() and (gb == 0).all()


@pytest.mark.parametrize("kwargs, rule", [
    (dict(arrival_orders=-1), "arrival_orders must be None, a positive int or a non-empty list"),
    (dict(arrival_orders=[0, -2]), "arrival_orders must be None"),
    (dict(threads=2), "threads must be a non-empty sequence of ints in 1..2, got 2"),
    (dict(threads=(1, 99)), "threads must be a non-empty sequence"),
    (dict(socs=["nope"]), r"\[batch_norm_stats\] soc must be a SocSpec"),
    (dict(strategies=["nope"]), r"\[batch_norm_stats\] strategy must be one of"),
])
def test_check_determinism_refuses_bad_arguments_with_normkern_errors(kwargs, rule):
    kw = example_inputs("batch_norm_stats", (3, 4, 5))
    with pytest.raises(normkern.InvalidParameterError, match=rule):
        normkern.check_determinism("batch_norm_stats", kw, runs=1, **kwargs)


def test_check_determinism_refuses_inputs_that_do_not_fit_the_op():
    with pytest.raises(normkern.InvalidParameterError, match=r"inputs must hold batch_norm_stats's arguments "
                       r"\(input, eps\), got missing \['eps'\]"):
        normkern.check_determinism("batch_norm_stats", {"input": np.ones((3, 4, 5), np.float32)}, runs=1)
    with pytest.raises(normkern.InvalidParameterError, match="unknown"):
        normkern.check_determinism("batch_norm_stats", {"input": np.ones((3, 4, 5), np.float32), "eps": 1e-5,
                                                        "epsilon": 1}, runs=1)
    with pytest.raises(normkern.InvalidParameterError, match="inputs must be a dict"):
        normkern.check_determinism("batch_norm_stats", [1], runs=1)


def test_the_error_slot_is_per_thread():
    bad = np.ones(5, np.float32)
    seen = {}

    def fail_and_read(name, barrier):
        out = np.zeros(3, np.float32)
        aclnn.aclnnBatchNormStatsGetWorkspaceSize(bad if name == "a" else None, 1e-5, out, out.copy())
        barrier.wait()
        seen[name] = aclnn.aclGetRecentErrMsg()

    barrier = threading.Barrier(2)
    threads = [threading.Thread(target=fail_and_read, args=(n, barrier)) for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert "rank 2 to 8" in seen["a"] and "null pointer" in seen["b"]


def _serial_outputs(cases):
    return [_registry.get(op).call(dict(kw), soc=soc, arrival_seed=0) for op, kw, soc in cases]


def test_eight_threads_of_mixed_calls_equal_serial_runs_bit_for_bit():
    cases = []
    for i, record in enumerate(RECORDS):
        for dtype in ("float32", "float16", "bfloat16"):
            for soc in ("host", "Ascend910B2"):
                kw = _example(record, dtype, seed=i)
                try:
                    record.call({k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kw.items()}, soc=soc,
                                arrival_seed=0)
                except normkern.NormkernError:
                    continue  # a dtype the SoC's product table refuses
                cases.append((record.name, kw, soc))
    fresh = [(op, {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kw.items()}, soc)
             for op, kw, soc in cases]
    want = _serial_outputs(fresh)
    jobs = [(j % len(cases)) for j in range(8 * 25)]

    def run(j):
        op, kw, soc = cases[j]
        args = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kw.items()}
        return j, _registry.get(op).call(args, soc=soc, arrival_seed=0)

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(run, jobs, timeout=240))
    assert len(results) == 200 and len(cases) >= 20
    for j, got in results:
        for g, w in zip(got, want[j], strict=True):
            if w is None:
                assert g is None
            else:
                assert np.array_equal(np.asarray(g).view(np.uint8), np.asarray(w).view(np.uint8))


@pytest.mark.parametrize("args, rule", [
    ((np.zeros((0, 3), np.int64), np.zeros((0, 3), np.complex64), None, None, None, None, None, "yes", "eps"),
     "gradOut dtype must be one of"),
    ((np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32), None, None, None, None, None, "yes", 1e-5),
     "training must be a bool"),
    ((np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32), None, None, None, None, None, True, "eps"),
     "eps must be a real number"),
])
def test_an_empty_call_is_checked_like_a_full_one(args, rule):
    with pytest.raises(normkern.InvalidParameterError, match=rule):
        normkern.fast_batch_norm_backward(*args)


def _op_bits(index):
    """Every op's host outputs on its example, as bytes (for comparing across processes)."""
    record = RECORDS[index]
    outs = record.call(_example(record), soc="host", arrival_seed=0)
    return b"".join(np.ascontiguousarray(o).tobytes() for o in outs if o is not None)


def test_a_child_forked_after_kernel_calls_runs_every_op_with_the_same_bits():
    import os

    want = [_op_bits(i) for i in range(len(RECORDS))]  # the parent has now run every op's kernels
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            ok = all(_op_bits(i) == want[i] for i in range(len(RECORDS)))
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    deadline_pid, status = 0, 0
    import time

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        deadline_pid, status = os.waitpid(pid, os.WNOHANG)
        if deadline_pid:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        pytest.fail("the forked child did not finish")
    assert status == 0 and os.read(read, 1) == b"1"


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_process_pools_after_kernel_calls(method):
    import multiprocessing

    want = [_op_bits(i) for i in range(len(RECORDS))]
    with multiprocessing.get_context(method).Pool(2) as pool:
        got = pool.map_async(_op_bits, range(len(RECORDS))).get(timeout=300)
    assert got == want


def test_settings_are_per_thread_and_with_blocks_restore_their_own():
    """Thread A's setting never reaches thread B; interleaved exits leave each thread its own value."""
    seen = {}
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def thread_a():
        with normkern.set_deterministic(True), normkern.set_default_soc("host"):
            a_in.set()
            b_in.wait(10)
            seen["a inside"] = (normkern.get_deterministic(), normkern.get_default_soc().name)
        a_out.set()
        seen["a after"] = (normkern.get_deterministic(), normkern.get_default_soc().name)

    def thread_b():
        a_in.wait(10)
        seen["b while a is inside"] = (normkern.get_deterministic(), normkern.get_default_soc().name)
        with normkern.set_deterministic(2):
            b_in.set()
            a_out.wait(10)
            seen["b inside after a left"] = normkern.get_deterministic()
        seen["b after"] = normkern.get_deterministic()

    threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert seen == {"a inside": (1, "host"), "b while a is inside": (0, "Ascend910B2"), "b inside after a left": 2,
                    "a after": (0, "Ascend910B2"), "b after": 0}
    assert normkern.get_deterministic() == 0 and normkern.get_default_soc().name == "Ascend910B2"
