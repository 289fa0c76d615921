"""What runs inside a worker process: its setup, loading a candidate once, and calling it.

Everything sent back is plain data (a status word, an array, strings), never the candidate's own exception
objects: a result the parent cannot unpickle would break the whole pool. This module imports only what a call
needs, so a worker starts light; a candidate's own imports (torch, JAX) happen when it loads.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import resource
import signal
import threading
import time

import numpy as np

from .. import _platform
from .._threads import ONE_THREAD
from ..adapters import CandidateError, CandidateSkip, call_all, load_target, raised_at
from ._arena import progress, view, worker_views

_loaded: dict = {}  # key -> the candidate's callable, loaded once per worker
_limit_mib: list[int] = []  # the worker's memory limit, for the message


#: loky restarts a worker whose memory grew 300 MB past its size after its first task: a leak check for pools of
#: stateless tasks. Ours keep what they loaded (JAX and its compiled kernels grow past that), so a restart
#: would import and compile it all again, which made an audit of softaudit.frameworks.jax far slower with the
#: check than without it (docs/isolation.md).
NO_LEAK_CHECK = {"LOKY_MAX_MEMORY_LEAK_SIZE": str(2**40)}

#: A worker's environment: no leak check, and one BLAS / OpenMP thread (softaudit/_threads.py).
ENV = NO_LEAK_CHECK | ONE_THREAD


def ignore_stops() -> None:
    """Leave SIGINT and SIGTERM to softaudit's own process: it stops the run, keeps what finished and closes its
    workers (with SIGKILL where one does not end); and end with that process (`_end_with_parent`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _end_with_parent()


def _end_with_parent(every: float = 1.0) -> None:
    """Exit when the process that started this worker is gone. A parent killed before it could close its workers
    (SIGKILL; a Dask worker its nanny killed) leaves them reparented and waiting forever on a pipe something else
    still holds open: a `dask worker` stopped with SIGTERM left its isolation worker behind."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(every)
        os._exit(0)

    threading.Thread(target=watch, name="softaudit-parent-watch", daemon=True).start()


def setup(memory_mib: int | None) -> None:
    """The worker's initializer: its output to /dev/null, Ctrl-C left to the parent, an optional memory limit."""
    # A candidate printing megabytes neither floods the parent's terminal nor blocks on a full pipe; its output is
    # dropped (debug with --isolation none). fd 1 and 2 themselves, so C code's printf goes there too.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    # Ctrl-C, and a SIGTERM sent to the process group (CI's cancel, a container's stop), reach every process: the
    # parent stops and closes the workers; a worker never decides (killed by it, its call would read as an error).
    ignore_stops()
    # A fresh process's malloc (glibc) maps every block past 128 KiB anew and unmaps it on free: a candidate's
    # temporaries then page-fault on every call, much slower than in a process that has freed one large block,
    # which raises that threshold (to 32 MiB at most). Free one now, as the parent process has long done.
    np.empty(2**25 - 2**16, np.uint8)
    if memory_mib:
        limit = memory_mib * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        _limit_mib.append(memory_mib)


def ready() -> None:
    """Nothing: what `Isolated.start` submits, so that the worker starts (and imports) before it is needed."""


def forget() -> None:
    """Forget the candidates loaded here: a worker kept for the next audit of the process (`Isolated.close`) starts
    it as a fresh one would, but for the modules it imported (as the process's own imports stay)."""
    _loaded.clear()


def load(key: str, kind: str, source: str | None, pickled: bytes | None) -> tuple:
    """Load a candidate's callable (its source target, else its cloudpickled callable) and keep it: ("ok",) or
    ("error", message)."""
    if key in _loaded:
        return ("ok",)
    try:
        _loaded[key] = load_target(source, kind)[0].call if source else pickle.loads(pickled)
    except BaseException as exc:  # (a module that calls sys.exit on import, too)
        return ("error", f"does not load in a worker: {type(exc).__name__}: {exc}")
    return ("ok",)


def run(key: str, ticket, jobs: list, path: str, size: int) -> tuple:
    """Call a loaded candidate as adapters.call_all does (no time limit: the parent keeps time), once per job (the
    inputs' names, their specs and the mask's, the outputs' specs, keywords beyond the convention or None), inputs
    and outputs in the arena at path: (answers, frameworks), an answer per job up to the first that is not ("ok",
    note, seconds inside the candidate): ("skip", reason), ("error", message) or ("unloaded",); and the frameworks
    this worker has loaded since (softaudit._platform.frameworks: the candidate imports torch or JAX here, never in
    the parent)."""
    answers = []
    for index, (names, specs, out_specs, options) in enumerate(jobs):
        marks = progress(worker_views(path, size, [])[1])
        marks[1] = time.monotonic()  # (the time first: the parent reads the index, then the time)
        marks[0] = index
        answers.append(_call(key, ticket, names, (path, size, specs, out_specs), options))
        if answers[-1][0] != "ok":
            break
    return answers, _platform.frameworks()


def _call(key: str, ticket, names: list, arena: tuple, options: dict | None) -> tuple:
    fn = _loaded.get(key)
    if fn is None:
        return ("unloaded",)
    candidate = dataclasses.replace(ticket, call=fn)
    path, size, specs, out_specs = arena
    try:
        views, buffer = worker_views(path, size, specs)
        shapes, dtype = tuple(shape for _, shape, _ in out_specs), out_specs[0][2]
        start = time.perf_counter()
        outs, note = call_all(candidate, dict(zip(names, views)), views[-1], shapes, dtype, None, True, options)
        seconds = time.perf_counter() - start
        for out, spec in zip(outs, out_specs):
            view(buffer, spec)[...] = out
    except CandidateSkip as exc:
        return ("skip", str(exc))
    except CandidateError as exc:
        if isinstance(exc.__cause__, MemoryError):
            return ("error", _out_of_memory(exc.__cause__))
        return ("error", str(exc))
    except MemoryError as exc:  # (raised outside the candidate: copying its inputs or its output)
        return ("error", _out_of_memory(exc))
    except SystemExit as exc:  # never the worker's exit, let alone the run's
        return ("error", f"called sys.exit({exc.code!r})")
    except BaseException as exc:  # KeyboardInterrupt, GeneratorExit, a user's BaseException
        return ("error", f"raised {type(exc).__name__}: {exc}{raised_at(exc)}")
    return ("ok", note, seconds)


def _out_of_memory(exc: MemoryError) -> str:
    where = f"past the worker's memory limit of {_limit_mib[0]} MiB" if _limit_mib else "MemoryError"
    return f"ran out of memory ({where})"
