"""The executor contract, and the in-process executor (today's behaviour, for `--isolation none` and debugging)."""

from __future__ import annotations

import dataclasses
import functools
import time

import numpy as np

from .. import _platform
from .._threads import one_thread
from ..adapters import CandidateError, call_all, load_target

NOT_AGAIN = "not called again: ran past the time limit earlier in this dtype"


class TimedOut(CandidateError):
    """A call that ran past its time limit (a CandidateError: the runner needs no new case)."""


class Executor:
    """Calls candidates: `call_all` as adapters._call.call_all does (`call` for a one-output kind), `close` (or
    `with`) when done.

    A candidate that ran past its time limit is not called again in that dtype: every later call of the same
    (candidate, dtype) raises CandidateError(NOT_AGAIN) at once, for the executor's life (`past_limit` tells).
    `frameworks` says what the process its calls ran in had loaded.
    """

    #: Calls cost a round trip (a worker process): `calls` sends a unit's calls a batch at a time.
    batches = False

    def __init__(self):
        self._past_limit: set[tuple] = set()
        self._frameworks: dict = {}  # what the calls' process had loaded, as of each call (softaudit._platform)

    def call_all(
        self, candidate, arrays: dict, mask, shapes: tuple, dtype, timeout: float | None, reuse=False, options=None
    ):
        """(the outputs cast to dtype, one per shape in `shapes`, note or ""), or CandidateError / CandidateSkip
        with one line saying why.

        reuse: as adapters._call.call_all's (InProcess); an isolated call's outputs are always fresh arrays.
        options: keywords beyond the calling convention (a case's `options`)."""
        key = _unit(candidate, dtype)
        if key in self._past_limit:
            raise CandidateError(NOT_AGAIN)
        try:
            return self._call(candidate, arrays, mask, tuple(shapes), dtype, timeout, reuse, options)
        except TimedOut:
            self._past_limit.add(key)
            raise

    def call_many(self, candidate, calls: list, dtype, timeout: float | None) -> list[tuple]:
        """Several calls of one candidate, (arrays, mask, shapes) or (arrays, mask, shapes, options) each (options:
        keywords beyond the kind's convention, or None), each limited to `timeout`: (outputs, note, seconds) of
        each, in order (the outputs a tuple, seconds the time inside the candidate), or the first call's
        CandidateError or CandidateSkip that stopped them. A worker makes them in one round trip (`Isolated`: a
        unit's many calls cost a round trip each otherwise)."""
        key = _unit(candidate, dtype)
        if key in self._past_limit:
            raise CandidateError(NOT_AGAIN)
        calls = [call if len(call) == 4 else (*call, None) for call in calls]
        try:
            return self._call_many(candidate, calls, dtype, timeout)
        except TimedOut:
            self._past_limit.add(key)
            raise

    def send_many(self, candidate, calls: list, dtype, timeout: float | None):
        """call_many begun: a function that returns its answers, or raises what call_many would. A worker starts on
        them at once (`Isolated`), so that this process can judge the unit before while they run; the calls of an
        executor without one are made when asked."""
        return functools.partial(self.call_many, candidate, calls, dtype, timeout)

    def call(self, candidate, arrays: dict, mask, shape: tuple, dtype, timeout: float | None, reuse: bool = False):
        """A one-output kind's call_all: (output cast to dtype, note or "")."""
        (out,), note = self.call_all(candidate, arrays, mask, (shape,), dtype, timeout, reuse)
        return out, note

    def past_limit(self, candidate, dtype) -> bool:
        """Whether this candidate ran past its time limit earlier in this dtype (and so is not called again)."""
        return _unit(candidate, dtype) in self._past_limit

    def frameworks(self) -> dict:
        """The frameworks (name -> version) and the GPU the process this executor's calls ran in had loaded, as
        seen after each call (softaudit._platform.frameworks); empty before any call. Part of the platform key."""
        return dict(self._frameworks)

    def _call(self, candidate, arrays, mask, shapes, dtype, timeout, reuse, options=None):
        raise NotImplementedError

    def _call_many(self, candidate, calls, dtype, timeout) -> list[tuple]:
        """calls: (arrays, mask, shapes, options) each."""
        answers = []
        for call in calls:
            start = time.perf_counter()
            outs, note = self._call(candidate, *call[:3], dtype, timeout, False, call[3])
            answers.append((outs, note, time.perf_counter() - start))
        return answers

    def start(self) -> None:
        """Begin starting what the calls will need (a worker process), without waiting for it: an audit starts it
        before it plans and reads its families, so that the worker's start overlaps them."""

    def close(self, keep: bool = True) -> None:
        """Release what the executor holds (worker processes); calling it twice is harmless. keep: a worker may be
        kept for the next executor of this process (Isolated's); False as the process ends."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _unit(candidate, dtype) -> tuple:
    # A candidate's identity is what the results table knows it by (its row), not the callable's id.
    return candidate.kind, candidate.name, candidate.source, candidate.framework, candidate.device, np.dtype(dtype).name


_loaded: dict[tuple, object] = {}  # (kind, source) -> the callable, loaded once per process


def loaded(candidate):
    """A candidate sent by its source, its callable loaded here (once per process); CandidateError (one line) if
    the source does not load here."""
    key = (candidate.kind, candidate.source)
    if key not in _loaded:
        try:
            _loaded[key] = load_target(candidate.source, candidate.kind)[0].call
        except Exception as exc:
            raise CandidateError(f"does not load in a worker: {type(exc).__name__}: {exc}") from None
    return dataclasses.replace(candidate, call=_loaded[key])


class InProcess(Executor):
    """Candidates called in softaudit's own process, limited by SIGALRM (the main thread only): a crash, an exit or
    a hang that ignores the alarm takes the run with it. For `--isolation none`: debugging, profiling, prints."""

    def _call(self, candidate, arrays, mask, shapes, dtype, timeout, reuse, options=None):
        if candidate.call is None:  # (sent to this process by its source: softaudit.execute.sendable)
            candidate = loaded(candidate)
        try:
            with one_thread():
                return call_all(candidate, arrays, mask, shapes, dtype, timeout, reuse, options)
        except CandidateError as exc:
            # (adapters.call_all says a timeout only in its message; wired in, it can raise TimedOut itself)
            if str(exc).startswith("ran past the time limit"):
                raise TimedOut(str(exc)) from exc
            raise
        finally:  # (a call that failed may have imported its framework all the same)
            self._frameworks |= _platform.frameworks()


class Scoped(Executor):
    """Another executor's calls, with a memory of its own of the candidates past their time limit: one task's, so
    that what a task gets never depends on what ran before it in the same worker. ahead: calls are sent ahead as the
    shared executor sends them (softaudit's own lane, which judges the unit before meanwhile); else made when their
    answers are asked for (a worker's task, which asks at once: sending ahead only made it wait for the send)."""

    def __init__(self, shared: Executor, ahead: bool = False):
        super().__init__()
        self._shared, self._ahead = shared, ahead
        self.batches = shared.batches

    def _call(self, candidate, arrays, mask, shapes, dtype, timeout, reuse, options=None):
        return self._shared._call(candidate, arrays, mask, shapes, dtype, timeout, reuse, options)

    def _call_many(self, candidate, calls, dtype, timeout):
        return self._shared._call_many(candidate, calls, dtype, timeout)

    def send_many(self, candidate, calls: list, dtype, timeout: float | None):
        """The shared executor's calls begun (its worker starts on them at once: Local's lane in softaudit's
        process judges the unit before meanwhile), a time limit passed remembered by this task, not the shared one."""
        if not self._ahead or self.past_limit(candidate, dtype):
            return super().send_many(candidate, calls, dtype, timeout)
        sent = self._shared.send_many(candidate, calls, dtype, timeout)
        return functools.partial(self._taken, sent, _unit(candidate, dtype))

    def _taken(self, sent, key: tuple) -> list[tuple]:
        try:
            return sent()
        except TimedOut:
            self._past_limit.add(key)
            raise
        finally:
            self._shared._past_limit.discard(key)

    def frameworks(self) -> dict:
        return self._shared.frameworks()  # (one process: what it had loaded, whichever task's call loaded it)
