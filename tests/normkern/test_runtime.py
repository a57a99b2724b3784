"""The execution runtime: bodies launched over runs of cores on normkern's own threads or on PyTorch's OpenMP
team, the thread-count setting and the size rule, errors, a busy pool or team, fork; and no unguarded private
Numba API in the package."""

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import normkern
from normkern import runtime
from normkern.runtime import settings

launch_module = sys.modules["normkern.runtime.launch"]


@pytest.fixture(autouse=True)
def _own_pool(monkeypatch, request):
    """Launches on normkern's pool (a test of the OpenMP team joins it itself)."""
    if "team" not in request.node.name:
        monkeypatch.setattr(launch_module, "_team", None)
        monkeypatch.setattr(launch_module, "_may_join", False)


@pytest.fixture
def team(monkeypatch):
    """PyTorch's OpenMP team joined, on at most ``team.limit()`` threads (2 unless a test changes it)."""
    pytest.importorskip("torch")
    library = launch_module.loaded_openmp()
    if library is None:
        pytest.skip("no GNU OpenMP runtime in this process")
    joined = launch_module.OpenMPTeam(library, lambda: 2)
    monkeypatch.setattr(launch_module, "_team", joined)
    return joined


def _recorder():
    seen = []
    lock = threading.Lock()

    def body(tag, begin, end):
        with lock:
            seen.append((tag, begin, end, threading.get_ident()))

    return body, seen


def test_a_launch_runs_every_run_once_and_the_first_on_the_calling_thread():
    body, seen = _recorder()
    runtime.launch(body, np.array([0, 3, 3, 5, 9]), "a")
    assert sorted(s[1:3] for s in seen) == [(0, 3), (3, 5), (5, 9)]  # the empty run (3, 3) is not launched
    by_run = {s[1]: s[3] for s in seen}
    assert by_run[0] == threading.get_ident()
    assert len({by_run[3], by_run[5], threading.get_ident()}) == 3  # two workers of the pool
    assert runtime.pool_size() >= 2


def test_one_run_is_a_plain_call_on_the_calling_thread():
    body, seen = _recorder()
    runtime.launch(body, ((2, 7),), "b")
    assert seen == [("b", 2, 7, threading.get_ident())]


def test_an_error_in_a_worker_reaches_the_caller_after_every_run_and_the_pool_goes_on():
    finished = []

    def body(begin, end):
        if begin == 1:
            time.sleep(0.05)
            raise ValueError("core 1 failed")
        time.sleep(0.1)
        finished.append(begin)

    with pytest.raises(ValueError, match="core 1 failed"):
        runtime.launch(body, np.array([0, 1, 2, 3]))
    assert sorted(finished) == [0, 2]  # the other runs were done before the error was raised
    body2, seen = _recorder()
    runtime.launch(body2, np.array([0, 1, 2]), "c")
    assert sorted(s[1] for s in seen) == [0, 1]


def test_a_launch_that_finds_the_pool_busy_runs_every_run_on_its_own_thread():
    inner_threads = []

    def inner(begin, end):
        inner_threads.append(threading.get_ident())

    def outer(begin, end):
        if begin == 0:
            runtime.launch(inner, np.array([0, 1, 2, 3]))  # the pool is this launch's: no deadlock

    runtime.launch(outer, np.array([0, 1, 2]))
    assert inner_threads == [threading.get_ident()] * 3


def test_the_thread_count_is_a_setting_of_the_calling_context():
    with runtime.set_num_threads(1):
        assert runtime.get_num_threads() == 1 and runtime.threads_for(1 << 40) == 1
        other = []
        thread = threading.Thread(target=lambda: other.append(runtime.get_num_threads()))
        thread.start()
        thread.join()
        assert other == [runtime.MAX_THREADS]  # another thread keeps the default
    assert runtime.get_num_threads() == runtime.MAX_THREADS and settings.THREADS.get()[1]  # the fixture's
    assert normkern.get_num_threads is runtime.get_num_threads
    for bad in (0, runtime.MAX_THREADS + 1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=r"threads must be an int in 1\.\."):
            runtime.set_num_threads(bad)


def test_a_call_takes_one_thread_per_bytes_per_thread_unless_set_exact():
    with runtime.set_num_threads(runtime.MAX_THREADS):
        most = runtime.get_num_threads()
        assert runtime.threads_for(0, 1000) == 1 and runtime.threads_for(999, 1000) == 1
        assert runtime.threads_for(2000, 1000) == min(2, most) and runtime.threads_for(10 ** 9, 1000) == most
        assert runtime.threads_for(runtime.BYTES_PER_THREAD - 1) == 1
    with runtime.set_num_threads(runtime.MAX_THREADS, exact=True):
        assert runtime.threads_for(0) == runtime.MAX_THREADS


def test_small_work_stays_on_the_calling_thread(monkeypatch):
    calls = []
    real = launch_module._pool.launch
    monkeypatch.setattr(launch_module._pool, "launch", lambda f, runs, args: calls.append(len(runs)) or real(
        f, runs, args))
    x = np.random.default_rng(0).standard_normal((4, 8, 16)).astype(np.float32)  # 2 KiB
    big = np.random.default_rng(0).standard_normal((8, 64, 64, 64)).astype(np.float32)  # 8 MiB
    with runtime.set_num_threads(runtime.MAX_THREADS):
        normkern.batch_norm_stats(x, 1e-5, soc="host")
        normkern.batch_norm_stats(big, 1e-5, soc="host")
    from normkern.ops.batch_norm_stats import api

    # the small call ran as one run on the calling thread: it never reached the pool (nor does a big one on one core)
    threads = min(runtime.MAX_THREADS, big.nbytes // api.THREAD_BYTES)
    assert calls == ([threads] if threads > 1 else [])


def test_a_forked_child_starts_with_an_empty_pool_and_makes_its_own():
    runtime.launch(lambda b, e: None, np.array([0, 1, 2]))
    assert runtime.pool_size() >= 1
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            empty = runtime.pool_size() == 0
            body, seen = _recorder()
            runtime.launch(body, np.array([0, 1, 2]), "child")
            ok = empty and sorted(s[1] for s in seen) == [0, 1] and runtime.pool_size() >= 1
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert status == 0 and os.read(read, 1) == b"1"


def test_importing_normkern_torch_joins_its_openmp_team():
    pytest.importorskip("torch")
    import normkern.torch  # noqa: F401

    assert launch_module.loaded_openmp() is not None  # PyTorch's Linux wheels bring GNU OpenMP
    assert launch_module.join_openmp_team(lambda: 2) and launch_module._team is not None


_JOIN_WHEN_LOADED = """
import os, sys
import numpy as np
import normkern
from normkern import runtime
work = lambda b, e: None
runtime.launch(work, np.array([0, 1, 2]))
before = runtime.launcher()
if sys.argv[1] == "fork":
    import torch
    torch.ones(1 << 20).add_(1)
    pid = os.fork()
    if pid == 0:
        runtime.launch(work, np.array([0, 1, 2]))
        os._exit(0 if runtime.launcher() == "pool" else 1)
    _, status = os.waitpid(pid, 0)
    print(before, "child ok" if status == 0 else "child joined")
else:
    import torch
    runtime.launch(work, np.array([0, 1, 2]))
    print(before, runtime.launcher())
"""


@pytest.mark.parametrize("how", ["import", "fork"])
def test_the_numpy_api_joins_pytorchs_team_once_pytorch_is_loaded_but_not_in_a_forked_child(how):
    """normkern imported alone launches on its pool; the first launch after ``import torch`` joins PyTorch's
    team (normkern.torch is not imported); a child forked from a process that had PyTorch keeps its pool."""
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-c", _JOIN_WHEN_LOADED, how], capture_output=True, text=True,
                         check=True, timeout=300).stdout.split()
    assert out == (["pool", "openmp"] if how == "import" else ["pool", "child", "ok"])


def test_a_launch_on_the_team_runs_every_run_once_on_the_calling_thread_and_the_team(team):
    body, seen = _recorder()
    runtime.launch(body, np.array([0, 3, 3, 5, 9]), "a")
    assert runtime.launcher() == "openmp"
    assert sorted(s[1:3] for s in seen) == [(0, 3), (3, 5), (5, 9)]
    by_run = {s[1]: s[3] for s in seen}
    assert by_run[0] == by_run[5] == threading.get_ident()  # member 0 of 2 takes runs 0 and 2
    assert by_run[3] != threading.get_ident()


def test_the_team_takes_at_most_its_limit_and_one_thread_runs_everything_itself(team):
    team.limit = lambda: 1
    body, seen = _recorder()
    runtime.launch(body, np.array([0, 1, 2, 3]), "one")
    assert [s[1] for s in seen] == [0, 1, 2] and {s[3] for s in seen} == {threading.get_ident()}


def test_an_error_on_the_team_reaches_the_caller_after_every_run(team):
    finished = []

    def body(begin, end):
        if begin == 1:
            raise ValueError("core 1 failed")
        time.sleep(0.05)
        finished.append(begin)

    with pytest.raises(ValueError, match="core 1 failed"):
        runtime.launch(body, np.array([0, 1, 2, 3]))
    assert sorted(finished) == [0, 2]
    body2, seen = _recorder()
    runtime.launch(body2, np.array([0, 1, 2]), "after")
    assert sorted(s[1] for s in seen) == [0, 1]


def test_a_launch_that_finds_the_team_busy_goes_to_the_pool(team):
    inner_threads = []

    def inner(begin, end):
        inner_threads.append(threading.get_ident())

    def outer(begin, end):
        if begin == 0:
            runtime.launch(inner, np.array([0, 1, 2]))

    runtime.launch(outer, np.array([0, 1, 2]))
    assert len(inner_threads) == 2


def test_a_child_forked_after_the_team_ran_launches_on_its_own_pool(team):
    import torch

    torch.ones(1 << 20).add_(1)  # PyTorch's own team has run too
    runtime.launch(lambda b, e: None, np.array([0, 1, 2]))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            body, seen = _recorder()
            runtime.launch(body, np.array([0, 1, 2]), "child")
            ok = runtime.launcher() == "pool" and sorted(s[1] for s in seen) == [0, 1]
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert status == 0 and os.read(read, 1) == b"1"


#: Numba names the package may use: its public API and the extension API its intrinsics are written in
#: (``numba.extending``, ``numba.core.cgutils``, ``numba.np.arrayobj``'s array structs, ``numba.core.config``:
#: an upgrade that moves one fails at import, loudly). Only ``runtime/cache.py`` reaches private internals,
#: behind ``internals_present`` (tests/normkern/test_cache.py runs both ways).
_ALLOWED_NUMBA = {"numba", "numba.extending", "numba.core.cgutils", "numba.np.arrayobj", "numba.core.config",
                  "numba.core", "numba.core.dispatcher", "numba.core.caching"}


def test_no_private_numba_api_outside_the_guarded_cache():
    root = Path(normkern.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        modules = set(re.findall(r"^\s*(?:from|import) (numba[\w.]*)", text, re.M))
        names = set(re.findall(r"^\s*from numba[\w.]* import ([^\n]+)", text, re.M))
        where = path.relative_to(root).as_posix()
        if where == "runtime/cache.py":
            continue
        assert modules <= _ALLOWED_NUMBA - {"numba.core.dispatcher", "numba.core.caching"}, where
        assert not any(name.strip().startswith("_") for line in names for name in line.split(",")), where
        assert not re.search(r"numba\.[\w.]*\._[a-z]", text), where  # no numba.x._private attribute
        assert "prange" not in text and "parallel=True" not in text, where  # no OpenMP: the runtime launches
