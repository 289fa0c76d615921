"""Units in this process (`Serial`), and what every pool of units shares: the executor a task's calls go through,
the task a worker process runs (`task`), and the candidate as it travels to one. Local (softaudit/execute/_pool.py)
and Dask (softaudit/execute/_dask.py) build on these; this module imports neither, so the pools depend on it in one
direction.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import multiprocessing.util
import threading
from pathlib import Path

from ..adapters import Candidate, parse_device, time_limits
from ._executor import Executor, InProcess, Scoped
from ._isolated import Isolated

#: The values of `isolation` (`softaudit run --isolation`, the config key, `audit(isolation=...)`).
ISOLATION = ("worker", "none")


def executor(isolation: str = "worker", memory_mib: int | None = None) -> Executor:
    """The executor for an audit: "worker" Isolated(memory_mib), "none" InProcess (memory_mib then has no effect).
    ValueError (one line) for anything else."""
    _check(isolation, memory_mib)
    return Isolated(memory_mib=memory_mib) if isolation == "worker" else InProcess()


def _check(isolation: str, memory_mib: int | None) -> None:
    if isolation not in ISOLATION:
        raise ValueError(f"isolation must be one of {', '.join(ISOLATION)}, got {isolation!r}")
    if memory_mib is not None and (isinstance(memory_mib, bool) or not isinstance(memory_mib, int) or memory_mib <= 0):
        raise ValueError(f"memory limit must be a whole number of MiB > 0, got {memory_mib!r}")


def sendable(candidate: Candidate) -> Candidate:
    """The candidate as it travels to a worker process: by its source (the worker loads it: a user's file or module
    need not pickle), its callable only when it has none (then cloudpickle carries it)."""
    return dataclasses.replace(candidate, call=None) if candidate.source else candidate


def needs_gpu(candidate: Candidate) -> bool:
    """Whether the candidate runs on a GPU (device "cuda", "cuda:N" or "gpu"): a cluster runs it only on workers
    that declare one."""
    return parse_device(candidate.device)[0] == "cuda"


def located(candidate: Candidate) -> Candidate:
    """The candidate with a file source's path made absolute, for a process whose working folder may differ."""
    spec, colon, func = (candidate.source or "").rpartition(":")
    if not (spec.endswith(".py") or "/" in spec or "\\" in spec):
        return candidate
    return dataclasses.replace(candidate, source=f"{Path(spec).resolve()}{colon}{func}")


class Serial:
    """Units in this process, one after another, each run when it is submitted (so the plan's order is the order
    they run in), their calls through the audit's executor. Local and Dask run units elsewhere, with the same
    interface."""

    parallel = False
    width = 1  # how many units run at once
    share = None  # (prepared families are passed as they are)

    def __init__(self, ex: Executor):
        self.ex = ex
        self._limits = contextlib.ExitStack()
        self._staged = None  # (future, the rest of its task) of the staged task not finished

    def submit(self, fn, *args, gpu: bool = False) -> concurrent.futures.Future:
        """fn(*args, ex=...) run now, after the staged task not finished; its future (done). A future among args
        stands for its result."""
        self.finish()
        args = tuple(a.result() if isinstance(a, concurrent.futures.Future) else a for a in args)
        future = concurrent.futures.Future()
        _settle(future, functools.partial(fn, *args, ex=self.ex))
        return future

    def submit_staged(self, fn, *args, gpu: bool = False) -> concurrent.futures.Future:
        """fn(*args, ex=...), which returns the rest of its task (a function of nothing), run now; the rest runs
        after the next task's fn, or at `finish`: a unit's calls are sent to the isolated worker, and this process
        judges the unit before while the worker makes them (about a third of a warm audit of the softmax
        built-ins, quick suite: judging). Its future, done once the rest has run."""
        args = tuple(a.result() if isinstance(a, concurrent.futures.Future) else a for a in args)
        future = concurrent.futures.Future()
        try:
            rest = fn(*args, ex=self.ex)
        except Exception as exc:
            future.set_exception(exc)
        self.finish()
        if not future.done():
            self._staged = future, rest
        return future

    def work(self) -> bool:
        """Run a task here while the caller waits for results, if this process has one; whether one ran (none here:
        every unit ran when it was submitted)."""
        return False

    def finish(self) -> None:
        """Run the rest of the staged task not finished, if any."""
        if self._staged is not None:
            (future, rest), self._staged = self._staged, None
            _settle(future, rest)

    def sent(self, candidate: Candidate) -> tuple[Candidate, Candidate]:
        """(the candidate as its rows name it, the candidate as the unit's process calls it): itself here; in a
        worker process, by its source, a file's path made absolute."""
        return (sendable(candidate), located(sendable(candidate))) if self.parallel else (candidate, candidate)

    def cancel(self, futures: list) -> list:
        """Cancel the futures not started; those cancelled (none here: every unit ran when it was submitted)."""
        return []

    def check(self, candidates: list) -> None:
        """Nothing to check: the plan checked the candidates' devices in this process."""

    def close(self, killed: bool = False) -> None:
        """Release the workers (killed: at once, as on a second Ctrl-C)."""
        self._staged = None
        self.ex.close()

    def __enter__(self):
        if isinstance(self.ex, InProcess):  # (the SIGALRM handler installed once; each call only sets its timer)
            self._limits.enter_context(time_limits())
        if self.ex is not None:
            self.ex.start()  # (an isolated worker starts while the audit plans and reads its families)
        return self

    def __exit__(self, kind, *exc) -> None:
        self._limits.close()
        self.close(killed=kind is not None)


def _settle(future: concurrent.futures.Future, fn) -> None:
    try:
        future.set_result(fn())
    except Exception as exc:
        future.set_exception(exc)


def _whole(fn, *args, ex: Executor):
    """A staged task run whole (Local, Dask: in a worker process, whose units run one after another)."""
    return fn(*args, ex=ex)()


_held = threading.local()  # per worker thread: (isolation, memory_mib) -> its executor


def task(fn, isolation: str, memory_mib: int | None, *args):
    """What a worker runs: fn(*args, ex=...) with this thread's executor, made on first use and closed when the
    process exits, scoped to this task."""
    executors = _held.__dict__.setdefault("executors", {})
    key = (isolation, memory_mib)
    if key not in executors:
        executors[key] = executor(isolation, memory_mib)
        executors[key].start()  # (its worker starts while this task reads or prepares its family)
        # Closed before multiprocessing joins the worker's children on its way out (loky retires a worker whose
        # memory grew, mapped families included): an isolated executor's own worker would otherwise be waited
        # for forever (so it is never kept, either).
        multiprocessing.util.Finalize(None, functools.partial(executors[key].close, keep=False), exitpriority=10)
    return fn(*args, ex=Scoped(executors[key]))
