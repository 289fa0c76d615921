"""The command line: thin. Parse, read [tool.softaudit], call the API, write reports, choose the exit code.

Exit codes, as ruff and click use them: 0 everything passed (or, with a baseline, nothing regressed); 1 a verdict
failed or a regression; 2 a usage or configuration error, said in one line.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tomllib
from pathlib import Path

import click

CONFIG_KEYS = {
    "targets": list, "kind": str, "dtypes": list, "suite": str, "cases": list, "families": list, "out": str,
    "formats": list, "baseline": str, "factor": float, "min_ulp": float, "fully_masked": str, "timeout": float,
    "seed": int, "tolerance": float, "corpus": str, "budget": float, "cache_dir": str,
}  # fmt: skip


class ConfigError(click.ClickException):
    exit_code = 2


def read_config(start: Path) -> dict:
    """[tool.softaudit] of the nearest pyproject.toml at or above `start` ({} when there is none)."""
    for folder in [start, *start.parents]:
        path = folder / "pyproject.toml"
        if path.is_file():
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("softaudit", {})
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{path}: {exc}") from None
            unknown = sorted(set(data) - set(CONFIG_KEYS))
            if unknown:
                raise ConfigError(f"{path}: unknown key {unknown[0]!r} in [tool.softaudit]; known: {', '.join(CONFIG_KEYS)}")
            for key, value in data.items():
                want = CONFIG_KEYS[key]
                if not isinstance(value, want) and not (want is float and isinstance(value, int)):
                    raise ConfigError(f"{path}: [tool.softaudit] {key} must be a {want.__name__}")
            return data
    return {}


def _pick(cli_value, config: dict, key: str, default):
    """Command line > config > default (an empty tuple from a repeatable option counts as not given)."""
    if cli_value not in (None, ()):
        return cli_value
    return config.get(key, default)


@click.group()
@click.version_option(package_name="softaudit")
def main():
    """softaudit: audit the numerical accuracy of softmax and attention implementations."""


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


@main.command()
@click.argument("targets", nargs=-1)
@click.option("--kind", help="kind of the targets' functions (needed for unmarked ones)")
@click.option("--dtype", "dtypes", multiple=True, help="dtype to audit in (repeatable; default float16 bfloat16 float32 float64)")
@click.option("--suite", type=click.Choice(["quick", "default", "full"]), help="case sizes (default: default)")
@click.option("--cases", "cases", multiple=True, help="a case file, .npy or .npz (repeatable)")
@click.option("--family", "families", multiple=True, help="only this built-in family (repeatable)")
@click.option("--out", help="folder for the reports (default: reports)")
@click.option("--format", "formats", multiple=True, type=click.Choice(["csv", "html", "md", "json", "junit", "github"]),
              help="report format (repeatable; default: every file format; github prints annotations)")
@click.option("--baseline", help="baseline JSON: fail only on regressions against it")
@click.option("--update-baseline", is_flag=True, help="write the baseline (at --baseline, default reports/baseline.json)")
@click.option("--factor", type=float, help="max ULP error allowed, as a multiple of the comparison's (default 2)")
@click.option("--min-ulp", type=float, help="ULP error always allowed (default 1)")
@click.option("--fully-masked", type=click.Choice(["zeros", "nan", "uniform", "any"]), help="required output of a fully masked row")
@click.option("--tolerance", type=float, help="relative growth of max ULP error the gate accepts (default 0.1)")
@click.option("--timeout", type=float, help="seconds per candidate call (default 60)")
@click.option("--seed", type=int, help="varies the random families (default 0)")
@click.option("--corpus", help="folder of hunt findings replayed as the family `corpus` (default reports/corpus)")
@click.option("--cache-dir", help="folder keeping prepared cases and references for later runs ('off': none; "
              "default $SOFTAUDIT_CACHE_DIR, else ~/.cache/softaudit)")
@click.option("-q", "--quiet", is_flag=True, help="print only errors")
@click.option("-v", "--verbose", is_flag=True, help="print every failing row")
def run(targets, kind, dtypes, suite, cases, families, out, formats, baseline, update_baseline, factor, min_ulp,
        fully_masked, tolerance, timeout, seed, corpus, cache_dir, quiet, verbose):  # fmt: skip
    """Audit TARGETS (modules, files, module:function; none: the built-in candidates) and write reports."""
    from . import gate
    from .adapters._targets import TargetError
    from .cases import CaseFileError
    from .policy import Policy
    from .report import FILE_FORMATS, annotations, write_reports
    from . import _store
    from .runner import DEFAULT_DTYPES, audit

    config = read_config(Path.cwd())
    folder = _store.folder(_pick(cache_dir, config, "cache_dir", None))
    targets = _pick(targets, config, "targets", None) or None
    out = Path(_pick(out, config, "out", "reports"))
    formats = _pick(formats, config, "formats", FILE_FORMATS)
    baseline = _pick(baseline, config, "baseline", None)
    try:
        policy = Policy(factor=_pick(factor, config, "factor", 2.0), min_ulp=_pick(min_ulp, config, "min_ulp", 1.0),
                        fully_masked=_pick(fully_masked, config, "fully_masked", "zeros"))  # fmt: skip
        bar, progress = _progress(quiet)
        with bar or contextlib.nullcontext():
            result = audit(targets, kind=_pick(kind, config, "kind", None), dtypes=_pick(dtypes, config, "dtypes", DEFAULT_DTYPES),
                           suite=_pick(suite, config, "suite", "default"), cases=_pick(cases, config, "cases", []),
                           families=_pick(families, config, "families", None), policy=policy,
                           timeout=_pick(timeout, config, "timeout", 60.0), seed=_pick(seed, config, "seed", 0),
                           corpus=_pick(corpus, config, "corpus", "reports/corpus"), progress=progress,
                           # one audit per process: families are kept for later runs only where they are mapped
                           # from the folder (pages the system may drop), never only in this process's memory
                           cache=folder is not None, cache_dir=folder or "off")  # fmt: skip
        comparison = None
        if baseline and not update_baseline:
            tol = gate.Tolerance(relative=_pick(tolerance, config, "tolerance", 0.1))
            comparison = gate.compare(gate.read_baseline(baseline), gate.baseline_of(result), tol)
    except (TargetError, CaseFileError, gate.BaselineError, ValueError) as exc:
        raise ConfigError(str(exc)) from None
    written = write_reports(result, out, formats, comparison)
    if update_baseline:
        written.append(gate.write_baseline(result, baseline or out / "baseline.json"))
    if "github" in formats:
        for line in annotations(result, comparison):
            click.echo(line)
        summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary_path:
            from .report.markdown import summary

            with open(summary_path, "a", encoding="utf-8") as f:
                f.write(summary(result, comparison))
    failed = comparison.failed if comparison is not None else not result.passed
    if not quiet:
        _print_summary(result, comparison, written, verbose)
    sys.exit(1 if failed and not update_baseline else 0)


def _print_summary(result, comparison, written, verbose) -> None:
    table = result.table
    counts = table.verdict.value_counts()
    skipped = f", {counts.get('skip', 0)} skip" if counts.get("skip") else ""
    click.echo(f"{len(table)} rows: {counts.get('pass', 0)} pass, {counts.get('fail', 0)} fail, {counts.get('error', 0)} error{skipped}")
    if comparison is not None:
        click.echo(f"against the baseline: {len(comparison.regressions)} regression(s), {len(comparison.known)} known "
                   f"failure(s), {len(comparison.improvements)} improvement(s)")  # fmt: skip
        for change in comparison.regressions:
            click.echo(f"  regression {change.key}: {change.what}")
    if verbose:
        for row in table[table.verdict != "pass"].itertuples():
            click.echo(f"  {row.verdict:5s} {row.candidate} {row.dtype} {row.family}: {row.note}")
    for path in written:
        click.echo(f"wrote {path}")


@main.command()
@click.argument("targets", nargs=-1)
@click.option("--kind", help="kind of the targets' functions (needed for unmarked ones)")
@click.option("--dtype", "dtypes", multiple=True, help="dtype to hunt in (repeatable; default float32)")
@click.option("--budget", type=float, help="seconds for the whole search (default 60)")
@click.option("--corpus", help="folder for the failures found (default reports/corpus)")
@click.option("--out", help="folder for hunt.csv and hunt.md (default reports)")
@click.option("-q", "--quiet", is_flag=True, help="print only errors")
def hunt(targets, kind, dtypes, budget, corpus, out, quiet):
    """Search TARGETS (none: the built-ins) for failing inputs with Hypothesis; save what fails to the corpus."""
    import numpy as np
    import pandas as pd

    from .adapters._targets import TargetError
    from .hunt import hunt as run_hunt
    from .report._files import write_atomic

    config = read_config(Path.cwd())
    out = Path(_pick(out, config, "out", "reports"))
    try:
        bar, progress = _progress(quiet)
        with bar or contextlib.nullcontext():
            findings = run_hunt(_pick(targets, config, "targets", None) or None, kind=_pick(kind, config, "kind", None),
                                dtypes=_pick(dtypes, config, "dtypes", ("float32",)), budget=_pick(budget, config, "budget", 60.0),
                                corpus=_pick(corpus, config, "corpus", "reports/corpus"), progress=progress)  # fmt: skip
    except (TargetError, ValueError) as exc:
        raise ConfigError(str(exc)) from None
    table = pd.DataFrame([{"candidate": f.candidate, "dtype": f.dtype, "examples": f.examples,
                           "found": "FAIL" if f.failed else "none", "max_ulp": f.max_ulp, "seconds": round(f.seconds, 2),
                           "shrunk_size": 0 if not f.inputs else int(sum(np.size(a) for a in f.inputs.values())),
                           "reason": f.reason, "corpus": f.corpus_file or ""} for f in findings])  # fmt: skip
    write_atomic(out / "hunt.csv", table.to_csv(index=False))
    header = "| " + " | ".join(table.columns) + " |\n|" + "---|" * len(table.columns) + "\n"
    body = "".join("| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |\n" for row in table.itertuples(index=False))
    write_atomic(out / "hunt.md", "# softaudit hunt\n\n" + header + body)
    if not quiet:
        click.echo(table[["candidate", "dtype", "examples", "found", "shrunk_size", "max_ulp", "reason"]].to_string(index=False))
    sys.exit(1 if any(f.failed for f in findings) else 0)


@main.command("cases")
@click.option("--kind", help="only the families of this kind")
def list_cases(kind):
    """List the case families with a line on each."""
    from .cases import FAMILIES

    for family in FAMILIES.values():
        if kind is None or kind in family.kinds:
            click.echo(f"{family.name:24s} {', '.join(family.kinds):52s} {family.description}")


@main.command("candidates")
@click.option("--kind", help="only the built-ins of this kind")
def list_candidates(kind):
    """List the built-in candidates with a line on each."""
    from .candidates import SOUND, builtins

    for candidate in builtins():
        if kind is None or candidate.kind == kind:
            mark = " (comparison)" if SOUND[candidate.kind] == candidate.name else ""
            click.echo(f"{candidate.name:34s} {candidate.summary.split('. Weakness')[0]}{mark}")


@main.command()
@click.argument("old")
@click.argument("new")
@click.option("--tolerance", type=float, default=0.1, show_default=True, help="relative growth of max ULP accepted")
def compare(old, new, tolerance):
    """Compare two results: baselines or results.json files. Exit 1 on a regression."""
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
    click.echo(f"{len(comparison.regressions)} regression(s), {len(comparison.known)} known failure(s), "
               f"{len(comparison.improvements)} improvement(s)")  # fmt: skip
    sys.exit(1 if comparison.failed else 0)


def _rows_of(path) -> dict:
    """A baseline, or a results.json turned into one."""
    import json

    from . import gate

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise gate.BaselineError(f"no such file: {path}") from None
    except (OSError, ValueError) as exc:
        raise gate.BaselineError(f"{path} is not JSON: {exc}") from None
    if isinstance(data, dict) and "results" in data:
        return {"rows": {gate.row_key(r): gate.row_entry(r) for r in data["results"]}}
    return gate.read_baseline(path)
