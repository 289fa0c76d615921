"""`softaudit run`: audit targets against the exact reference, write the reports, and exit 0 (passed), 1 (a verdict
failed, or against a baseline a regression), 2 (a usage or configuration error) or 130 (interrupted: the finished
rows are kept and written, marked interrupted)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from .. import settings
from .._signals import Interruption
from ._messages import ConfigError, warn
from ._options import Config, one_kind, option, options
from ._progress import reporter
from ._staging import check_folders, save_run, unmake
from ._summary import github, print_summary

#: run's options, in the order its help lists them: a setting's key, or an option of run's own.
OPTIONS = (
    option("kind", "run", callback=one_kind, multiple=True),
    "dtypes",
    "suite",
    "cases",
    "families",
    "out",
    "formats",
    "baseline",
    click.option(
        "--update-baseline", is_flag=True, help="write the baseline (at --baseline, default reports/baseline.json)"
    ),
    "factor",
    "min_ulp",
    "defect_fraction",
    "fully_masked",
    "strict",
    "require",
    "tolerance",
    "timeout",
    "seed",
    "shapes",
    "samples",
    "corpus",
    "device",
    "cache_dir",
    "isolation",
    "memory_limit",
    "workers",
    "scheduler",
    click.option("-q", "--quiet", is_flag=True, help="print only what made the run fail"),
    click.option("-v", "--verbose", is_flag=True, help="print every finding, known ones and each row too"),
)


@click.command()
@click.argument("targets", nargs=-1)
@options("run", *OPTIONS)
def run(targets, update_baseline, quiet, verbose, **given):
    """Audit TARGETS (modules, files, module:function; none: the built-in candidates) and write reports."""
    from .. import _store, gate
    from ..adapters import TargetError
    from ..cases import CaseFileError
    from ..policy import Policy
    from ..report import FILE_FORMATS
    from ..runner import audit
    from ..sampled import Shape

    config = Config("run")

    def value(key: str):
        return config(key, given[key])

    folder = _store.folder(value("cache_dir"))
    out, formats, baseline, shapes = Path(value("out")), value("formats"), value("baseline"), value("shapes")
    new_baseline = (Path(baseline) if baseline else out / "baseline.json") if update_baseline else None
    # Everything a user can get wrong is checked here, before the audit: found after it, it would cost minutes.
    try:
        policy = Policy(**{key: value(key) for key in settings.POLICY_KEYS})
        known = gate.read_baseline(baseline) if baseline and not update_baseline else None
        if shapes and (given["families"] or value("cases")):
            raise ValueError("--shape audits the shapes in place of the families: --family and --cases do not apply")
        shapes = [Shape.parse(text) for text in shapes or ()]
    except (TargetError, CaseFileError, gate.BaselineError, ValueError) as exc:
        raise ConfigError(str(exc)) from None
    made = check_folders(out if any(fmt in FILE_FORMATS for fmt in formats) else None, value("corpus"), new_baseline)
    with _interruptible() as interruption:
        try:
            shown, progress = reporter(quiet)
            with shown, interruption.auditing():
                result = (_audit_shapes if shapes else audit)(
                    config("targets", targets) or None,
                    **{settings.SETTINGS[key].keyword: value(key) for key in AUDIT_KEYS},
                    policy=policy,
                    progress=progress,
                    # one audit per process: families are kept for later runs only where they are mapped
                    # from the folder (pages the system may drop), never only in this process's memory
                    cache=folder is not None,
                    cache_dir=folder or "off",
                    stop=interruption.stop,
                    **({"shapes": shapes, "samples": value("samples")} if shapes else {}),
                )
        except (TargetError, CaseFileError, ValueError) as exc:
            unmake(made)  # a usage error leaves no empty folder behind
            raise ConfigError(str(exc)) from None
        interrupted = result.interrupted
        comparison = None
        if known is not None and not interrupted:
            comparison = gate.compare(known, gate.baseline_of(result), gate.Tolerance(relative=value("tolerance")))
        if interrupted and known is not None:
            warn("the run was interrupted: not compared with the baseline (a partial run is no comparison)")
        if interrupted and new_baseline is not None:
            warn(f"the run was interrupted: the baseline {new_baseline} was not written")
            new_baseline = None
        saved = save_run(result, out, formats, comparison, new_baseline, interruption.held)
        if "github" in formats:
            github(result, comparison, quiet)
        failed = comparison.failed if comparison is not None else not result.passed
        print_summary(result, comparison, saved.written, verbose, quiet, failed, "github" in formats)
        saved.raise_if_lost()
        sys.exit(130 if interrupted else 1 if failed and not update_baseline else 0)


#: The settings run passes to audit() by their keywords (the targets are its argument; the cache folder is resolved
#: first: `run`).
AUDIT_KEYS = tuple(
    key
    for key, setting in settings.SETTINGS.items()
    if setting.keyword and "run" in setting.commands and key not in ("targets", "cache_dir")
)


def _audit_shapes(targets, *, shapes, samples, **given):
    """softaudit.audit_shapes with run's keywords: the families' (suite, cases, families, corpus), the cache's and
    the pool's are not a shape's (each shape's candidates run in this process's executor, in turn)."""
    from ..sampled import audit_shapes

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
