"""Candidates run with one BLAS thread wherever they run, whatever the caller's environment or limits: a product
split over another number of threads rounds otherwise, and the gate read that as a regression (issue 24)."""

from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from softaudit.adapters import load_target
from softaudit.execute import InProcess, Isolated
from softaudit.execute._threads import one_thread

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
