"""Local's lanes: a family's units run in the process that prepared it (so it is read and measured there once), an
idle lane takes a waiting unit from another, a unit not started can still be cancelled."""

import concurrent.futures
import os
import threading
import types

from softaudit.execute._lanes import Lanes
from softaudit.execute._pool import Local

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


def test_a_familys_units_go_to_its_lane_and_an_idle_lane_takes_a_waiting_one():
    lanes, started, go, now = Lanes(2, _OneThread), {}, threading.Event(), threading.Event()
    now.set()
    try:
        family = lanes.submit(_where, "family", started, now)
        family_thread = family.result(WAIT)
        units = [lanes.submit(_where, f"unit{i}", started, go, family) for i in range(4)]
        # its lane has unit0 running and unit1 sent (DEPTH: it takes two), the other, idle, the oldest left: unit2
        _until(lambda: {"unit0", "unit2"} <= set(started))
        assert started["unit0"] == family_thread != started["unit2"]
        go.set()
        assert units[1].result(WAIT) == family_thread
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


def _pid(*args, ex):
    return os.getpid()


def test_a_familys_units_run_in_the_worker_process_that_prepared_it(tmp_path):
    """Through Local, in loky's processes: two families, two units each (a lane takes two at once: none waits for
    another lane to take it)."""
    where = Local(2, "none", None, tmp_path)
    try:
        families = [where.submit(_pid, name) for name in ("a", "b")]
        units = {f: [where.submit_staged(_staged, f, i) for i in range(2)] for f in families}
        pids = {f.result(120): [u.result(120) for u in us] for f, us in units.items()}
    finally:
        where.close()
    assert len(pids) == 2  # (two processes prepared the two families)
    for family_pid, unit_pids in pids.items():
        assert unit_pids == [family_pid, family_pid]


def _staged(family_pid, i, *, ex):
    return lambda: os.getpid()
