"""Worker processes as the environment leaves them: candidates run with one BLAS thread wherever they run, whatever
the caller's environment or limits (a product split over another number of threads rounds otherwise, and the gate
read that as a regression: issue 24); and a worker ends with the process that started it."""

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from softaudit._threads import one_thread
from softaudit.adapters import load_target
from softaudit.execute import InProcess, Isolated

THREADED = Path(__file__).with_name("threaded.py").resolve()
BLAS = [i for i in threadpool_info() if i["user_api"] == "blas"]


@pytest.fixture
def seen(tmp_path, monkeypatch):
    path = tmp_path / "threads"
    monkeypatch.setenv("SOFTAUDIT_TEST_THREADS", str(path))
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")  # what a worker would inherit, unpinned
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    return lambda: [int(line) for line in path.read_text().split()]


@pytest.mark.skipif(not BLAS, reason="numpy has no BLAS threadpoolctl can see")
@pytest.mark.parametrize("executor", [InProcess, Isolated])
def test_a_candidate_sees_one_blas_thread(seen, executor):
    x = np.random.default_rng(0).standard_normal((2, 64))
    with threadpool_limits(limits=4, user_api="blas"), executor() as ex:  # the caller's own limit: 4 threads
        ex.call(load_target(f"{THREADED}:threads_seen")[0], {"x": x}, None, x.shape, np.float64, 60)
        assert seen() == [1]


def test_one_thread_gives_back_what_the_caller_had():
    with threadpool_limits(limits=2, user_api="blas"):
        with one_thread():
            assert {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"} <= {1}
        assert {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"} <= {2}


WHERE = """
import os
import numpy as np

def where(x, axis=-1):
    with open(os.environ["SOFTAUDIT_TEST_PID"], "w") as f:
        f.write(str(os.getpid()))
    return x
"""

KILLED = """
import sys, time
import numpy as np
from softaudit.adapters import load_target
from softaudit.execute import Isolated
x = np.zeros((1, 4))
Isolated().call(load_target(sys.argv[1], "softmax")[0], {"x": x}, None, x.shape, np.float64, 60)
print("called", flush=True)
time.sleep(600)
"""


def test_a_worker_ends_when_the_process_that_started_it_is_killed(tmp_path, monkeypatch):
    """(A killed parent cannot close its workers: a `dask worker` stopped with SIGTERM left its isolation worker
    behind, reparented, for good.)"""
    (tmp_path / "where.py").write_text(WHERE)
    monkeypatch.setenv("SOFTAUDIT_TEST_PID", str(tmp_path / "pid"))
    parent = subprocess.Popen(
        [sys.executable, "-c", KILLED, f"{tmp_path / 'where.py'}:where"], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout.readline().strip() == "called"
    worker = int((tmp_path / "pid").read_text())
    parent.kill()
    parent.wait()
    for _ in range(100):
        if not _alive(worker):
            break
        time.sleep(0.1)
    assert not _alive(worker)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # (a zombie has ended)
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not BLAS, reason="numpy has no BLAS threadpoolctl can see")
def test_a_cases_reference_and_measures_are_the_same_bits_whatever_blas_threads_its_preparer_has():
    """The float64 approximations of attention's exact results come from BLAS products, whose last bits move with
    the thread count (OpenBLAS on 2 threads rounded 73 of the causal 129 x 129 case's 4128 outputs otherwise):
    prepared in softaudit's process or in a worker, a case gives the same reference, the same conditioning and
    fail-line budgets, and so the same table (the flake matrix's `--cache-dir off` run found 40 cells apart)."""
    from softaudit.cases import FAMILIES
    from softaudit.prepare import Prepared
    from softaudit.reference import format_of

    fmt = format_of("float32")
    (case,) = [c for c in FAMILIES["attn_tile_edges"].cases("attention", fmt, "default") if "causal" in c.description]
    seen = []
    for threads in (1, 4):
        with threadpool_limits(limits=threads, user_api="blas"):
            pc = Prepared(case, fmt, 0)
            ref, basis = pc.reference, pc.basis
        seen.append((ref.hi, ref.lo, *(np.asarray(v) for v in vars(basis).values() if isinstance(v, np.ndarray))))
    for one, many in zip(*seen):
        assert np.array_equal(one, many, equal_nan=True)
