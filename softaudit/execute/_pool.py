"""Where an audit's units run: in this process (`Serial`), in worker processes on this machine (`Local`, a loky pool:
`--workers N`), or on a Dask cluster (`softaudit.execute._dask.Dask`: `--scheduler tcp://HOST:PORT`).

A task is a function called as `fn(*args, ex=executor)`: the pool gives it the executor its candidate calls go
through. In this process that is the audit's own. In a worker process it is the process's (the thread's, on a
Dask worker with several threads), made once and kept: with isolation "worker" the calls then run in a child
process of that worker, as a serial run's do in a child of softaudit's process, so a crash is an error row there
too. Each task sees it `Scoped`: a candidate that ran past its time limit in one task is not remembered in the
next, so what a unit gives never depends on which worker ran it; the runner applies "not called again" across a
candidate's families itself, in the plan's order.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import tempfile
from pathlib import Path

from ._executor import Scoped
from ._lanes import Lanes
from ._serial import Serial, _check, _whole, executor, task
from ._worker import ENV, ignore_stops


def pool(
    workers: int = 1,
    scheduler=None,
    isolation: str = "worker",
    memory_mib: int | None = None,
    folder: Path | None = None,
):
    """Where the units run: a Dask cluster if `scheduler` (an address or a distributed.Client) is given, else
    `workers` processes on this machine (1: this process; "auto": `usable_cores()`). folder: the cache folder,
    beside which Local keeps the prepared families its workers map. ValueError (one line) for a bad value, or a
    scheduler without Dask."""
    _check(isolation, memory_mib)
    if workers == "auto":
        workers = usable_cores()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a whole number > 0 or auto, got {workers!r}")
    if scheduler is not None:
        from ._dask import Dask

        return Dask(scheduler, isolation, memory_mib)
    return Local(workers, isolation, memory_mib, folder) if workers > 1 else Serial(executor(isolation, memory_mib))


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container's or a batch system's limit sets),
    else the machine's: how many workers "auto" starts."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (no sched_getaffinity: macOS, Windows)
        return os.cpu_count() or 1


class Local(Serial):
    """Units in this process and `workers - 1` worker processes on this machine (loky: fresh interpreters; a lane's
    dead process is reported and replaced), each with its own executor. Prepared families reach them through files
    they map (`share`: a private folder beside the cache, removed on close), so a family is computed and copied once,
    not per unit; and a family's units go to the process that prepared it (`_lanes.Lanes`), which keeps it: each
    family is read, and its cases' measure bases made, in one process, not in every worker. This process runs its
    lane's tasks while it waits for the others' (`work`), and the workers start only once the work queued is worth
    their start: a plan too small to repay it runs here alone, as `--workers 1` runs it."""

    parallel = True

    def __init__(self, workers: int, isolation: str, memory_mib: int | None, folder: Path | None):
        super().__init__(executor(isolation, memory_mib))
        self.settings, self.width = (isolation, memory_mib), workers
        self._lanes = Lanes(workers, worker_lane, here=self._here)
        self.share = _private_folder(folder)

    def submit(self, fn, *args, gpu: bool = False) -> concurrent.futures.Future:
        """fn(*args, ex=...) in a worker process; its future. A future among args (a prepared family) stands for its
        result: the task runs where that one ran, once it is done."""
        return self._lanes.submit(task, fn, *self.settings, *args)

    def submit_staged(self, fn, *args, gpu: bool = False) -> concurrent.futures.Future:
        return self.submit(_whole, fn, *args, gpu=gpu)

    def work(self) -> bool:
        """Run a task of this process's lane (the caller waits for results meanwhile); whether one ran."""
        return self._lanes.run_here()

    def _here(self, worker_task, fn, isolation, memory_mib, *args):
        """A task as this process's lane starts it (`submit`'s arguments: what a worker runs as `task`): through the
        audit's executor, scoped to the task; a staged one's rest comes back to run later, another's result at once."""
        ex = Scoped(self.ex, ahead=True)
        if fn is _whole:
            return args[0](*args[1:], ex=ex)
        result = fn(*args, ex=ex)
        return lambda: result

    def cancel(self, futures: list) -> list:
        return [future for future in futures if future.cancel()]

    def close(self, killed: bool = False) -> None:
        # (killed: the lanes' processes get SIGKILL rather than loky's shutdown(kill_workers=True), which sets an
        # error on every future not yet run, the cancelled ones too, and its manager thread dies of the
        # InvalidStateError before it kills the workers (loky 3.7, and its main branch); their isolation workers
        # follow them: _end_with_parent.)
        self._lanes.close(killed)
        shutil.rmtree(self.share, ignore_errors=True)
        super().close(killed)


def worker_lane() -> concurrent.futures.Executor:
    """A worker lane's executor: a loky pool of one process. The families a worker maps count in its memory: loky's
    leak check (300 MB more than at its start) would retire it again and again, each time starting its isolation
    child and mapping the families anew. One BLAS thread, as every call has (softaudit/_threads.py)."""
    from loky import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=1, initializer=ignore_stops, env=ENV)


def _private_folder(folder: Path | None) -> Path:
    """A fresh private folder in the cache folder (the same file system: a kept family is linked, not copied), else
    in the system's temporary folder. Those a killed audit left behind there are removed first."""
    if folder is not None:
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            _remove_abandoned(folder)
            return Path(tempfile.mkdtemp(prefix=f".share-{os.getpid()}-", dir=folder))
        except OSError:
            pass
    return Path(tempfile.mkdtemp(prefix=f"softaudit-share-{os.getpid()}-"))


def _remove_abandoned(folder: Path) -> None:
    """Remove the private folders whose audit's process is gone (killed before it could remove its own)."""
    for path in folder.glob(".share-*-*"):
        pid = int(path.name.split("-")[1]) if path.name.split("-")[1].isdigit() else None
        if pid is not None and not _alive(pid):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # (another user's process)
        return True
    return True
