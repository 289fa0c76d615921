"""Candidates called in a worker process, reused across calls: a crash, an exit, a hang or a memory blow-up in a
candidate becomes a CandidateError naming the cause, and the next call gets a fresh worker.

The pool is loky's (the engine under joblib and scikit-learn), not multiprocessing's or our own:
- its workers start as fresh interpreters (fork + exec: spawn's semantics, none of fork's trouble with torch, CUDA
  and threads) without re-running the user's `__main__`, so a script that calls `softaudit.audit()` with no
  `if __name__ == "__main__"` guard works (multiprocessing's spawn and forkserver would run it again in the worker);
- a dead worker gives TerminatedWorkerError with its exit code or signal (the standard library's BrokenProcessPool
  gives none), which is the cause a user needs;
- `shutdown(kill_workers=True)` kills a hung worker with SIGKILL (a blocked SIGALRM, a native loop, a swallowed
  exception cannot stop that); the standard library's executor cannot kill a running task at all;
- cloudpickle is built in: a lambda or closure given to `softaudit.audit()` can reach the worker.

One worker: an executor makes one call at a time (parallel units each have their own executor, in their own worker
process: softaudit/execute/_pool.py). A hung worker is killed and replaced: the next call starts a fresh
interpreter and loads its candidate again (longer with torch or JAX than with numpy alone: docs/benchmarks.md,
"Isolation", has the times); a call's time limit never counts that start or load.
The parent's signal handlers and interval timers are never touched: time is kept by waiting on the future.

(Longer than the house's 400 lines: one worker's life (started ahead, called, timed, killed, replaced, its death put in
words) is one state machine around one loky executor, and its helpers read that state.)
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import multiprocessing
import os
import re
import signal
import time
from concurrent.futures import BrokenExecutor

from ..adapters import CandidateError, CandidateSkip
from . import _worker
from ._arena import Arena
from ._executor import Executor, InProcess, TimedOut, _unit


class Isolated(Executor):
    """Each call in a worker process, one worker reused across calls.

    memory_mib: the worker's address-space limit (RLIMIT_AS, in MiB), None for none; an allocation past it is a
    "ran out of memory" error, not a dead run. It counts the address space the libraries map: torch's import maps
    gigabytes, and CUDA reserves far more (leave it None for GPU candidates). load_timeout: seconds for starting
    a worker and loading a candidate in it (imports, not the call).

    A candidate reaches the worker by its source target ("pkg.mod:fn", "file.py:fn"), loaded once per worker;
    one without a source (a lambda given to `softaudit.audit()`) by cloudpickle, sent once per worker; one that
    cloudpickle cannot send runs in this process, as InProcess would, and its note says so.
    """

    batches = True

    def __init__(self, memory_mib: int | None = None, load_timeout: float = 120.0):
        super().__init__()
        self.memory_mib = memory_mib
        self.load_timeout = load_timeout
        self._pool = None
        self._ready: set[str] = set()  # the keys loaded in the current worker
        self._unloadable: dict[str, str] = {}  # key -> why it does not load in a worker
        self._sent: dict[int, tuple] = {}  # id(callable) -> (callable, key, cloudpickled or None, why not)
        self._here = InProcess()
        self._arena = None
        self._oom_kills = None
        self._last = None  # the last future submitted to the worker
        self._started = None  # the context (`_context`) the worker started in
        self._ahead = None  # the calls sent ahead whose answers are not taken yet (`send_many`)

    def _call(self, candidate, arrays, mask, shapes, dtype, timeout, reuse, options=None):
        key, pickled, unsendable = self._ticket(candidate)
        if unsendable:
            outs, note = self._here._call(candidate, arrays, mask, shapes, dtype, timeout, reuse, options)
            return outs, "; ".join(n for n in (note, f"ran in process: {unsendable}") if n)
        ((outs, answer),) = self._run(candidate, key, pickled, [(arrays, mask, shapes, options)], dtype, timeout)
        return outs, answer[1]

    def _call_many(self, candidate, calls, dtype, timeout):
        key, pickled, unsendable = self._ticket(candidate)
        if unsendable:
            return super()._call_many(candidate, calls, dtype, timeout)
        return [
            (outs, answer[1], answer[2]) for outs, answer in self._run(candidate, key, pickled, calls, dtype, timeout)
        ]

    def _run(self, candidate, key, pickled, calls, dtype, timeout) -> list[tuple]:
        """The calls, (arrays, mask, shapes, options) each, in one round trip to the worker: (outputs, answer) of
        each, or the first call's CandidateSkip or CandidateError. Each call has `timeout` of its own (the worker
        marks in the arena which call it is in, and since when)."""
        jobs = self._put(calls, dtype)
        for _ in range(2):  # (a second time only if the worker had lost the candidate)
            self._load(key, candidate, pickled)
            answers = self._answered(self._submit(_worker.run, *self._job(candidate, key, jobs)), timeout, len(calls))
            if answers[0][0] != "unloaded":
                break
            self._ready.discard(key)
        return self._outputs(jobs, answers)

    def send_many(self, candidate, calls, dtype, timeout):
        """The calls sent to the worker now (the candidate loaded first), their answers taken when asked or before
        anything else uses the worker: the audit judges the unit before while the worker makes them
        (softaudit/execute/_serial.py, Serial.submit_staged). One not sent to a worker is called when asked."""
        self._settle()  # (the calls sent before may have run past the time limit: this candidate's then are not made)
        key, pickled, unsendable = self._ticket(candidate)
        if unsendable or self.past_limit(candidate, dtype):
            return super().send_many(candidate, calls, dtype, timeout)
        try:
            self._load(key, candidate, pickled)
        except CandidateError as exc:  # (raised as it is read, as call_many would)
            if isinstance(exc, TimedOut):
                self._past_limit.add(_unit(candidate, dtype))
            return functools.partial(_raise, exc)
        calls = [call if len(call) == 4 else (*call, None) for call in calls]
        jobs = self._put(calls, dtype)
        future = self._submit(_worker.run, *self._job(candidate, key, jobs))
        self._ahead = _Ahead(candidate, key, pickled, calls, dtype, timeout, jobs, future)
        self._handed(future)
        return functools.partial(self._answers, self._ahead)

    def _handed(self, future, within: float = 0.02) -> None:
        """Wait until the worker has begun the calls just sent (or `within` s): loky's threads in this process take
        them to it, and would wait for the GIL while this process judges (a warm audit of the softmax built-ins,
        quick suite: the worker had begun 47 to 104 of its 144 units' calls when their answers were asked for)."""
        until = time.monotonic() + within
        while self._arena.progress()[0] < 0 and not future.done() and time.monotonic() < until:
            time.sleep(1e-4)

    def _answers(self, ahead: _Ahead) -> list[tuple]:
        """The answers of calls sent ahead, (outputs, note, seconds) each, or what stopped them raised."""
        if ahead is self._ahead:
            self._settle()
        if isinstance(ahead.answers, BaseException):
            raise ahead.answers
        return ahead.answers

    def _settle(self) -> None:
        """Take the answers of the calls sent ahead (their outputs out of the arena, each call's time limit kept, a
        candidate past it remembered) before anything else uses the worker or the arena."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return
        try:
            answers = self._answered(ahead.future, ahead.timeout, len(ahead.calls), ahead=True)
            if answers[0][0] == "unloaded":  # (the worker was replaced meanwhile)
                self._ready.discard(ahead.key)
                outputs = self._run(ahead.candidate, ahead.key, ahead.pickled, ahead.calls, ahead.dtype, ahead.timeout)
            else:
                outputs = self._outputs(ahead.jobs, answers)
            ahead.answers = [(outs, answer[1], answer[2]) for outs, answer in outputs]
        except (CandidateError, CandidateSkip) as exc:
            if isinstance(exc, TimedOut):
                self._past_limit.add(_unit(ahead.candidate, ahead.dtype))
            ahead.answers = exc

    def _answered(self, future, timeout, calls: int, ahead: bool = False) -> list:
        """_worker.run's answers from its future, each of its calls given `timeout` from its own start (sent ahead:
        a single call too, as it may have run a while before this waits for it)."""
        timeout = timeout or None  # (0 is no limit, as adapters.call has it)
        late = f"no answer in {timeout:g} s: killed" if timeout else ""
        answers, loaded = self._result(future, timeout, late, watched=ahead or calls > 1)
        self._frameworks |= loaded  # (a worker replaced later ran this run's candidates all the same)
        return answers

    def _put(self, calls: list, dtype) -> list:
        """The calls' inputs written to the arena (the answers of calls sent ahead taken out first): each call's job
        for the worker, (the inputs' names, their specs and the mask's, the outputs' specs, options)."""
        self._settle()
        if self._arena is None:
            self._arena = Arena()
        inputs = [a for arrays, mask, *_ in calls for a in (*arrays.values(), mask)]
        specs, outs = self._arena.put(inputs, [s for _, _, shapes, _ in calls for s in shapes], dtype)
        jobs = []
        for arrays, _, shapes, options in calls:  # (each call's share of the specs, in order)
            jobs.append((list(arrays), specs[: len(arrays) + 1], outs[: len(shapes)], options))
            specs, outs = specs[len(arrays) + 1 :], outs[len(shapes) :]
        return jobs

    def _job(self, candidate, key: str, jobs: list) -> tuple:
        """_worker.run's arguments."""
        return key, dataclasses.replace(candidate, call=None), jobs, self._arena.path, self._arena.size

    def _outputs(self, jobs: list, answers: list) -> list[tuple]:
        """(outputs, answer) of each job, copied out of the arena; the first skip or error raised."""
        for answer in answers:
            if answer[0] == "skip":
                raise CandidateSkip(answer[1])
            if answer[0] == "error":
                raise CandidateError(answer[1])
        return [(tuple(self._arena.take(out) for out in job[2]), answer) for job, answer in zip(jobs, answers)]

    def frameworks(self) -> dict:
        return super().frameworks() | self._here.frameworks()  # (the workers', and this process's where it called)

    def _ticket(self, candidate) -> tuple:
        """(key, cloudpickled callable or None, why it cannot be sent or "")."""
        if candidate.source:
            return candidate.source, None, ""
        found = self._sent.get(id(candidate.call))
        if found is None:
            import cloudpickle  # (loky's own dependency)

            try:
                pickled, why = cloudpickle.dumps(candidate.call), ""
            except Exception as exc:
                pickled, why = None, f"cloudpickle cannot send it ({type(exc).__name__}: {str(exc)[:80]})"
            # (the callable is kept: its id stays its own while the entry lives)
            found = self._sent[id(candidate.call)] = (candidate.call, f"pickled:{len(self._sent)}", pickled, why)
        return found[1:]

    def _load(self, key: str, candidate, pickled) -> None:
        if key in self._unloadable:
            raise CandidateError(self._unloadable[key])
        if key in self._ready:
            return
        args = (key, candidate.kind, candidate.source, pickled)
        late = f"did not load in {self.load_timeout:g} s: killed"
        answer = self._result(self._submit(_worker.load, *args), self.load_timeout, late)
        if answer[0] == "error":
            self._unloadable[key] = answer[1]
            raise CandidateError(answer[1])
        self._ready.add(key)

    def start(self) -> None:
        """Start the worker (an interpreter and softaudit's imports) and return at once; the first
        call waits for what is left of its start."""
        if self._pool is None:
            self._submit(_worker.ready)

    def _submit(self, fn, *args):
        """fn(*args) submitted to the worker, started first if there is none (or the one an earlier executor of
        this process kept, told to forget its candidates); its future. Calls sent ahead are answered first."""
        self._settle()
        if self._pool is None:
            context = _context(self.memory_mib)
            self._pool = _KEPT.pop(context, None)
            if self._pool is not None:
                try:
                    self._pool.submit(_worker.forget)
                    self._started = context
                except BrokenExecutor:  # (it died while kept)
                    self._pool = None
            self._oom_kills = _oom_kills()
        if self._pool is None:
            from loky import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(
                max_workers=1, initializer=_worker.setup, initargs=(self.memory_mib,), env=_worker.ENV
            )
            self._started = _context(self.memory_mib)
        with _may_start_processes():  # (loky starts its worker in submit, on this thread)
            self._last = self._pool.submit(fn, *args)
            return self._last

    def _result(self, future, timeout: float | None, late: str, watched: bool = False):
        """The future's result from the worker; a worker that dies or is late is killed and replaced, and the call
        raises. watched: it makes several calls, each marked in the arena as it starts; each gets `timeout` from
        its own start (the round trip as long as they take)."""
        try:
            return self._watch(future, timeout) if watched and timeout else future.result(timeout)
        except TimeoutError:
            self._replace()
            raise TimedOut(late) from None
        except BrokenExecutor as exc:  # loky's TerminatedWorkerError is one
            cause = _death(exc, self._oom_kills)
            self._replace()
            raise CandidateError(cause) from None

    def _watch(self, future, timeout: float):
        """future's result, with each call it makes given `timeout` from its start (TimeoutError otherwise): the
        deadline is read again before it is enforced, as a call that started meanwhile has its own."""
        submitted = time.monotonic()
        while True:
            index, since = self._arena.progress()
            deadline = (since if index >= 0 else submitted) + timeout
            try:
                return future.result(max(0.0, deadline - time.monotonic()) + 0.005)
            except TimeoutError:
                if self._arena.progress() == (index, since) and time.monotonic() >= deadline:
                    raise

    def _replace(self) -> None:
        """Kill the worker (SIGKILL); the next call starts a fresh one."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, kill_workers=True)
        self._pool = None
        self._ready.clear()

    def close(self, keep: bool = True) -> None:
        """Release the worker: with keep, kept for the next executor of this process (with the same memory limit)
        where it is sound, idle and has loaded no framework (an audit of numpy code names none, and torch's or JAX's
        threads and memory leave with the worker), else killed; and the arena. keep=False where the process is on
        its way out (a pool's worker process: multiprocessing would wait for a kept child forever)."""
        idle = self._last is None or self._last.done()  # (a call still running, as when stopped: killed)
        context = _context(self.memory_mib)
        sound = self._pool is not None and idle and not self._frameworks and self._started == context
        if keep and sound and not _KEPT:
            _KEPT[context], self._pool = self._pool, None
            self._ready.clear()
            _close_kept_at_exit()
        self._ahead = None
        self._replace()
        if self._arena is not None:
            self._arena.close()
            self._arena = None


def _raise(exc: BaseException):
    raise exc


@dataclasses.dataclass
class _Ahead:
    """Calls sent to the worker ahead (Isolated.send_many): what taking their answers needs, and then the answers,
    (outputs, note, seconds) each, or the CandidateError or CandidateSkip that stopped them."""

    candidate: object
    key: str
    pickled: bytes | None
    calls: list
    dtype: object
    timeout: float | None
    jobs: list
    future: object
    answers: object = None


#: context -> the one worker an executor of this process closed, kept for the next executor started in the same
#: context (its start, an interpreter and softaudit's imports, is a large share of a short warm audit, and would
#: be paid again by every audit a test suite or a notebook runs).
_KEPT: dict = {}


def _context(memory_mib: int | None) -> tuple:
    """What a worker takes from its start and a later executor must find the same to reuse it: the memory limit,
    the working folder (a file candidate's relative path) and the environment (a candidate reads it; torch and
    the BLAS read theirs when they load)."""
    return memory_mib, os.getcwd(), hash(frozenset(os.environ.items()))


@functools.cache
def _close_kept_at_exit() -> None:
    """Kill the kept workers when the process exits (registered once; a kept worker also ends itself once its
    parent is gone, _worker.setup)."""

    def close() -> None:
        for pool in _KEPT.values():
            pool.shutdown(wait=False, kill_workers=True)
        _KEPT.clear()

    atexit.register(close)


@contextlib.contextmanager
def _may_start_processes():
    """Let a daemonic process start the worker. multiprocessing refuses a daemonic process children, to keep it
    from leaving them orphaned when it is ended; a Dask worker started as Dask's docs show (a nanny's child) is
    daemonic. The worker started here is closed with its executor (multiprocessing.util.Finalize when the process
    exits: softaudit/execute/_pool.task) and ends itself when its parent is gone, even killed (_worker.setup), so
    the refusal is lifted while the worker starts and put back after."""
    config = multiprocessing.current_process()._config
    daemonic = config.get("daemon")
    if daemonic:
        config["daemon"] = False
    try:
        yield
    finally:
        if daemonic:
            config["daemon"] = daemonic


def _death(exc: BaseException, oom_kills_before: int | None) -> str:
    """A dead worker's cause, from the exit code loky reports: "killed by SIGSEGV", "exited with status 3"."""
    found = re.search(r"exit codes of the workers are \{[^}]*?\((-?\d+)\)", str(exc))
    if found is None:
        return f"the worker process failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    code = int(found[1])
    if code >= 0:
        return f"exited with status {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    if -code == signal.SIGKILL:
        after = _oom_kills()
        if after is not None and oom_kills_before is not None and after > oom_kills_before:
            return "ran out of memory (killed by SIGKILL)"
        return "killed by SIGKILL (out of memory?)"  # (the usual sender; the cgroup could not say)
    return f"killed by {name}"


def _oom_kills() -> int | None:
    """How many processes the kernel's OOM killer has killed in this cgroup (v2 or v1), where it says."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(path) as f:
                found = re.search(r"^oom_kill (\d+)$", f.read(), re.M)
        except OSError:
            continue
        if found:
            return int(found[1])
    return None
