"""What a run prints on the terminal: the counts, what to act on (each finding with its cause and fix; against a
baseline, the regressions), and for GitHub (--format github) the annotations and the job's step summary."""

from __future__ import annotations

import os

import click

from ._messages import reason, warn


def github(result, comparison, quiet: bool) -> None:
    """--format github: the annotations on stdout (GitHub reads them from the job's log), and the summary appended
    to $GITHUB_STEP_SUMMARY where the job has one."""
    from ..report import annotations, summary

    for line in annotations(result, comparison, quiet):
        click.echo(line)
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        try:
            with open(summary_path, "a", encoding="utf-8") as f:
                f.write(summary(result, comparison))
        except OSError as exc:
            warn(f"cannot append to $GITHUB_STEP_SUMMARY {summary_path}: {reason(exc)}")


def print_summary(result, comparison, written, verbose: bool, quiet: bool, failed: bool, annotated: bool) -> None:
    """The run in the terminal: the counts, then what to act on, each finding with its cause and fix (against a
    baseline: the regressions). Quiet: only what made the run fail, and nothing when it passed. annotated: the
    GitHub annotations printed already carry each regression and its finding, so they are not printed again (and,
    when quiet, nothing is)."""
    from ..report import issues, number
    from ..results import row_key, summary_line

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
        for line in [] if annotated else regression_lines(comparison.regressions):
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


def regression_lines(regressions) -> list[str]:
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
