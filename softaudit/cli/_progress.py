"""How far a run or a hunt has got, where a person or a CI log can see it: a bar on a terminal, a plain line at a
steady pace off one (a CI log, `| tee`: "softaudit: 12/64 done, 0:00:31 elapsed, about 0:01:40 left"), nothing
with -q. Both go to stderr, so a run's stdout holds its results alone.

The estimate of what is left is the time per unit of work done since the run began, times the work left. The units
(a candidate in a dtype) are unequal and front-loaded: a family's exact references are computed before its kind's
first candidate runs on it, and count in that candidate's time, while the candidates after it reuse them. So an
audit weighs each unit by its cost estimated before it runs (softaudit.runner.costs: a unit per family, and a cold
family's preparation, where its references are not kept, on the first candidate that needs it), and tells the
weights done and whole through `weigh`; a count of units is the measure where none comes (the hunt's searches). A
bar's usual estimate, the speed between its last few updates, sees only the cheap units after each family's
preparation and can read seconds where minutes are left; equal weights read a first, cold unit as the pace of the
rest (docs/design.md, "Progress", says how the estimate errs).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time

import click

#: Seconds between the plain lines off a terminal.
PACE = 10.0


def remaining(elapsed: float, done: float, total: float | None) -> float | None:
    """Seconds left: the time per unit of work done so far, since the start, times the work left (None before any is
    done, or without a total); done and total are units, or their weights."""
    if not done or total is None or done > total:
        return None
    return elapsed / done * (total - done)


def clock(seconds: float | None) -> str:
    """Seconds as H:MM:SS ("?" for none)."""
    if seconds is None:
        return "?"
    whole = round(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def reporter(quiet: bool, terminal: bool | None = None):
    """(a context manager to hold while the work runs, the progress callback `audit` and `hunt` take, or None): a
    rich bar on a terminal (NO_COLOR is honoured by rich), plain lines at a steady pace off one, nothing when
    quiet. terminal: whether stderr is one (None: ask it). The callback has `weigh` (see the module's docstring)."""
    if quiet:
        return contextlib.nullcontext(), None
    if terminal if terminal is not None else sys.stderr.isatty():
        return _bar()
    lines = Lines()
    return lines, lines


def _bar():
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
    from rich.text import Text

    class Left(ProgressColumn):
        """What is left, by `remaining` (rich's own column reads the speed between the last updates)."""

        def render(self, task) -> Text:
            weighed = getattr(task, "fields", {}).get("weighed")
            done, total = weighed or (task.completed, task.total)
            left = remaining(task.elapsed or 0.0, done, total)
            return Text("" if left is None else f"about {clock(left)} left", style="progress.remaining")

    bar = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        Left(),
        transient=True,
        console=Console(stderr=True),
    )
    task = bar.add_task("auditing", total=None, weighed=None)
    return bar, _BarUpdate(bar, task)


class _BarUpdate:
    """The bar's progress callback: the units done on the bar, their weights (`weigh`) for its estimate."""

    def __init__(self, bar, task):
        self.bar, self.task = bar, task

    def weigh(self, spent: float, whole: float) -> None:
        self.bar.update(self.task, weighed=(spent, whole))

    def __call__(self, done: int, total: int, label: str) -> None:
        self.bar.update(self.task, completed=done, total=total, description=label)


class Lines:
    """Plain progress lines on stderr, one every PACE seconds while the work runs, and one at the end once any was
    written (a run shorter than PACE writes none). The object is the progress callback (`update`, `weigh`)."""

    def __init__(self, pace: float | None = None, now=time.monotonic):
        self.pace, self.now = PACE if pace is None else pace, now
        self.done, self.total, self.label = 0, None, ""
        self.weighed = None  # (spent, whole) as `weigh` last told them, or None: the units' count is the measure
        self.written = 0
        self._stop = threading.Event()
        self._thread = None

    def update(self, done: int, total: int, label: str) -> None:
        self.done, self.total, self.label = done, total, label

    __call__ = update

    def weigh(self, spent: float, whole: float) -> None:
        """The work done and the whole, in estimated cost, for the estimate of what is left."""
        self.weighed = (spent, whole)

    def line(self) -> str:
        """Where the work stands: "softaudit: 12/64 done, 0:00:31 elapsed, about 0:01:40 left (last: NAME dtype)"."""
        elapsed = self.now() - self.start
        if self.total is None:
            return f"softaudit: {clock(elapsed)} elapsed, nothing finished yet"
        left = remaining(elapsed, *(self.weighed or (self.done, self.total)))
        said = f"about {clock(left)} left" if left is not None else "nothing finished yet"
        last = f" (last: {self.label})" if self.label else ""
        return f"softaudit: {self.done}/{self.total} done, {clock(elapsed)} elapsed, {said}{last}"

    def _write(self, text: str) -> None:
        click.echo(text, err=True)
        self.written += 1

    def _run(self) -> None:
        while not self._stop.wait(self.pace):
            self._write(self.line())

    def __enter__(self):
        self.start = self.now()
        self._thread = threading.Thread(target=self._run, name="softaudit-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if self.written and self.total is not None:
            self._write(f"softaudit: {self.done}/{self.total} done in {clock(self.now() - self.start)}")
