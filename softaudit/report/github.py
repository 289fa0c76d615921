"""GitHub Actions annotations (::error, ::warning, ::notice), escaped as GitHub's own toolkit escapes them."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from ..results import row_key
from ._findings import families_text, issues


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _line(level: str, title: str, message: str, where: str = "") -> str:
    return f"::{level} {where}title={_escape_property(title)}::{_escape_data(message)}"


def _definitions(result) -> dict[str, str]:
    """candidate -> "file=PATH,line=N," for the candidates loaded from a file target (PATH relative to the working
    folder where it lies inside it, as GitHub wants), so an annotation marks the function's definition; read with
    ast, never imported."""
    found = {}
    for worst in result.worst.values():
        target = worst.target or ""
        path, _, name = target.rpartition(":")
        if worst.candidate in found or not path.endswith(".py"):
            continue
        try:
            tree = ast.parse(Path(path).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        lines = [
            n.lineno for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
        ]
        if lines:
            shown = os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd()) else path
            found[worst.candidate] = f"file={_escape_property(shown)},line={lines[0]},"
    return found


def annotations(result, comparison=None, quiet: bool = False) -> list[str]:
    """With a baseline: an ::error per regression, with its row's note and fix, and (unless quiet) a ::notice per
    known finding and platform difference. Without: an ::error per failing group of rows (fail, error) and a
    ::warning per warning group, each with its cause and fix."""
    where = _definitions(result)
    if comparison is not None:
        rows = {row_key(r): r for r in result.table.to_dict(orient="records")}
        lines = [
            _line("error", "softaudit regression", _regression(c, rows.get(c.key)), _at(where, rows.get(c.key)))
            for c in comparison.regressions
        ]
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
        title = f"softaudit {g['verdict']}: {g['candidate']} {g['dtype']}"
        lines.append(_line(level, title, message, where.get(g["candidate"], "")))
    return lines


def _at(where: dict, row) -> str:
    return where.get(row["candidate"], "") if row else ""


def _regression(change, row) -> str:
    """A regression with what its row says now: its note and the known fix."""
    note = f" {row['note']}." if row and row.get("note") else ""
    fix = f" Fix: {row['fix']}" if row and row.get("fix") else ""
    return f"{change.key}: {change.what}.{note}{fix}"
