"""GitHub Actions annotations (::error, ::warning, ::notice), escaped as GitHub's own toolkit escapes them."""

from __future__ import annotations

from ..results import row_key
from ._findings import families_text, issues


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _line(level: str, title: str, message: str) -> str:
    return f"::{level} title={_escape_property(title)}::{_escape_data(message)}"


def annotations(result, comparison=None, quiet: bool = False) -> list[str]:
    """With a baseline: an ::error per regression, with its row's note and fix, and (unless quiet) a ::notice per
    known finding and platform difference. Without: an ::error per failing group of rows (fail, error) and a
    ::warning per warning group, each with its cause and fix."""
    if comparison is not None:
        rows = {row_key(r): r for r in result.table.to_dict(orient="records")}
        regressions = comparison.regressions
        lines = [_line("error", "softaudit regression", _regression(c, rows.get(c.key))) for c in regressions]
        if not quiet:
            lines += [_line("notice", "softaudit known", f"{c.key}: {c.what}") for c in comparison.known]
            lines += [
                _line("notice", "softaudit platform difference", f"{c.key}: {c.what}") for c in comparison.platform
            ]
        return lines
    lines = []
    for g in issues(result.table):
        level = "warning" if g["verdict"] == "warn" else "error"
        fix = f" Fix: {g['fix']}" if g["fix"] else ""
        message = f"{families_text(g['families'])}: {g['note']}.{fix}"
        lines.append(_line(level, f"softaudit {g['verdict']}: {g['candidate']} {g['dtype']}", message))
    return lines


def _regression(change, row) -> str:
    """A regression with what its row says now: its note and the known fix."""
    note = f" {row['note']}." if row and row.get("note") else ""
    fix = f" Fix: {row['fix']}" if row and row.get("fix") else ""
    return f"{change.key}: {change.what}.{note}{fix}"
