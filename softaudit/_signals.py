"""Ctrl-C and SIGTERM during `softaudit run`: the first stops new work and keeps what finished, a second stops the work
running too (what finished is still written), a third quits at once; during `softaudit hunt` (`at_once`): either
quits at once.

The audit itself never touches signals (softaudit.audit takes a `stop` event); the command line installs these
handlers around its run and puts the old ones back after it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interruption:
    """The run's answer to SIGINT and SIGTERM: the first sets `stop` (the audit starts nothing new and the reports
    say "interrupted"); a second (REPEAT seconds or more later) raises KeyboardInterrupt, which inside `auditing()`
    the audit answers by abandoning the units running and returning those finished (softaudit.audit's `stop`), and
    after it quits at once, as a third does, except inside `held()`, which finishes first (moving a set of reports
    into place: never half of one).

    `with Interruption(say) as it:` installs the handlers (main thread only; elsewhere it only holds the event);
    say(line) tells the user what the first and second signals did."""

    #: A second signal this soon after the first is the same request: GNU `timeout`, and a stop sent to a process
    #: group, deliver one signal twice within microseconds. A person pressing Ctrl-C again takes longer. (The time is
    #: taken when the main thread runs the handler, not when the signal arrives: a repeat that reached another
    #: thread while the main one waited can read as a second request; it then costs the units running, not the
    #: finished rows.)
    REPEAT = 0.25

    def __init__(self, say=None):
        self.stop = threading.Event()
        self._first = 0.0  # time.monotonic() of the first signal
        self._say = say
        self._held = self._pending = self._auditing = self._abandoned = False
        self._previous: dict = {}

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if not self.stop.is_set():
            self.stop.set()
            self._first = time.monotonic()
            self._tell(f"{name}: stopping; the units running finish, the finished rows are written (again to stop now)")
            return
        if time.monotonic() - self._first < self.REPEAT:
            return
        if self._held:
            self._pending = True
            return
        if self._auditing and not self._abandoned:
            self._abandoned = True
            self._tell(f"{name} again: the units running are stopped; the finished rows are written (again to quit)")
        raise KeyboardInterrupt

    def _tell(self, line: str) -> None:
        if self._say:
            self._say(line)

    @contextlib.contextmanager
    def auditing(self):
        """While the audit runs, a second signal abandons the units running (the audit keeps the finished rows);
        after it, a second signal quits at once."""
        self._auditing = True
        try:
            yield
        finally:
            self._auditing = False

    @contextlib.contextmanager
    def held(self):
        """A second signal waits until the block is done, then raises KeyboardInterrupt."""
        self._held = True
        try:
            yield
        finally:
            self._held = False
        if self._pending:
            raise KeyboardInterrupt

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}


@contextlib.contextmanager
def at_once():
    """SIGINT and SIGTERM both raise KeyboardInterrupt inside the block (main thread only; the old handlers come
    back after it): SIGTERM's default would end the process without unwinding, leaving its worker processes
    behind, while KeyboardInterrupt closes them on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _raise(signum, frame) -> None:
    raise KeyboardInterrupt
