"""A candidate that crashes, exits, hangs or blows up memory is an error with its cause; the pool recovers, the
caller's timers and signal handlers are untouched, nothing hangs."""

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from softaudit import CandidateError
from softaudit.adapters._targets import load_target
from softaudit.execute import NOT_AGAIN, Isolated
from softaudit.execute._executor import Scoped

FAULTY = Path(__file__).with_name("faulty.py").resolve()
X = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
LIMIT = 2.0  # seconds: short, so the suite stays quick


def faulty(name: str):
    return load_target(f"{FAULTY}:{name}")[0]


def expected(x=X):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def call(executor, name: str, x=X, timeout=LIMIT, dtype=np.float32):
    return executor.call(faulty(name), {"x": x.astype(dtype)}, None, x.shape, dtype, timeout)


@pytest.fixture(scope="module")
def isolated():
    with Isolated() as executor:
        yield executor


@pytest.fixture
def callers_timer():
    """The caller's own SIGALRM handler and ITIMER_REAL, checked intact after the test."""
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    signal.setitimer(signal.ITIMER_REAL, 1000.0)
    yield
    left, _ = signal.getitimer(signal.ITIMER_REAL)
    handler = signal.getsignal(signal.SIGALRM)
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)
    assert 900 < left < 1000 and not fired
    assert handler is not previous and handler is not signal.SIG_DFL and handler.__name__ == "<lambda>"


FAULTS = [
    ("segfault", r"^killed by SIGSEGV$"),
    ("aborts", r"^killed by SIGABRT$"),
    ("exits_3", r"^called sys.exit\(3\)$"),
    ("exits_0", r"^called sys.exit\(0\)$"),
    ("os_exit_5", r"^exited with status 5$"),
    ("kills_itself", r"^(killed by SIGKILL \(out of memory\?\)|ran out of memory \(killed by SIGKILL\))$"),
    ("blocks_alarm", r"^no answer in 2 s: killed$"),
    ("swallows", r"^no answer in 2 s: killed$"),
    ("spins", r"^no answer in 2 s: killed$"),
]


@pytest.mark.parametrize("name, cause", FAULTS, ids=[f[0] for f in FAULTS])
def test_a_fault_is_an_error_with_its_cause_and_the_pool_recovers(isolated, callers_timer, name, cause):
    assert np.array_equal(call(isolated, "sound")[0], expected())
    start = time.monotonic()
    with pytest.raises(CandidateError, match=cause):
        call(isolated, name)
    assert time.monotonic() - start < LIMIT + 5
    out, note = call(isolated, "sound")
    assert np.array_equal(out, expected()) and note == ""


def test_a_candidate_past_its_limit_is_not_called_again_in_that_dtype(isolated, callers_timer):
    with pytest.raises(CandidateError, match="no answer in 2 s"):
        call(isolated, "hangs_on_float32")
    assert isolated.past_limit(faulty("hangs_on_float32"), np.float32)
    start = time.monotonic()
    with pytest.raises(CandidateError, match=f"^{NOT_AGAIN}$"):
        call(isolated, "hangs_on_float32")
    assert time.monotonic() - start < 0.1
    out, _ = call(isolated, "hangs_on_float32", dtype=np.float64)  # another dtype: called
    assert np.allclose(out, expected(X.astype(np.float64)))


def test_an_allocation_past_the_memory_limit_is_an_error_not_a_dead_run(callers_timer):
    with Isolated(memory_mib=512) as executor:
        with pytest.raises(CandidateError, match=r"^ran out of memory \(past the worker's memory limit of 512 MiB\)$"):
            call(executor, "allocates")
        assert np.array_equal(call(executor, "sound")[0], expected())


def test_a_worker_that_keeps_what_it_loaded_is_not_restarted():
    # loky's leak check would retire a worker 300 MB past its size after its first task: torch and JAX would then be
    # imported and their kernels compiled again and again.
    pytest.importorskip("psutil", reason="loky checks memory only with psutil")
    with Isolated() as executor:
        # (a generous limit: each call sleeps 1.1 s, the first writes 400 MB in a new worker, and CI machines are busy)
        pids = {call(executor, "grows", dtype=np.float64, timeout=30)[0][0, 0] for _ in range(3)}
    assert len(pids) == 1


def test_megabytes_of_output_neither_reach_the_caller_nor_block_the_worker(isolated, capfd):
    out, _ = call(isolated, "prints")
    assert np.array_equal(out, expected())
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""


def test_a_timeout_off_the_main_thread():
    import threading

    raised = []

    def spin(executor):
        with pytest.raises(CandidateError) as info:
            call(executor, "spins")
        raised.append(info)

    with Isolated() as executor:
        thread = threading.Thread(target=spin, args=(executor,))
        thread.start()
        thread.join(LIMIT + 10)
    assert not thread.is_alive() and "no answer in 2 s" in str(raised[0].value)


def _pid_of(executor, candidate) -> int:
    return int(executor.call(candidate, {"x": X}, None, X.shape, np.float64, LIMIT)[0][0, 0])


def test_close_keeps_a_sound_worker_for_the_next_executor_which_forgets_its_candidates():
    """A closed executor's worker is kept for the next executor of the process (its start was most of a short
    audit's isolation cost): the next one's calls run in it, and a callable sent under the same key
    ("pickled:0") is the new executor's, not the old one's; a second worker closed while one is kept is killed."""
    from softaudit import Candidate
    from softaudit.execute import _isolated

    for pool in _isolated._KEPT.values():
        pool.shutdown(wait=True, kill_workers=True)
    _isolated._KEPT.clear()
    pid = Candidate("softmax", "pid", lambda x, axis=-1: np.full(x.shape, float(os.getpid())))
    first, other = Isolated(), Isolated()
    worker, second = _pid_of(first, pid), _pid_of(other, pid)
    assert worker not in (second, os.getpid())
    first.close()
    os.kill(worker, 0)  # kept, alive
    other.close()
    with pytest.raises(ProcessLookupError):  # (one is kept already)
        _wait_gone(second)
    after = Isolated()
    seven = Candidate("softmax", "seven", lambda x, axis=-1: np.full(x.shape, 7.0))
    assert after.call(seven, {"x": X}, None, X.shape, np.float64, LIMIT)[0][0, 0] == 7.0
    assert _pid_of(after, pid) == worker
    after.close()


def test_close_kills_a_worker_that_loaded_a_framework():
    """A worker that has loaded torch or JAX is not kept: its threads and memory go with it, and the next audit's
    table names only the frameworks its own candidates loaded."""
    from softaudit import Candidate
    from softaudit.execute import _isolated

    pid = Candidate("softmax", "pid", lambda x, axis=-1: np.full(x.shape, float(os.getpid())))
    for pool in _isolated._KEPT.values():
        pool.shutdown(wait=True, kill_workers=True)
    _isolated._KEPT.clear()
    executor = Isolated()
    worker = _pid_of(executor, pid)
    executor._frameworks["torch"] = "2.13.0"  # (as a call that imported torch reports it)
    executor.close()
    with pytest.raises(ProcessLookupError):
        _wait_gone(worker)
    assert not _isolated._KEPT


def _wait_gone(pid: int) -> None:
    """os.kill(pid, 0) until it raises ProcessLookupError (a killed process is reaped within moments)."""
    for _ in range(100):
        os.kill(pid, 0)
        time.sleep(0.05)


def test_in_process_too_a_candidate_past_its_limit_is_not_called_again():
    from softaudit.execute import InProcess

    with InProcess() as executor:
        with pytest.raises(CandidateError, match=r"^ran past the time limit of 0\.2 s$"):
            call(executor, "hangs_on_float32", timeout=0.2)
        with pytest.raises(CandidateError, match=f"^{NOT_AGAIN}$"):
            call(executor, "hangs_on_float32", timeout=0.2)
        assert np.allclose(call(executor, "hangs_on_float32", dtype=np.float64)[0], expected(X.astype(np.float64)))


def test_many_calls_go_in_one_round_trip_in_order_and_the_first_failure_stops_them():
    """call_many: the outputs of each call in order, each of its own shape, all made by one worker in one task; a
    call that raises is the error and the calls after it are not made."""
    rows = [np.zeros((n, 4), np.float64) for n in (1, 3, 2)]
    with Isolated() as executor:
        answers = executor.call_many(faulty("counts"), [({"x": x}, None, (x.shape,)) for x in rows], np.float64, LIMIT)
        assert all(note == "" and 0 <= seconds < LIMIT for _, note, seconds in answers)
        outs = [outputs for outputs, _, _ in answers]
        assert [o[0].shape for o in outs] == [(1, 4), (3, 4), (2, 4)]
        assert [o[0][0, 0] for o in outs] == [1.0, 2.0, 3.0]
        assert len({o[0][0, 1] for o in outs}) == 1 and outs[0][0][0, 1] != os.getpid()
        bad = np.full((1, 4), 99.0)
        calls = [({"x": rows[0]}, None, ((1, 4),)), ({"x": bad}, None, ((1, 4),)), ({"x": rows[0]}, None, ((1, 4),))]
        with pytest.raises(CandidateError, match="raised ValueError: a 99"):
            executor.call_many(faulty("counts"), calls, np.float64, LIMIT)
        ((after, _, _),) = executor.call_many(faulty("counts"), calls[:1], np.float64, LIMIT)
        assert after[0][0, 0] == 6.0  # (4 and 5 were the batch's first two calls; its third was never made)


def test_many_calls_past_their_limit_are_killed_and_not_made_again(callers_timer):
    calls = [({"x": X}, None, (X.shape,))] * 2
    with Isolated() as executor:
        with pytest.raises(CandidateError, match=r"^no answer in 2 s: killed$"):  # (each call's own limit)
            executor.call_many(faulty("spins"), calls, np.float32, LIMIT)
        with pytest.raises(CandidateError, match=f"^{NOT_AGAIN}$"):
            executor.call_many(faulty("spins"), calls, np.float32, LIMIT)


def test_each_call_of_a_round_trip_has_its_own_limit(callers_timer):
    """Four calls of 0.6 x the limit each make a round trip past the limit, and none is killed; a call that hangs
    after two of them is killed once it has run past the limit itself, not the round trip's sum."""
    nap = np.full((1, 4), 0.6 * LIMIT, np.float32)
    with Isolated() as executor:
        start = time.monotonic()
        answers = executor.call_many(faulty("naps"), [({"x": nap}, None, ((1, 4),))] * 4, np.float32, LIMIT)
        assert len(answers) == 4 and time.monotonic() - start > 2 * LIMIT
        assert all(0.6 * LIMIT <= seconds < LIMIT for _, _, seconds in answers)  # (timed in the worker)
        hangs = np.full((1, 4), 100.0, np.float32)
        calls = [({"x": nap}, None, ((1, 4),))] * 2 + [({"x": hangs}, None, ((1, 4),))]
        start = time.monotonic()
        with pytest.raises(CandidateError, match=r"^no answer in 2 s: killed$"):
            executor.call_many(faulty("naps"), calls, np.float32, LIMIT)
        assert 2.2 * LIMIT < time.monotonic() - start < 6 * LIMIT


def test_a_tasks_calls_go_ahead_to_the_shared_worker_and_its_time_limit_stays_its_own():
    """Scoped ahead (each task of softaudit's own lane sees its executor so) hands a unit's calls to the shared worker
    at once, as the audit's own executor does (that lane judges the unit before meanwhile; a worker's task, which
    asks for the answers at once, has them made then); a candidate past its time limit there is remembered by that
    task alone: the next task calls it again."""
    hangs, calls = faulty("hangs_on_float32"), [({"x": X}, None, (X.shape,))]
    with Isolated() as shared:
        Scoped(shared).send_many(hangs, calls, np.float32, 0.5)  # (a worker's task: made when asked, so not yet)
        assert shared._ahead is None
        first = Scoped(shared, ahead=True)
        answers = first.send_many(hangs, calls, np.float32, 0.5)
        assert shared._ahead is not None  # (sent: not made only when asked)
        with pytest.raises(CandidateError, match=r"^no answer in 0.5 s: killed$"):
            answers()
        assert first.past_limit(hangs, np.float32) and not shared.past_limit(hangs, np.float32)
        with pytest.raises(CandidateError, match=f"^{NOT_AGAIN}$"):
            first.send_many(hangs, calls, np.float32, 0.5)()
        with pytest.raises(CandidateError, match=r"^no answer in 0.5 s: killed$"):
            Scoped(shared, ahead=True).send_many(hangs, calls, np.float32, 0.5)()
