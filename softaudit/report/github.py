"""GitHub Actions annotations (::error), escaped as GitHub's own toolkit escapes them."""

from __future__ import annotations


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotations(result, comparison=None) -> list[str]:
    """One ::error line per failing row (with a baseline: per regression only; known failures are notices)."""
    lines = []
    if comparison is not None:
        for change in comparison.regressions:
            lines.append(f"::error title={_escape_property('softaudit regression')}::{_escape_data(change.key + ': ' + change.what)}")
        for change in comparison.known:
            lines.append(f"::notice title={_escape_property('softaudit known failure')}::{_escape_data(change.key)}")
        return lines
    for row in result.table[result.table.verdict.isin(["fail", "error"])].itertuples():
        title = _escape_property(f"softaudit {row.verdict}: {row.candidate} {row.dtype}")
        lines.append(f"::error title={title}::{_escape_data(f'{row.family}: {row.note}')}")
    return lines
