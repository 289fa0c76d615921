"""Where a candidate call runs: in softaudit's own process, or in worker processes (isolation).

One seam for the runner: an executor's `call_all(candidate, arrays, mask, shapes, dtype, timeout)` returns
(outputs, note) or raises CandidateError / CandidateSkip exactly as `adapters.call_all` does (`call`: one
output), so an error row or a skip row follows as today. `executor(isolation, memory_mib)` makes the one an audit
uses; `with executor(...) as ex:` (or `ex.close()`) releases the workers.

- `InProcess`: today's behaviour (SIGALRM time limits); `--isolation none`, for debugging.
- `Isolated`: each call in a reused worker process; a crash, abort, exit, hang or memory blow-up in a candidate is
  a CandidateError naming the cause ("killed by SIGSEGV", "exited with status 3", "called sys.exit(0)",
  "no answer in 60 s: killed", "ran out of memory (...)"), and the next call gets a fresh worker.

Both remember a candidate that ran past its time limit: later calls of it in that dtype raise
CandidateError(NOT_AGAIN) at once (`past_limit(candidate, dtype)` tells), for the executor's life.
"""

from ._executor import NOT_AGAIN as NOT_AGAIN
from ._executor import Executor as Executor
from ._executor import InProcess as InProcess
from ._executor import TimedOut as TimedOut
from ._isolated import Isolated as Isolated

#: The values of `isolation` (`softaudit run --isolation`, the config key, `audit(isolation=...)`).
ISOLATION = ("worker", "none")


def executor(isolation: str = "worker", memory_mib: int | None = None) -> Executor:
    """The executor for an audit: "worker" Isolated(memory_mib), "none" InProcess (memory_mib then has no effect).
    ValueError (one line) for anything else."""
    if isolation not in ISOLATION:
        raise ValueError(f"isolation must be one of {', '.join(ISOLATION)}, got {isolation!r}")
    if memory_mib is not None and (isinstance(memory_mib, bool) or not isinstance(memory_mib, int) or memory_mib <= 0):
        raise ValueError(f"memory limit must be a whole number of MiB > 0, got {memory_mib!r}")
    return Isolated(memory_mib=memory_mib) if isolation == "worker" else InProcess()


__all__ = ["ISOLATION", "NOT_AGAIN", "Executor", "InProcess", "Isolated", "TimedOut", "executor"]
