"""Execute: where an audit's work runs, one seam at two levels.

Where a unit (candidate x dtype x family) runs: `pool(workers, scheduler, isolation, memory_mib)` gives `Serial`
(this process, the plan's order), `Local` (`workers` processes on this machine: loky) or `Dask` (a cluster's
workers; GPU candidates only on workers with a GPU resource). Each runs a task as `fn(*args, ex=executor)`.

Where a candidate call runs: an executor's `call_all(candidate, arrays, mask, shapes, dtype, timeout)` returns
(outputs, note) or raises CandidateError / CandidateSkip exactly as `adapters.call_all` does (`call`: one
output), so an error row or a skip row follows. `executor(isolation, memory_mib)` makes one; `with executor(...) as
ex:` (or `ex.close()`) releases its worker. `calls(candidate, prepared, timeout, ex)` makes a unit's calls: the
candidate's own on each case, and those its checks need (the invariants' probes, attention's leak probe).

- `InProcess`: the calling process itself (SIGALRM time limits); `--isolation none`, for debugging.
- `Isolated`: each call in a reused worker process; a crash, abort, exit, hang or memory blow-up in a candidate is
  a CandidateError naming the cause ("killed by SIGSEGV", "exited with status 3", "called sys.exit(0)",
  "no answer in 60 s: killed", "ran out of memory (...)"), and the next call gets a fresh worker.

Both remember a candidate that ran past its time limit: later calls of it in that dtype raise
CandidateError(NOT_AGAIN) at once (`past_limit(candidate, dtype)` tells), for the executor's life (a worker's
tasks each see it `Scoped`: their own memory).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import _lazy

#: The public names and the module each lives in: they load on first use, so a worker process (which imports
#: `_worker` alone) starts without the parent's side (pools, executors, the calls' planning).
_PUBLIC = {
    "Called": "._calls",
    "calls": "._calls",
    "NOT_AGAIN": "._executor",
    "Executor": "._executor",
    "InProcess": "._executor",
    "TimedOut": "._executor",
    "Isolated": "._isolated",
    "ISOLATION": "._serial",
    "executor": "._serial",
    "located": "._serial",
    "needs_gpu": "._serial",
    "pool": "._pool",
    "sendable": "._serial",
}

if TYPE_CHECKING:
    from ._calls import Called as Called
    from ._calls import calls as calls
    from ._executor import NOT_AGAIN as NOT_AGAIN
    from ._executor import Executor as Executor
    from ._executor import InProcess as InProcess
    from ._executor import TimedOut as TimedOut
    from ._isolated import Isolated as Isolated
    from ._pool import pool as pool
    from ._serial import ISOLATION as ISOLATION
    from ._serial import executor as executor
    from ._serial import located as located
    from ._serial import needs_gpu as needs_gpu
    from ._serial import sendable as sendable


__getattr__ = _lazy.first_use(__name__, _PUBLIC)


__all__ = [
    "ISOLATION",
    "NOT_AGAIN",
    "Called",
    "Executor",
    "InProcess",
    "Isolated",
    "TimedOut",
    "calls",
    "executor",
    "located",
    "needs_gpu",
    "pool",
    "sendable",
]
