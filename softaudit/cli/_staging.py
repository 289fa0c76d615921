"""Where a command's files go, and how: the folders checked before the audit (a folder the results cannot go to is
said in one line, not after minutes), and the reports written as one set (a hidden folder, then renames), what
cannot be written where asked going into a temporary folder, so results an audit took minutes to compute are never
lost to a folder problem."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from ._messages import ConfigError, reason, warn


def check_folder(folder: Path, option: str) -> list[Path]:
    """Create the folder and write and remove a probe file in it: a folder the results cannot go to is said now,
    in one line naming the option, not after an audit that ran for minutes. The folders it made (`unmake` removes
    them where nothing was written after all)."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{option} {folder} is a file, not a folder")
    made = [f for f in (folder, *folder.parents) if not f.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".softaudit-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"{option} {folder} cannot be written: {reason(exc)}") from None
    return made


def unmake(made: list[Path]) -> None:
    """Remove the folders the checks made, those still empty."""
    for folder in sorted(made, key=lambda f: len(f.parts), reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()


def check_folders(out: Path | None, corpus, new_baseline: Path | None) -> list[Path]:
    """The places a run reads from and writes to, checked before the audit: the reports' folder (None: no file
    format), the corpus (read: a file there is a mistake), the baseline --update-baseline will write (None: not)."""
    if corpus and Path(corpus).exists() and not Path(corpus).is_dir():
        raise ConfigError(f"--corpus {corpus} is a file, not a folder of hunt findings")
    made = check_folder(out, "--out") if out is not None else []
    if new_baseline is not None:
        if new_baseline.is_dir():
            raise ConfigError(f"--update-baseline cannot write {new_baseline}: it is a folder")
        made += check_folder(new_baseline.parent, f"--update-baseline {new_baseline}: its folder")
    return made


def save_run(result, out: Path, formats, comparison, new_baseline: Path | None, held) -> Saved:
    """Write the reports as one set (`save_set`), and the baseline (new_baseline: where; None: not asked). A
    baseline that could not be written goes into the temporary folder."""
    from .. import gate
    from ..report import WRITERS

    saved = save_set(result, out, formats, comparison, WRITERS, held, ("the reports", "report"))
    if new_baseline is None:
        return saved
    if not saved.attempt(f"the baseline {new_baseline}", lambda: [gate.write_baseline(result, new_baseline)]):
        saved.elsewhere(
            f"the baseline to {new_baseline}",
            lambda folder: [gate.write_baseline(result, folder / "baseline.json")],
        )
    return saved


def save_hunt(findings, out: Path) -> Saved:
    """Write hunt.csv and hunt.md as one set (`save_set`), as the reports of a run are."""
    from ..report import HUNT_WRITERS

    return save_set(
        findings, out, tuple(HUNT_WRITERS), None, HUNT_WRITERS, contextlib.nullcontext, ("the hunt's tables", "table")
    )


def save_set(subject, out: Path, formats, comparison, writers: dict, held, names: tuple[str, str]) -> Saved:
    """Write the chosen formats of `writers` (softaudit.report's registry) for `subject` (an audit's result, a
    hunt's findings) into `out` as one set. Each format that could not go into `out` goes into the temporary folder.
    names: what the set and one of its formats are called in a warning ("the reports", "report").

    The set is written into a hidden folder inside `out`, then each file is renamed into place, results.json last,
    under held() (a second Ctrl-C waits for the last rename); files of the registry's formats this run did not
    write are removed. So `out` never holds a half-written file, nor, once the renames are done, files of two runs;
    during the renames (microseconds) a reader may find some files already new and the rest still old."""
    from ..report import write_reports

    whole, each = names
    saved = Saved()
    wanted = [fmt for fmt in writers if fmt in formats]
    staging = saved.attempt_folder(out, f"{whole} in {out}") if wanted else None
    placed = set()
    if staging is not None:
        try:
            staged = {
                fmt: saved.attempt(
                    f"the {fmt} {each} in {out}",
                    keep=False,
                    writer=lambda fmt=fmt: write_reports(subject, staging, (fmt,), comparison, writers),
                )
                for fmt in wanted
            }
            staged = {fmt: paths for fmt, paths in staged.items() if paths}
            with held():
                for fmt in sorted(staged, key=lambda f: f == "json"):
                    if saved.attempt(
                        f"the {fmt} {each} in {out}", lambda fmt=fmt: [_move(p, out) for p in staged[fmt]]
                    ):
                        placed.add(fmt)
                for fmt in writers:  # another run's files: gone, so that the folder holds one run's set
                    for name in writers[fmt] if fmt not in staged else ():
                        with contextlib.suppress(OSError):  # (a folder in the way stays)
                            (out / name).unlink(missing_ok=True)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    missing = [fmt for fmt in wanted if fmt not in placed]
    if missing:
        what = whole if len(missing) == len(wanted) else f"the {', '.join(missing)} {each}{'s' * (len(missing) > 1)}"
        saved.elsewhere(
            f"{what} to {out}",
            lambda folder: write_reports(subject, folder, missing, comparison, writers),
            partial=len(missing) < len(wanted),
        )
    return saved


def _move(path: Path, folder: Path) -> Path:
    """path renamed into folder (atomic: the same file system)."""
    os.replace(path, folder / path.name)
    return folder / path.name


class Saved:
    """What a run wrote. Each file is written on its own, so one that fails costs only itself (a line says so);
    what cannot be written where asked goes into one fresh temporary folder, so results an audit took minutes
    to compute are never lost to a folder problem."""

    def __init__(self):
        self.written: list[Path] = []
        self.failures = 0
        self.lost: list[str] = []  # what went to the temporary folder instead: the run's last line says so
        self.folder: Path | None = None  # the temporary folder, made on first use
        self.broken: str | None = None  # why even it could not take them
        self.partial = True  # everything lost was part of a set whose rest was written where asked

    def attempt(self, what: str, writer, keep: bool = True) -> list[Path] | None:
        """writer() -> the paths it wrote (kept as written unless keep is False); on OSError say one line (a
        warning) and return None."""
        try:
            paths = writer()
        except OSError as exc:
            self.failures += 1
            warn(f"cannot write {what}: {reason(exc)}")
            return None
        if keep:
            self.written += paths
        return paths

    def attempt_folder(self, parent: Path, what: str) -> Path | None:
        """A fresh hidden folder in parent to write into (None, said as a warning, when there can be none)."""
        return (
            self.attempt(what, lambda: [Path(tempfile.mkdtemp(dir=parent, prefix=".softaudit-"))], keep=False) or [None]
        )[0]

    def elsewhere(self, what: str, writer, partial: bool = False) -> None:
        """writer(folder) -> the paths it wrote, into the temporary folder instead of where `what` was asked.
        partial: the rest of the set went where asked, so the run's exit code stays its verdict's (a warning says
        where the part is); otherwise the run exits 2 saying where everything is."""
        self.lost.append(what)
        self.partial = self.partial and partial
        try:
            self.folder = self.folder or Path(tempfile.mkdtemp(prefix="softaudit-"))
            self.written += writer(self.folder)
        except OSError as exc:
            self.broken = reason(exc)

    def raise_if_lost(self) -> None:
        """Exit 2 with one line when something could not be written where asked: where it is instead."""
        if not self.lost:
            return
        lost = " nor ".join(self.lost)
        if self.broken:
            raise ConfigError(f"could not write {lost}, nor into a temporary folder: {self.broken}")
        if self.partial:
            warn(f"could not write {lost}; written to {self.folder} instead")
            return
        raise ConfigError(f"could not write {lost}; written to {self.folder} instead")
