"""The command line: thin. Parse, read [tool.softaudit], call the API, write reports, choose the exit code.

Exit codes, as ruff and click use them: 0 everything passed (or, with a baseline, nothing regressed); 1 a verdict
failed or a regression; 2 a usage or configuration error, said in one line; 130 interrupted (Ctrl-C or SIGTERM:
the finished rows are kept and written, marked interrupted).
"""

from __future__ import annotations

import contextlib
import os
import reprlib
import shutil
import sys
import tempfile
import tomllib
import warnings
from pathlib import Path

import click

from . import settings
from ._signals import Interruption, at_once

_device_option = click.option(
    "--device", help="where torch and jax candidates not pinned to a device run: cpu, cuda, cuda:N, gpu (default cpu)"
)


def _shown(key: str, command: str = "run") -> str:
    """A setting's default as the help text says it: "60", "float16 bfloat16", "reports/corpus"."""
    value = settings.default(key, command)
    if isinstance(value, (tuple, list)):
        return " ".join(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _isolation_options(command):
    """--isolation, --memory-limit, --workers and --scheduler, for run and hunt."""
    command = click.option(
        "--scheduler",
        help="a Dask scheduler's address (tcp://HOST:PORT): units run on its workers "
        "(needs pip install 'softaudit[dask]'; --workers is then ignored)",
    )(command)
    command = click.option(
        "--workers",
        type=_Number("workers"),
        help="units run in this many processes on this machine, or auto: one per core softaudit may use, in "
        f"softaudit's process where that is one or the run has one unit (default {_shown('workers')}: in "
        "softaudit's process)",
    )(command)
    command = click.option(
        "--memory-limit",
        type=_Number("memory_limit"),
        help="the worker's memory limit in MiB (address space; default none; leave it off for GPU candidates)",
    )(command)
    return click.option(
        "--isolation",
        type=click.Choice(settings.choices("isolation")),
        help="where candidates run: worker (a process of its own: a crash or hang is an error row) or "
        f"none (in this process); default {_shown('isolation')}",
    )(command)


class ConfigError(click.ClickException):
    exit_code = 2


class _Number(click.ParamType):
    """A numeric option held to the rule of its [tool.softaudit] key: `--timeout -1` is the user's mistake, said
    before the audit, not every candidate's "ran past the time limit"."""

    name = "number"

    def __init__(self, key: str):
        self.key = key

    def convert(self, value, param, ctx):
        if value in settings.SETTINGS[self.key].words:
            return value
        try:
            number = int(value) if settings.SETTINGS[self.key].type is int else float(value)
        except (TypeError, ValueError):
            number = None
        if number is None or not settings.valid(self.key, number):
            self.fail(f"{settings.requirement(self.key)}, got {value}", param, ctx)
        return number


def read_config(start: Path) -> dict:
    """[tool.softaudit] of the nearest pyproject.toml at or above `start` ({} when there is none)."""
    for folder in [start, *start.parents]:
        path = folder / "pyproject.toml"
        if path.is_file():
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("softaudit", {})
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{path}: {exc}") from None
            unknown = sorted(set(data) - set(settings.SETTINGS))
            if unknown:
                known = ", ".join(settings.SETTINGS)
                raise ConfigError(f"{path}: unknown key {unknown[0]!r} in [tool.softaudit]; known: {known}")
            for key, value in data.items():
                if not settings.valid(key, value):
                    problem = f"{settings.requirement(key)}, got {reprlib.repr(value)}"
                    raise ConfigError(f"{path}: [tool.softaudit] {key} {problem}")
            return data
    return {}


def _pick(cli_value, config: dict, key: str, command: str = "run"):
    """Command line > config > the setting's default for the command (an empty tuple from a repeatable option
    counts as not given)."""
    if cli_value not in (None, ()):
        return cli_value
    return config.get(key, settings.default(key, command))


def _one_kind(ctx, param, given):
    """--kind once: given twice, click would keep the last and drop the first without a word."""
    if len(given) > 1:
        raise click.BadParameter(f"takes one kind, got {', '.join(given)}: run once per kind", ctx, param)
    return given[0] if given else None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="softaudit")
def main():
    """softaudit: audit the numerical accuracy of softmax and attention implementations."""
    warnings.showwarning = _show_warning


_python_warning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """softaudit's own warnings ("softaudit: ...") as one line for the user, as `_warn` writes them; others as
    Python shows them."""
    text = str(message)
    if text.startswith("softaudit: "):
        _warn(text.removeprefix("softaudit: "))
    else:
        _python_warning(message, category, filename, lineno, file, line)


def _progress(quiet: bool):
    """A rich progress bar on a terminal (NO_COLOR is honoured by rich); nothing otherwise."""
    if quiet or not sys.stderr.isatty():
        return None, None
    from rich.console import Console
    from rich.progress import Progress

    bar = Progress(transient=True, console=Console(stderr=True))
    task = bar.add_task("auditing", total=None)

    def update(done, total, label):
        bar.update(task, completed=done, total=total, description=label)

    return bar, update


def _regression_lines(regressions) -> list[str]:
    """The regressions, one line each, those of one candidate x dtype grouped under one line naming it (a change
    to one kernel regresses many families at once)."""
    groups: dict[tuple, list] = {}
    for change in regressions:
        candidate, dtype, rest = change.key.split(" | ", 2)
        groups.setdefault((candidate, dtype), []).append((rest, change.what))
    lines = []
    for (candidate, dtype), changes in groups.items():
        if len(changes) == 1:
            lines.append(f"  regression {candidate} | {dtype} | {changes[0][0]}: {changes[0][1]}")
            continue
        lines.append(f"  regression {candidate} | {dtype}: {len(changes)} families")
        lines += [f"    {rest}: {what}" for rest, what in changes]
    return lines


@main.command()
@click.argument("targets", nargs=-1)
@click.option(
    "--kind", callback=_one_kind, multiple=True, help="kind of the targets' functions (needed for unmarked ones)"
)
@click.option("--dtype", "dtypes", multiple=True, help=f"dtype to audit in (repeatable; default {_shown('dtypes')})")
@click.option("--suite", type=click.Choice(settings.choices("suite")), help=f"case sizes (default: {_shown('suite')})")
@click.option("--cases", "cases", multiple=True, help="a case file, .npy or .npz (repeatable)")
@click.option("--family", "families", multiple=True, help="only this built-in family (repeatable)")
@click.option("--out", help=f"folder for the reports (default: {_shown('out')})")
@click.option(
    "--format",
    "formats",
    multiple=True,
    type=click.Choice(settings.choices("formats")),
    help="report format (repeatable; default: every file format; github prints annotations)",
)
@click.option("--baseline", help="baseline JSON: fail only on regressions against it")
@click.option(
    "--update-baseline", is_flag=True, help="write the baseline (at --baseline, default reports/baseline.json)"
)
@click.option(
    "--factor",
    type=_Number("factor"),
    help="fail past factor x the standard same-dtype algorithms' proven error bound (their measured error in 16-bit "
    f"dtypes), warn past factor x best practice's (default {_shown('factor')})",
)
@click.option(
    "--min-ulp", type=_Number("min_ulp"), help=f"max ULP error that never warns (default {_shown('min_ulp')})"
)
@click.option(
    "--defect-fraction",
    type=_Number("defect_fraction"),
    help="the floor of the fail line measured in 16-bit dtypes, "
    f"2**(fraction x precision) x the conditioning (default {_shown('defect_fraction')}: a quarter of the "
    "significand)",
)
@click.option(
    "--fully-masked",
    type=click.Choice(settings.choices("fully_masked")),
    help=f"required output of a fully masked row (default {_shown('fully_masked')})",
)
@click.option("--strict", is_flag=True, default=None, help="a warn fails the run too (exit 1)")
@click.option(
    "--require",
    multiple=True,
    type=click.Choice(settings.choices("require")),
    help="a difference between runs of the same call (deterministic), between batches (batch-invariant) or between "
    "key splits (split-invariant) fails the row, rather than a note (repeatable)",
)
@click.option(
    "--tolerance",
    type=_Number("tolerance"),
    help=f"relative growth of max ULP error the gate accepts (default {_shown('tolerance')})",
)
@click.option("--timeout", type=_Number("timeout"), help=f"seconds per candidate call (default {_shown('timeout')})")
@click.option("--seed", type=int, help=f"varies the random families (default {_shown('seed')})")
@click.option(
    "--shape",
    "shapes",
    multiple=True,
    help="audit this production shape by sampled rows instead of the families, e.g. "
    "attention:1x32x32768x128,kv_heads=8 or softmax:8x131072 (repeatable; options kv_heads=N, lq=N, causal, scale=S)",
)
@click.option("--samples", type=int, help=f"rows (queries) sampled per shape (default {_shown('samples')})")
@click.option("--corpus", help=f"folder of hunt findings replayed as the family `corpus` (default {_shown('corpus')})")
@_device_option
@click.option(
    "--cache-dir",
    help="folder keeping prepared cases and references for later runs ('off': none; "
    "default $SOFTAUDIT_CACHE_DIR, else ~/.cache/softaudit)",
)
@_isolation_options
@click.option("-q", "--quiet", is_flag=True, help="print only what made the run fail")
@click.option("-v", "--verbose", is_flag=True, help="print every finding, known ones and each row too")
def run(
    targets,
    kind,
    dtypes,
    suite,
    cases,
    families,
    out,
    formats,
    baseline,
    update_baseline,
    factor,
    min_ulp,
    defect_fraction,
    fully_masked,
    strict,
    require,
    tolerance,
    timeout,
    seed,
    shapes,
    samples,
    corpus,
    device,
    cache_dir,
    isolation,
    memory_limit,
    workers,
    scheduler,
    quiet,
    verbose,
):
    """Audit TARGETS (modules, files, module:function; none: the built-in candidates) and write reports."""
    from . import _store, gate
    from .adapters import TargetError
    from .cases import CaseFileError
    from .policy import Policy
    from .report import FILE_FORMATS, annotations
    from .runner import audit
    from .sampled import Shape

    config = read_config(Path.cwd())
    folder = _store.folder(_pick(cache_dir, config, "cache_dir"))
    targets = _pick(targets, config, "targets") or None
    kind = _pick(kind, config, "kind")
    cases = _pick(cases, config, "cases")
    corpus = _pick(corpus, config, "corpus")
    out = Path(_pick(out, config, "out"))
    formats = _pick(formats, config, "formats")
    baseline = _pick(baseline, config, "baseline")
    new_baseline = (Path(baseline) if baseline else out / "baseline.json") if update_baseline else None
    given = {
        "factor": factor,
        "min_ulp": min_ulp,
        "defect_fraction": defect_fraction,
        "fully_masked": fully_masked,
        "strict": strict,
        "require": require,
    }
    shapes = _pick(shapes, config, "shapes")
    # Everything a user can get wrong is checked here, before the audit: found after it, it would cost minutes.
    try:
        policy = Policy(**{key: _pick(given[key], config, key) for key in settings.POLICY_KEYS})
        known = gate.read_baseline(baseline) if baseline and not update_baseline else None
        if shapes and (families or cases):
            raise ValueError("--shape audits the shapes in place of the families: --family and --cases do not apply")
        shapes = [Shape.parse(text) for text in shapes or ()]
    except (TargetError, CaseFileError, gate.BaselineError, ValueError) as exc:
        raise ConfigError(str(exc)) from None
    made = _check_folders(out if any(fmt in FILE_FORMATS for fmt in formats) else None, corpus, new_baseline)
    with _interruptible() as interruption:
        try:
            bar, progress = _progress(quiet)
            with bar or contextlib.nullcontext(), interruption.auditing():
                result = (_audit_shapes if shapes else audit)(
                    targets,
                    kind=kind,
                    dtypes=_pick(dtypes, config, "dtypes"),
                    suite=_pick(suite, config, "suite"),
                    cases=cases,
                    families=_pick(families, config, "families"),
                    policy=policy,
                    timeout=_pick(timeout, config, "timeout"),
                    seed=_pick(seed, config, "seed"),
                    corpus=corpus,
                    progress=progress,
                    device=_pick(device, config, "device"),
                    # one audit per process: families are kept for later runs only where they are mapped
                    # from the folder (pages the system may drop), never only in this process's memory
                    cache=folder is not None,
                    cache_dir=folder or "off",
                    isolation=_pick(isolation, config, "isolation"),
                    memory_limit_mib=_pick(memory_limit, config, "memory_limit"),
                    workers=_pick(workers, config, "workers"),
                    scheduler=_pick(scheduler, config, "scheduler"),
                    stop=interruption.stop,
                    **({"shapes": shapes, "samples": _pick(samples, config, "samples")} if shapes else {}),
                )
        except (TargetError, CaseFileError, ValueError) as exc:
            _unmake(made)  # a usage error leaves no empty folder behind
            raise ConfigError(str(exc)) from None
        interrupted = result.interrupted
        comparison = None
        if known is not None and not interrupted:
            tol = gate.Tolerance(relative=_pick(tolerance, config, "tolerance"))
            comparison = gate.compare(known, gate.baseline_of(result), tol)
        if interrupted and known is not None:
            _warn("the run was interrupted: not compared with the baseline (a partial run is no comparison)")
        if interrupted and new_baseline is not None:
            _warn(f"the run was interrupted: the baseline {new_baseline} was not written")
            new_baseline = None
        saved = _save_run(result, out, formats, comparison, new_baseline, interruption.held)
        if "github" in formats:
            for line in annotations(result, comparison, quiet):
                click.echo(line)
            summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
            if summary_path:
                from .report import summary

                try:
                    with open(summary_path, "a", encoding="utf-8") as f:
                        f.write(summary(result, comparison))
                except OSError as exc:
                    _warn(f"cannot append to $GITHUB_STEP_SUMMARY {summary_path}: {_reason(exc)}")
        failed = comparison.failed if comparison is not None else not result.passed
        _print_summary(result, comparison, saved.written, verbose, quiet, failed, "github" in formats)
        saved.raise_if_lost()
        sys.exit(130 if interrupted else 1 if failed and not update_baseline else 0)


def _audit_shapes(targets, *, shapes, samples, **given):
    """softaudit.audit_shapes with run's keywords: the families' (suite, cases, families, corpus), the cache's and
    the pool's are not a shape's (each shape's candidates run in this process's executor, in turn)."""
    from .sampled import audit_shapes

    unused = ("suite", "cases", "families", "corpus", "cache", "cache_dir", "workers", "scheduler")
    return audit_shapes(targets, shapes, samples=samples, **{k: v for k, v in given.items() if k not in unused})


@contextlib.contextmanager
def _interruptible():
    """Ctrl-C or SIGTERM while a run audits and writes its reports: the first stops new work (the finished rows are
    written, marked interrupted, exit 130: see _signals.Interruption), a second during the audit stops the units
    running (the finished rows are still written); one more exits 130 at once, writing nothing."""
    try:
        with Interruption(lambda line: click.echo(f"\n{line}", err=True)) as interruption:
            yield interruption
    except KeyboardInterrupt:
        click.echo("Interrupted again: stopped at once; this run's reports were not written.", err=True)
        sys.exit(130)


def _reason(exc: OSError) -> str:
    return exc.strerror or " ".join(str(exc).split())


def _warn(line: str) -> None:
    click.echo(f"Warning: {line}", err=True)


def _check_folder(folder: Path, option: str) -> list[Path]:
    """Create the folder and write and remove a probe file in it: a folder the results cannot go to is said now,
    in one line naming the option, not after an audit that ran for minutes. The folders it made (`_unmake` removes
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
        raise ConfigError(f"{option} {folder} cannot be written: {_reason(exc)}") from None
    return made


def _unmake(made: list[Path]) -> None:
    """Remove the folders the checks made, those still empty."""
    for folder in sorted(made, key=lambda f: len(f.parts), reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()


def _check_folders(out: Path | None, corpus, new_baseline: Path | None) -> list[Path]:
    """The places a run reads from and writes to, checked before the audit: the reports' folder (None: no file
    format), the corpus (read: a file there is a mistake), the baseline --update-baseline will write (None: not)."""
    if corpus and Path(corpus).exists() and not Path(corpus).is_dir():
        raise ConfigError(f"--corpus {corpus} is a file, not a folder of hunt findings")
    made = _check_folder(out, "--out") if out is not None else []
    if new_baseline is not None:
        if new_baseline.is_dir():
            raise ConfigError(f"--update-baseline cannot write {new_baseline}: it is a folder")
        made += _check_folder(new_baseline.parent, f"--update-baseline {new_baseline}: its folder")
    return made


def _save_run(result, out: Path, formats, comparison, new_baseline: Path | None, held) -> _Saved:
    """Write the reports as one set (`_save_set`), and the baseline (new_baseline: where; None: not asked). A
    baseline that could not be written goes into the temporary folder."""
    from . import gate
    from .report import WRITERS

    saved = _save_set(result, out, formats, comparison, WRITERS, held, ("the reports", "report"))
    if new_baseline is None:
        return saved
    if not saved.attempt(f"the baseline {new_baseline}", lambda: [gate.write_baseline(result, new_baseline)]):
        saved.elsewhere(
            f"the baseline to {new_baseline}",
            lambda folder: [gate.write_baseline(result, folder / "baseline.json")],
        )
    return saved


def _save_hunt(findings, out: Path) -> _Saved:
    """Write hunt.csv and hunt.md as one set (`_save_set`), as the reports of a run are."""
    from .report import HUNT_WRITERS

    return _save_set(
        findings, out, tuple(HUNT_WRITERS), None, HUNT_WRITERS, contextlib.nullcontext, ("the hunt's tables", "table")
    )


def _save_set(subject, out: Path, formats, comparison, writers: dict, held, names: tuple[str, str]) -> _Saved:
    """Write the chosen formats of `writers` (softaudit.report's registry) for `subject` (an audit's result, a
    hunt's findings) into `out` as one set. Each format that could not go into `out` goes into the temporary folder.
    names: what the set and one of its formats are called in a warning ("the reports", "report").

    The set is written into a hidden folder inside `out`, then each file is renamed into place, results.json last,
    under held() (a second Ctrl-C waits for the last rename); files of the registry's formats this run did not
    write are removed. So `out` never holds a half-written file, nor, once the renames are done, files of two runs;
    during the renames (microseconds) a reader may find some files already new and the rest still old."""
    from .report import write_reports

    whole, each = names
    saved = _Saved()
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


class _Saved:
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
            _warn(f"cannot write {what}: {_reason(exc)}")
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
            self.broken = _reason(exc)

    def raise_if_lost(self) -> None:
        """Exit 2 with one line when something could not be written where asked: where it is instead."""
        if not self.lost:
            return
        lost = " nor ".join(self.lost)
        if self.broken:
            raise ConfigError(f"could not write {lost}, nor into a temporary folder: {self.broken}")
        if self.partial:
            _warn(f"could not write {lost}; written to {self.folder} instead")
            return
        raise ConfigError(f"could not write {lost}; written to {self.folder} instead")


def _print_summary(result, comparison, written, verbose: bool, quiet: bool, failed: bool, annotated: bool) -> None:
    """The run in the terminal: the counts, then what to act on, each finding with its cause and fix (against a
    baseline: the regressions). Quiet: only what made the run fail, and nothing when it passed. annotated: the
    GitHub annotations printed already carry each regression and its finding, so they are not printed again (and,
    when quiet, nothing is)."""
    from .report import issues, number
    from .results import row_key, summary_line

    if quiet and (annotated or not failed):
        return
    table = result.table
    if not quiet:
        click.echo(summary_line(table))
    if comparison is not None:
        if not quiet:
            where = "" if comparison.same_platform else f" (made on another platform: {comparison.platform_change})"
            click.echo(
                f"against the baseline{where}: {len(comparison.regressions)} regression(s), "
                f"{len(comparison.known)} known, {len(comparison.platform)} platform difference(s), "
                f"{len(comparison.improvements)} improvement(s)"
            )
        for line in [] if annotated else _regression_lines(comparison.regressions):
            click.echo(line)
        for change in (comparison.known + comparison.platform + comparison.improvements) if verbose else ():
            click.echo(f"  {change.key}: {change.what}")
    if comparison is not None and not verbose:  # against a baseline: the findings behind the regressions
        regressed = {change.key for change in comparison.regressions}
        table = table[[row_key(row) in regressed for row in table.to_dict(orient="records")]]
    acted_on = ("error", "fail", "warn") if not quiet or comparison is not None else tuple(result.policy.failing)
    shown = issues(table, acted_on)
    limit = None if verbose else 25
    for group in shown[:limit]:
        families = len(group["families"])
        click.echo(
            f"{group['verdict'].upper():5s} {group['candidate']} {group['dtype']} "
            f"({families} {'family' if families == 1 else 'families'}, worst {number(group['max_cond_err'])} x the "
            f"conditioning): {group['why']}"
        )
        if group["fix"]:
            click.echo(f"      fix: {group['fix']}")
    if limit is not None and len(shown) > limit:
        click.echo(f"... and {len(shown) - limit} more findings: summary.md and report.html list them all (-v here)")
    if verbose:
        for row in table[table.verdict != "pass"].itertuples():
            click.echo(f"  {row.verdict:5s} {row.candidate} {row.dtype} {row.family}: {row.note}")
    for path in written if not quiet else ():
        click.echo(f"wrote {path}")


@main.command()
@click.argument("targets", nargs=-1)
@click.option(
    "--kind", callback=_one_kind, multiple=True, help="kind of the targets' functions (needed for unmarked ones)"
)
@click.option(
    "--dtype", "dtypes", multiple=True, help=f"dtype to hunt in (repeatable; default {_shown('dtypes', 'hunt')})"
)
@click.option(
    "--budget", type=_Number("budget"), help=f"seconds for the whole search (default {_shown('budget', 'hunt')})"
)
@click.option(
    "--timeout", type=_Number("timeout"), help=f"seconds per candidate call (default {_shown('timeout', 'hunt')})"
)
@click.option("--corpus", help=f"folder for the failures found (default {_shown('corpus', 'hunt')})")
@click.option("--out", help=f"folder for hunt.csv and hunt.md (default {_shown('out', 'hunt')})")
@_device_option
@_isolation_options
@click.option("-q", "--quiet", is_flag=True, help="print only errors")
def hunt(
    targets, kind, dtypes, budget, timeout, corpus, out, device, isolation, memory_limit, workers, scheduler, quiet
):
    """Search TARGETS (none: the built-ins) for failing inputs with Hypothesis; save what fails to the corpus."""
    from .adapters import TargetError
    from .hunt import describe
    from .hunt import hunt as run_hunt
    from .report import hunt_table

    config = read_config(Path.cwd())
    out = Path(_pick(out, config, "out", "hunt"))
    corpus = _pick(corpus, config, "corpus", "hunt")
    _check_folder(out, "--out")  # before the search: what it finds must have somewhere to go
    if corpus:
        # The folders the check makes are removed again: a hunt that finds nothing leaves no empty corpus behind
        # (the first failure saved makes them again).
        _unmake(_check_folder(Path(corpus), "--corpus"))
    try:
        bar, progress = _progress(quiet)
        with at_once(), bar or contextlib.nullcontext():
            findings = run_hunt(
                _pick(targets, config, "targets", "hunt") or None,
                kind=_pick(kind, config, "kind", "hunt"),
                dtypes=_pick(dtypes, config, "dtypes", "hunt"),
                budget=_pick(budget, config, "budget", "hunt"),
                corpus=corpus,
                timeout=_pick(timeout, config, "timeout", "hunt"),
                progress=progress,
                device=_pick(device, config, "device", "hunt"),
                isolation=_pick(isolation, config, "isolation", "hunt"),
                memory_limit_mib=_pick(memory_limit, config, "memory_limit", "hunt"),
                workers=_pick(workers, config, "workers", "hunt"),
                scheduler=_pick(scheduler, config, "scheduler", "hunt"),
            )
    except (TargetError, ValueError) as exc:
        raise ConfigError(str(exc)) from None
    except KeyboardInterrupt as stop:  # (Ctrl-C or SIGTERM: the searches' workers are closed on the way out)
        findings = getattr(stop, "findings", [])  # (none where it came before the searches began)
        where = f"; {corpus} keeps the failures saved before" if corpus else ""
        if findings:
            saved = _save_hunt(findings, out)
            written = "" if saved.failures else f" in {out}"
            searches = "search" if len(findings) == 1 else "searches"
            tables = f"its tables{written} hold the {len(findings)} {searches} that finished"
        else:
            tables = "no search had finished, so no tables were written"
        click.echo(f"\nInterrupted: the hunt stopped at once; {tables}{where}.", err=True)
        sys.exit(130)
    saved = _save_hunt(findings, out)
    table = hunt_table(findings)
    if not quiet:
        click.echo(
            table[["candidate", "dtype", "examples", "found", "shrunk_size", "max_cond_err", "reason"]].to_string(
                index=False
            )
        )
        for finding in (f for f in findings if f.failed or f.stopped):
            click.echo("\n" + describe(finding))
    saved.raise_if_lost()
    sys.exit(1 if any(f.failed or f.stopped for f in findings) else 0)


def _known_kind(ctx, param, kind):
    """--kind of a listing: a kind softaudit has, or a usage error naming them (an empty listing reads as none)."""
    from . import kinds

    if kind is not None:
        try:
            kinds.get(kind)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return kind


@main.command("cases")
@click.option("--kind", callback=_known_kind, help="only the families of this kind")
def list_cases(kind):
    """List the case families with a line on each."""
    from .cases import FAMILIES

    for family in FAMILIES.values():
        if kind is None or kind in family.kinds:
            click.echo(f"{family.name:24s} {', '.join(family.kinds):52s} {family.description}")


@main.command("candidates")
@click.option("--kind", callback=_known_kind, help="only the built-ins of this kind")
def list_candidates(kind):
    """List the built-in candidates with a line on each."""
    from . import kinds
    from .candidates import builtins

    for candidate in builtins():
        if kind is None or candidate.kind == kind:
            its = kinds.get(candidate.kind)
            mark = " (best practice)" if its.best == candidate.name else ""
            mark += " (plain, in the dtype)" if its.plain == candidate.name else ""
            click.echo(f"{candidate.name:34s} {candidate.summary.split('. Weakness')[0]}{mark}")


@main.command()
@click.argument("old")
@click.argument("new")
@click.option(
    "--tolerance",
    type=_Number("tolerance"),
    default=settings.default("tolerance"),
    show_default=True,
    help="relative growth of max ULP accepted",
)
def compare(old, new, tolerance):
    """Compare two results: baselines, results.json or results.csv files. Exit 1 on a regression."""
    from . import gate

    try:
        before, after = _rows_of(old), _rows_of(new)
    except gate.BaselineError as exc:
        raise ConfigError(str(exc)) from None
    comparison = gate.compare(before, after, gate.Tolerance(relative=tolerance))
    for change in comparison.regressions:
        click.echo(f"regression {change.key}: {change.what}")
    for change in comparison.improvements:
        click.echo(f"improvement {change.key}: {change.what}")
    for key in comparison.appeared:
        click.echo(f"new {key}")
    for key in comparison.vanished:
        click.echo(f"gone {key}")
    click.echo(
        f"{len(comparison.regressions)} regression(s), {len(comparison.known)} known failure(s), "
        f"{len(comparison.improvements)} improvement(s)"
    )
    sys.exit(1 if comparison.failed else 0)


def _rows_of(path) -> dict:
    """A baseline, or a results.json or results.csv turned into one; every row checked (gate.BaselineError, one
    line)."""
    import json

    from . import gate

    if str(path).endswith(".csv"):
        return {"rows": gate.check_rows(_rows_of_results(_csv_records(path), path), path)}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise gate.BaselineError(f"no such file: {path}") from None
    except OSError as exc:
        raise gate.BaselineError(f"{path} cannot be read: {_reason(exc)}") from None
    except ValueError as exc:
        reads = "compare reads baselines, results.json and results.csv"
        raise gate.BaselineError(f"{path} is not JSON ({exc}): {reads}") from None
    if isinstance(data, dict) and "results" in data:
        return {"rows": gate.check_rows(_rows_of_results(data["results"], path), path)}
    return gate.read_baseline(path)


def _rows_of_results(results, path) -> dict:
    """The baseline rows of a results.json's results, or one line on the first result that cannot be one."""
    from . import gate
    from .results import row_key

    if not isinstance(results, list):
        raise gate.BaselineError(f"{path}: 'results' is not a list")
    rows = {}
    for i, result in enumerate(results):
        if not isinstance(result, dict):
            raise gate.BaselineError(f"{path}: result {i} is not an object")
        missing = [field for field in ("candidate", "dtype", "family", "verdict") if field not in result]
        if missing:
            raise gate.BaselineError(f"{path}: result {i} has no {missing[0]!r}")
        key = row_key(result)
        # results.json writes an infinite measure as "inf" (JSON has no infinity): read back, it is the number
        result = {k: float(v) if k in _MEASURES and v in ("inf", "-inf") else v for k, v in result.items()}
        for field in ("max_ulp", *gate.EVENTS):
            value = result.get(field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise gate.BaselineError(
                    f"{path}: result {i} ({key}) has {field!r} {reprlib.repr(value)}, not a number or null"
                )
        try:
            rows[key] = gate.row_entry(result)
        except (ValueError, OverflowError) as exc:  # an infinite event count
            raise gate.BaselineError(f"{path}: result {i} ({key}): {exc}") from None
    return rows


_MEASURES = ("max_ulp", "max_cond_err")


def _csv_records(path) -> list[dict]:
    """results.csv's rows as records, the empty cells left out (gate.BaselineError, one line, where it is none)."""
    import pandas as pd

    from . import gate

    try:
        table = pd.read_csv(path)
    except FileNotFoundError:
        raise gate.BaselineError(f"no such file: {path}") from None
    except OSError as exc:
        raise gate.BaselineError(f"{path} cannot be read: {_reason(exc)}") from None
    except (ValueError, pd.errors.ParserError) as exc:
        raise gate.BaselineError(f"{path} is not a results CSV: {' '.join(str(exc).split())}") from None
    return [{k: v for k, v in row.items() if v == v} for row in table.to_dict(orient="records")]
