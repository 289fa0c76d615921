"""`softaudit hunt`: search targets for failing inputs with Hypothesis, save what fails to the corpus, write
hunt.csv and hunt.md, and exit 1 when a search found a failure (or stopped on an error), else 0; 2 for a usage
error, 130 when interrupted (the searches that finished are written)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .._signals import at_once
from ._messages import ConfigError
from ._options import Config, one_kind, option, options
from ._progress import reporter
from ._staging import check_folder, save_hunt, unmake

#: hunt's options, in the order its help lists them: a setting's key, or an option of hunt's own.
OPTIONS = (
    option("kind", "hunt", callback=one_kind, multiple=True),
    "dtypes",
    "budget",
    "timeout",
    "corpus",
    "out",
    "device",
    "isolation",
    "memory_limit",
    "workers",
    "scheduler",
    click.option("-q", "--quiet", is_flag=True, help="print only errors"),
)
#: The columns of the table the terminal shows (hunt.csv and hunt.md hold them all).
SHOWN = ("candidate", "dtype", "examples", "found", "shrunk_size", "max_cond_err", "reason")


@click.command()
@click.argument("targets", nargs=-1)
@options("hunt", *OPTIONS)
def hunt(targets, quiet, **given):
    """Search TARGETS (none: the built-ins) for failing inputs with Hypothesis; save what fails to the corpus."""
    from ..adapters import TargetError
    from ..hunt import describe
    from ..hunt import hunt as run_hunt

    config = Config("hunt")

    def value(key: str):
        return config(key, given[key])

    out, corpus = Path(value("out")), value("corpus")
    check_folder(out, "--out")  # before the search: what it finds must have somewhere to go
    if corpus:
        # The folders the check makes are removed again: a hunt that finds nothing leaves no empty corpus behind
        # (the first failure saved makes them again).
        unmake(check_folder(Path(corpus), "--corpus"))
    try:
        shown, progress = reporter(quiet)
        with at_once(), shown:
            findings = run_hunt(
                config("targets", targets) or None,
                kind=value("kind"),
                dtypes=value("dtypes"),
                budget=value("budget"),
                corpus=corpus,
                timeout=value("timeout"),
                progress=progress,
                device=value("device"),
                isolation=value("isolation"),
                memory_limit_mib=value("memory_limit"),
                workers=value("workers"),
                scheduler=value("scheduler"),
            )
    except (TargetError, ValueError) as exc:
        raise ConfigError(str(exc)) from None
    except KeyboardInterrupt as stop:  # (Ctrl-C or SIGTERM: the searches' workers are closed on the way out)
        findings = getattr(stop, "findings", [])  # (none where it came before the searches began)
        where = f"; {corpus} keeps the failures saved before" if corpus else ""
        if findings:
            saved = save_hunt(findings, out)
            written = "" if saved.failures else f" in {out}"
            searches = "search" if len(findings) == 1 else "searches"
            tables = f"its tables{written} hold the {len(findings)} {searches} that finished"
        else:
            tables = "no search had finished, so no tables were written"
        click.echo(f"\nInterrupted: the hunt stopped at once; {tables}{where}.", err=True)
        sys.exit(130)
    saved = save_hunt(findings, out)
    if not quiet:
        click.echo(table_text(findings))
        for finding in (f for f in findings if f.failed or f.stopped):
            click.echo("\n" + describe(finding))
    saved.raise_if_lost()
    sys.exit(1 if any(f.failed or f.stopped for f in findings) else 0)


def table_text(findings) -> str:
    """The hunt's table as the terminal shows it: the largest conditioning-scaled error each search measured (what
    failed, or the worst it met without failing) to 3 digits, "-" where it measured none."""
    from ..report import hunt_table, number

    table = hunt_table(findings)[list(SHOWN)]
    table["max_cond_err"] = [number(v) for v in table["max_cond_err"]]
    return table.to_string(index=False)
