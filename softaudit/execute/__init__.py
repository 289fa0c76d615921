"""Where a candidate call runs: in softaudit's own process, or in worker processes (isolation).

One seam for the runner: an executor's `call(candidate, arrays, mask, shape, dtype, timeout)` returns
(output, note) or raises CandidateError / CandidateSkip exactly as `adapters._call.call` does, so an error row or
a skip row follows as today. `with Isolated() as ex:` (or `ex.close()`) releases the workers.

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

__all__ = ["NOT_AGAIN", "Executor", "InProcess", "Isolated", "TimedOut"]
