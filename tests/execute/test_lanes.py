"""Local's lanes: a family's units run in the process that prepared it (so it is read and measured there once), an
idle lane takes a waiting unit from another, a unit not started can still be cancelled; the lane in softaudit's own
process runs tasks while it waits, and the workers start only once the work queued is worth their start."""

import concurrent.futures
import os
import threading
import time
import types

from softaudit.execute import _lanes, _pool
from softaudit.execute._lanes import Lanes
from softaudit.execute._pool import Local

from ..conftest import units_on_the_workers
from ..scale.test_workers import _pids

WAIT = 30  # seconds: a bound on waits that end at once when the code works


class _OneThread(concurrent.futures.ThreadPoolExecutor):
    """A lane of threads, as Lanes drives loky's executors (its broken flag, its processes)."""

    def __init__(self):
        super().__init__(max_workers=1)
        self._flags, self._processes = types.SimpleNamespace(broken=None), {}


def _where(name, started: dict, go: threading.Event, family=None):
    """A task (of a family: its result) that records the thread it runs on, then waits for go."""
    started[name] = threading.get_ident()
    go.wait(WAIT)
    return threading.get_ident()


def _until(done, seconds: float = WAIT) -> None:
    pause = threading.Event()
    for _ in range(int(seconds / 0.01)):
        if done():
            return
        pause.wait(0.01)
    raise AssertionError("not reached in time")


def test_a_familys_units_go_to_its_lane_and_an_idle_lane_takes_a_waiting_one_with_its_family():
    lanes, started, go, now = Lanes(2, _OneThread), {}, threading.Event(), threading.Event()
    now.set()
    try:
        family = lanes.submit(_where, "family", started, now)
        family_thread = family.result(WAIT)
        units = [lanes.submit(_where, f"unit{i}", started, go, family) for i in range(4)]
        # its lane has unit0 running and unit1 sent (DEPTH: it takes two), the other, idle, the oldest left, unit2,
        # and the family's unit after it (a family taken is read once more, not once per unit)
        _until(lambda: {"unit0", "unit2"} <= set(started))
        assert started["unit0"] == family_thread != started["unit2"]
        go.set()
        assert units[1].result(WAIT) == family_thread
        assert units[3].result(WAIT) == units[2].result(WAIT) != family_thread
    finally:
        go.set()
        lanes.close()


def _fail_after(started: dict, go: threading.Event):
    started["ran"] = True


def test_a_task_waiting_in_a_queue_can_be_cancelled_and_never_runs():
    lanes, started, go = Lanes(1, _OneThread), {}, threading.Event()
    try:
        busy = [lanes.submit(_where, f"busy{i}", started, go) for i in range(2)]  # (the lane's two places)
        waiting = lanes.submit(_fail_after, started, go)
        assert waiting.cancel()
        go.set()
        concurrent.futures.wait(busy, WAIT)
        lanes.submit(_where, "after", started, go).result(WAIT)  # (the lane went past the cancelled task)
        assert "ran" not in started and waiting.cancelled()
    finally:
        go.set()
        lanes.close()


def _here(fn, *args):
    """A task as the calling thread's lane starts it: the rest of it gives its result."""
    result = fn(*args)
    return lambda: result


def _drive(work, futures, seconds: float = WAIT) -> None:
    """work() called (the calling thread's lane run, as the runner does while it waits) until the futures are done."""

    def done():
        work()
        return all(f.done() for f in futures)

    _until(done, seconds)


def test_a_small_plan_runs_in_the_calling_thread_and_starts_no_worker(monkeypatch):
    monkeypatch.setattr(_lanes, "SPREAD_AFTER", 1e9)  # (never worth it: however slow this machine is today)
    lanes, started, go = Lanes(2, _OneThread, here=_here), {}, threading.Event()
    go.set()
    try:
        family = lanes.submit(_where, "family", started, go)
        units = [lanes.submit(_where, f"unit{i}", started, go, family) for i in range(3)]
        _drive(lanes.run_here, [family, *units])
        assert {u.result() for u in units} == {family.result()} == {threading.get_ident()}
        assert lanes._executors == [None, None]  # (the other lane's executor was never made)
    finally:
        lanes.close()


def _in_order(name, ran: list, family=None):
    ran.append(name)


def test_a_lane_runs_its_familys_units_before_it_prepares_the_next_family(monkeypatch):
    # (the runner submits every family, then every unit: a lane that prepared the next family first held every
    # family before running a unit, and an idle lane then took 339 of the main job's 840 families from the other,
    # each read and measured a second time)
    monkeypatch.setattr(_lanes, "SPREAD_AFTER", 1e9)
    lanes, ran = Lanes(2, _OneThread, here=_here), []
    try:
        first, second = lanes.submit(_in_order, "first", ran), lanes.submit(_in_order, "second", ran)
        units = [lanes.submit(_in_order, f"unit{i}", ran, first) for i in range(2)]
        _drive(lanes.run_here, [first, second, *units])
        assert ran == ["first", "unit0", "unit1", "second"]
    finally:
        lanes.close()


def test_once_worth_it_the_workers_start_and_each_familys_units_stay_where_it_was_prepared(monkeypatch):
    monkeypatch.setattr(_lanes, "SPREAD_AFTER", 0.0)
    monkeypatch.setattr(_lanes, "SPREAD_WORK", 0.0)
    lanes, started, hold, now = Lanes(2, _OneThread, here=_here), {}, threading.Event(), threading.Event()
    now.set()
    try:
        # the other lane starts with nothing run here, and is kept full (DEPTH tasks) while this thread works
        there = lanes.submit(_where, "there", started, hold)
        lanes.submit(_where, "blocker", started, hold)
        _until(lambda: "there" in started)
        here = lanes.submit(_where, "here", started, now)
        _drive(lanes.run_here, [here])
        unit_here = lanes.submit(_where, "unit_here", started, now, here)
        _drive(lanes.run_here, [unit_here])
        hold.set()
        there_thread = there.result(WAIT)
        unit_there = lanes.submit(_where, "unit_there", started, now, there)  # (this thread does not look now)
        assert here.result() == unit_here.result() == threading.get_ident() != there_thread
        assert unit_there.result(WAIT) == there_thread
    finally:
        hold.set()
        lanes.close()


def test_the_calling_threads_lane_takes_a_task_that_raises_or_was_cancelled_in_its_stride(monkeypatch):
    monkeypatch.setattr(_lanes, "SPREAD_AFTER", 1e9)
    lanes, started, go = Lanes(2, _OneThread, here=_here), {}, threading.Event()
    go.set()
    try:
        family = lanes.submit(_where, "family", started, go)
        first = lanes.submit(_where, "first", started, go, family)  # (staged when the next one raises)
        failing = lanes.submit(_raise, family)
        cancelled = lanes.submit(_fail_after, started, go, family)
        assert cancelled.cancel()
        after = lanes.submit(_where, "after", started, go, family)
        _drive(lanes.run_here, [family, first, failing, after])
        assert isinstance(failing.exception(), ZeroDivisionError) and "ran" not in started
        assert first.result() == after.result() == threading.get_ident()
    finally:
        lanes.close()


def _raise(family):
    return 1 / 0


def _pid(*args, ex):
    return os.getpid()


def test_a_familys_units_run_in_the_process_that_prepared_it(tmp_path, monkeypatch):
    """Through Local: a family prepared in loky's process (started at once) and one in this process, two units each
    (the worker's units take long enough that it never idles to take this process's)."""
    monkeypatch.setattr(_lanes, "SPREAD_AFTER", 0.0)
    monkeypatch.setattr(_lanes, "SPREAD_WORK", 0.0)
    where = Local(2, "none", None, tmp_path)
    try:
        there = where.submit(_pid, "there")
        _until(there.done, 120)  # (the worker took it: nothing runs here until this process works)
        here = where.submit(_pid, "here")
        units = {f: [where.submit_staged(_staged, f, os.getpid()) for _ in range(2)] for f in (there, here)}
        _drive(where.work, [u for us in units.values() for u in us], 120)
        pids = {f.result(): [u.result() for u in us] for f, us in units.items()}
    finally:
        where.close()
    assert list(pids) == [there.result(), os.getpid()] and there.result() != os.getpid()
    for family_pid, unit_pids in pids.items():
        assert unit_pids == [family_pid, family_pid]


def _staged(family_pid, audit_pid, *, ex):
    if os.getpid() != audit_pid:  # (in the worker: it stays busy while the audit's process takes its own)
        time.sleep(0.5)
    return lambda: os.getpid()


def test_a_small_plan_runs_in_this_process_whatever_the_workers(tmp_path, monkeypatch):
    """With `--workers 2` or "auto" on two cores, a plan whose work queued never keeps softaudit's process busy
    SPREAD_WORK seconds more runs there and starts no worker (their start would cost more than they give:
    `--workers N` is never slower than serial there); the same plan on the workers, started at once, runs there."""
    monkeypatch.setattr(_pool, "usable_cores", lambda: 2)
    seen, two = tmp_path / "pids", ["textbook", "gaussian"]
    assert _pids(seen, ["textbook"], 2) == _pids(seen, two, 2) == _pids(seen, two, "auto") == {os.getpid()}
    units_on_the_workers(monkeypatch)
    assert os.getpid() not in _pids(seen, two, 2) | _pids(seen, two, "auto")


def test_the_workers_start_once_the_work_queued_here_would_take_longer_than_their_start():
    """SPREAD_AFTER seconds after the first task came, at this process's mean time per task so far: 10 tasks in 1 s
    (0.1 s each) make 35 queued 3.5 s of work (under SPREAD_WORK, 4 s: not worth it), 45 queued 4.5 s (worth it);
    before SPREAD_AFTER (0.5 s), never."""
    lanes = Lanes(2, _OneThread, here=_here)
    lanes._started_here = 10
    for queued, began, worth in ((35, 1.0, False), (45, 1.0, True), (45, 0.3, False)):
        lanes._open = [_lanes._Task(i, concurrent.futures.Future(), print, (), None) for i in range(queued)]
        lanes._began = time.monotonic() - began
        assert lanes._worth_spreading() is worth, (queued, began)
