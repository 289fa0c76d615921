"""Local's scheduler: a lane per worker (this process, then a loky executor of one process each), and each family's
units sent to the lane that prepared it.

One pool of N processes gave each unit to whichever process was free, so every process ended up with units of every
family: each read every family from its file and made every case's measure basis (ulps, conditioning), invariant
probes and reruns itself, the same work several times over on the main job (docs/scale.md has the counts).
Here a family is prepared on the first lane free, its process keeps it (`prepare.share`), and the family's units
wait for that lane. A lane runs the units of the families it prepared before it prepares another (the runner
submits every family, then every unit: a lane that prepared the next family first held every family before it ran a
unit, and the other lane, out of work, then took a large share of the main job's families, each read and measured
there again). A lane with nothing of its own to run, and nothing in flight, takes the oldest unit waiting on another
lane, and the rest of that unit's family (at the end of a run: that family is then read there too, once).
Otherwise tasks start in the order they were submitted, as with one pool.

The first lane may be this process (`here`): the caller runs its tasks (`run_here`) while it waits for results, and
the other lanes' processes start once the work queued is worth their start (SPREAD_AFTER, SPREAD_WORK). A small plan
is then done here as fast as in one process (workers of their own, started at once, would make it slower); a large
one has every core after its first half second.

A task's future here is this module's own (the caller's): pending while it waits in a queue (so `cancel` takes
back what has not started, as before), running once sent to its lane's process, done with what that task gave.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import contextlib
import dataclasses
import functools
import itertools
import os
import signal
import threading
import time
from collections.abc import Callable

#: Tasks sent to a lane's process at once: the one it runs and the next, so it never waits between two tasks.
DEPTH = 2

#: With a lane in this process, the other lanes' processes start only once that is worth their start: SPREAD_AFTER
#: seconds after the first task came, the tasks queued would take this process more than SPREAD_WORK seconds more (at
#: its mean time per task so far, which the families' preparations, first in the queue, make look slower). A
#: worker's start (an interpreter, softaudit's imports, its own isolated worker, the families it reads) takes the
#: cores this process and its isolated worker are using. A lower SPREAD_WORK spreads small plans that then take
#: longer than in one process; at this one, small plans stay here and every built-in over the quick suite spreads
#: after its first half second (docs/scale.md; benchmarks/bench_small_plans.py measures both).
SPREAD_AFTER = 0.5
SPREAD_WORK = 4.0


@dataclasses.dataclass(order=True)
class _Task:
    """A task submitted: ordered by when it was submitted."""

    seq: int  # submission order: each queue is sorted by it
    future: concurrent.futures.Future = dataclasses.field(compare=False)
    fn: Callable = dataclasses.field(compare=False)
    args: tuple = dataclasses.field(compare=False)
    family: concurrent.futures.Future | None = dataclasses.field(compare=False)  # the prepared family it needs


class Lanes:
    """Tasks run in `width` lanes, each an executor of one process that `make()` gives (made on first use, made
    again if its process dies). A task whose arguments hold a future of an earlier task (its prepared family) runs
    on that task's lane once the future is done, its result passed in the future's place.

    here: the first lane is the calling thread's: `here(fn, *args)` starts a task there and returns the rest of it
    (a function of nothing that gives its result), run after the next task of that lane has started (a unit's calls
    go to the isolated worker while this process judges the unit before)."""

    def __init__(self, width: int, make: Callable[[], concurrent.futures.Executor], here: Callable | None = None):
        self._make, self._here = make, here
        self._sent = range(1 if here else 0, width)  # the lanes of processes, that the sending thread feeds
        self._staged: tuple | None = None  # (task, the rest of it): the task of this thread's lane started last
        self._spread = here is None  # whether the lanes of processes run (with a lane here: once worth it)
        self._began, self._started_here = None, 0  # when the first task came; how many this thread's lane started
        self._executors: list = [None] * width
        # Every task queued may be sent: one that needs a family waits aside until the family is done.
        self._queues: list[list[_Task]] = [[] for _ in range(width)]  # each lane's tasks, by submission order
        self._open: list[_Task] = []  # tasks of no lane (families to prepare): the first lane free takes them
        self._waiting: dict = {}  # a family's future -> the tasks that need it, until it is done
        self._home: dict = {}  # a family's future, done -> the lane it ran on (where the tasks that need it run)
        self._busy = [0] * width  # tasks sent to each lane, not done
        self._seq = itertools.count()
        self._changed = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def submit(self, fn, *args) -> concurrent.futures.Future:
        """fn(*args) on a lane: that of the task whose future is among args, if any; its future."""
        future = concurrent.futures.Future()
        family = next((a for a in args if isinstance(a, concurrent.futures.Future)), None)
        with self._changed:
            if self._closed:
                raise RuntimeError("softaudit: the worker lanes are closed")
            task = _Task(next(self._seq), future, fn, args, family)
            self._began = self._began if self._began is not None else time.monotonic()
            if family is None:
                self._open.append(task)
            elif family in self._home:
                bisect.insort(self._queues[self._home[family]], task)
            elif family.done():  # (cancelled before it was sent, or not of these lanes: no lane to go to)
                self._open.append(dataclasses.replace(task, family=None))
            else:
                self._waiting.setdefault(family, []).append(task)
            if self._thread is None:
                self._thread = threading.Thread(target=self._send_all, name="softaudit-lanes", daemon=True)
                self._thread.start()
            self._changed.notify()
        return future

    def processes(self) -> list:
        """The lanes' worker processes (loky's process objects) now running."""
        return [p for ex in self._executors if ex is not None for p in list(ex._processes.values())]

    def close(self, killed: bool = False) -> None:
        """Cancel the tasks not sent, stop sending, and shut the lanes down (killed: their processes at once, with
        SIGKILL: a worker ignores SIGTERM)."""
        with self._changed:
            self._closed, self._staged = True, None
            left = self._open + [t for q in self._queues for t in q] + [t for w in self._waiting.values() for t in w]
            self._open, self._queues, self._waiting = [], [[] for _ in self._queues], {}
            self._changed.notify()
        for task in left:
            task.future.cancel()
        if self._thread is not None:
            self._thread.join()
        if killed:
            for process in self.processes():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
        for ex in self._executors:
            if ex is not None:
                ex.shutdown(wait=True)

    def _send_all(self) -> None:
        """The sending thread: each task to its lane as the lane has room, until closed."""
        while True:
            with self._changed:
                picked = self._pick(self._sent) if self._spread else None
                while picked is None and not self._closed:
                    self._changed.wait(None if self._spread else 0.05)
                    self._spread = self._spread or self._worth_spreading()
                    picked = self._pick(self._sent) if self._spread else None
                if picked is None:
                    return
                lane, task = picked
                self._busy[lane] += 1
            self._send(lane, task)

    def _worth_spreading(self) -> bool:
        """Whether the tasks queued would keep this thread's lane busy SPREAD_WORK seconds more at its pace so far,
        SPREAD_AFTER seconds after the first task came (a lane that started none: at a task's worth so far)."""
        worked = time.monotonic() - self._began if self._began is not None else 0.0
        if worked < SPREAD_AFTER:
            return False
        queued = len(self._open) + sum(map(len, self._queues)) + sum(map(len, self._waiting.values()))
        return queued * worked / max(self._started_here, 1) > SPREAD_WORK

    def run_here(self) -> bool:
        """Start the next task of this thread's lane, if it has one, then finish the one started before (else, where
        none is left to start, finish that one); whether anything ran. The caller calls it while it waits. A task
        of no family (a family's preparation: its units wait for it) runs whole, after the one before is finished,
        as Serial runs one."""
        with self._changed:
            picked = self._pick(range(1)) if self._here else None
            if picked is not None:
                self._busy[0] += 1
                self._started_here += 1
        before, self._staged = self._staged, None
        if picked is not None and picked[1].family is not None:  # a unit: started, the one before judged meanwhile
            self._staged = self._start_here(picked[1])
            if before is not None:
                self._finish_here(*before)
            return True
        if before is not None:
            self._finish_here(*before)
        if picked is not None and (started := self._start_here(picked[1])) is not None:
            self._finish_here(*started)
        return picked is not None or before is not None

    def _start_here(self, task: _Task) -> tuple | None:
        """(task, the rest of it) started in this thread; None if it ended there (cancelled, or it raised)."""
        if not task.future.set_running_or_notify_cancel():
            self._done(0, task, lambda: None)
            return None
        try:
            return task, self._here(task.fn, *_arguments(task))
        except Exception as exc:
            self._done(0, task, functools.partial(task.future.set_exception, exc))
            return None

    def _finish_here(self, task: _Task, rest: Callable) -> None:
        """The rest of a task started in this thread run (outside the lock), and its outcome set."""
        try:
            outcome = functools.partial(task.future.set_result, rest())
        except Exception as exc:
            outcome = functools.partial(task.future.set_exception, exc)
        self._done(0, task, outcome)

    def _pick(self, lanes) -> tuple[int, _Task] | None:
        """(lane, task) to run next on one of these lanes, taken from its queue; None if no lane with room has a task
        it may run.

        A lane with room takes its own first task (a unit of a family it prepared), else the first task of no lane
        (a family to prepare; the least busy lane first); where none has one, an idle lane takes the oldest task
        another lane holds (one that lane has no room for now), and that task's family with it. Cancelled tasks are
        dropped on the way."""
        if self._closed:
            return None
        room = sorted((lane for lane in lanes if self._busy[lane] < DEPTH), key=self._busy.__getitem__)
        for lane in room:
            if queue := self._oldest((self._queues[lane],)) or self._oldest((self._open,)):
                return lane, queue.pop(0)
        for lane in room:
            if self._busy[lane] == 0 and (queue := self._oldest(self._queues)):
                return lane, self._steal(lane, queue)
        return None

    def _steal(self, lane: int, queue: list[_Task]) -> _Task:
        """The first task of another lane's queue, taken by `lane`, with the rest of its family's tasks: the family
        then lives there (it is read once more, not once per unit taken: a queue holds a candidate's units of every
        family in turn)."""
        task = queue.pop(0)
        if task.family is not None:  # (`lane` found nothing of its own to run: its queue is empty)
            self._queues[lane] = [t for t in queue if t.family is task.family]
            queue[:] = [t for t in queue if t.family is not task.family]
            self._home[task.family] = lane
        return task

    def _oldest(self, queues) -> list[_Task] | None:
        """Of these queues, the one whose first task was submitted first (cancelled tasks at their fronts dropped
        on the way), None if all are empty."""
        for queue in queues:
            while queue and queue[0].future.cancelled():
                self._release(queue.pop(0).future)
        return min((q for q in queues if q), key=lambda q: q[0].seq, default=None)

    def _release(self, future: concurrent.futures.Future, lane: int | None = None) -> None:
        """A family done on `lane` (None: cancelled before it was sent): the tasks that wait for it go to that lane's
        queue (to the first lane free where it was not sent: they fail there at once, their family cancelled)."""
        for waiting in self._waiting.pop(future, []):
            if lane is None:
                bisect.insort(self._open, dataclasses.replace(waiting, family=None))
            else:
                bisect.insort(self._queues[lane], waiting)
        if lane is not None:
            self._home[future] = lane

    def _send(self, lane: int, task: _Task) -> None:
        """The task to its lane's process (outside the lock); its future is done when that task is."""
        if not task.future.set_running_or_notify_cancel():  # (cancelled since it was picked)
            self._done(lane, task, lambda: None)
            return
        try:
            sent = self._executor(lane).submit(task.fn, *_arguments(task))
        except BaseException as exc:  # (its family failed or was cancelled; a lane that cannot start)
            self._done(lane, task, functools.partial(task.future.set_exception, exc))
            return
        sent.add_done_callback(functools.partial(self._settle, lane, task))

    def _executor(self, lane: int) -> concurrent.futures.Executor:
        """The lane's executor, made anew where there is none or its process died (loky's pool is then broken)."""
        ex = self._executors[lane]
        if ex is None or ex._flags.broken:  # (loky's flag)
            if ex is not None:
                ex.shutdown(wait=False)
            ex = self._executors[lane] = self._make()
        return ex

    def _settle(self, lane: int, task: _Task, sent: concurrent.futures.Future) -> None:
        """What the lane's process gave, onto the caller's future."""
        if sent.cancelled():
            self._done(lane, task, functools.partial(task.future.set_exception, concurrent.futures.CancelledError()))
        elif sent.exception() is not None:
            self._done(lane, task, functools.partial(task.future.set_exception, sent.exception()))
        else:
            self._done(lane, task, functools.partial(task.future.set_result, sent.result()))

    def _done(self, lane: int, task: _Task, outcome: Callable[[], None]) -> None:
        """The task's outcome set (under the lock: a family is done exactly when its waiting tasks move to its
        lane), the lane has room again, and a family's waiting tasks go to this lane."""
        with self._changed:
            outcome()
            self._busy[lane] -= 1
            if task.family is None:
                self._release(task.future, lane)
            self._changed.notify()


def _arguments(task: _Task) -> tuple:
    """The task's arguments, a future among them (its family, done) replaced by its result."""
    return tuple(a.result() if isinstance(a, concurrent.futures.Future) else a for a in task.args)
