"""summary.md: verdicts and regressions, fit for a pull-request comment or $GITHUB_STEP_SUMMARY."""

from __future__ import annotations

from pathlib import Path

from ._files import write_atomic

SYMBOL = {"pass": "pass", "fail": "**FAIL**", "error": "**ERROR**", "skip": "skip"}


def verdict_matrix(table):
    """candidate x dtype: "pass" when every family passed, otherwise the worst verdict with its count."""
    cells = {}
    for (candidate, dtype), group in table.groupby(["candidate", "dtype"], sort=False):
        counts = group.verdict.value_counts()
        worst = next((v for v in ("error", "fail", "skip") if counts.get(v)), "pass")
        cells[(candidate, dtype)] = (worst, int(counts.get(worst, 0)), len(group))
    return cells


def summary(result, comparison=None) -> str:
    table = result.table
    dtypes = list(dict.fromkeys(table.dtype))
    candidates = list(dict.fromkeys(table.candidate))
    cells = verdict_matrix(table)
    counts = table.verdict.value_counts()
    lines = ["# softaudit", "",
             f"{len(table)} rows (candidate x dtype x family): {counts.get('pass', 0)} pass, {counts.get('fail', 0)} fail, "
             f"{counts.get('error', 0)} error. Suite `{result.settings['suite']}`.", ""]  # fmt: skip
    if comparison is not None:
        lines += _gate_section(comparison)
    lines += ["## Verdicts", "", "| candidate | " + " | ".join(dtypes) + " |", "|---|" + "---|" * len(dtypes)]
    for candidate in candidates:
        row = []
        for dtype in dtypes:
            verdict, count, total = cells.get((candidate, dtype), ("", 0, 0))
            row.append(SYMBOL.get(verdict, "") + (f" {count}/{total}" if verdict != "pass" and total else ""))
        lines.append(f"| `{candidate}` | " + " | ".join(row) + " |")
    bad = table[table.verdict.isin(["fail", "error"])]
    if len(bad):
        lines += ["", "## Failures and errors", "", "| candidate | dtype | family | max ulp | why |", "|---|---|---|---|---|"]
        for row in bad.itertuples():
            note = str(row.note).replace("|", "\\|")
            lines.append(f"| `{row.candidate}` | {row.dtype} | {row.family} | {row.max_ulp:.3g} | {note} |")
    return "\n".join(lines) + "\n"


def _gate_section(comparison) -> list[str]:
    lines = ["## Against the baseline", ""]
    if comparison.regressions:
        lines.append(f"**{len(comparison.regressions)} regression(s):**")
        lines += [f"- `{c.key}`: {c.what}" for c in comparison.regressions]
    else:
        lines.append("No regressions.")
    lines.append("")
    if comparison.known:
        lines += [f"{len(comparison.known)} known failure(s), already in the baseline (not fatal).", ""]
    if comparison.improvements:
        lines += ["Improvements:"] + [f"- `{c.key}`: {c.what}" for c in comparison.improvements] + [""]
    if comparison.appeared:
        lines += ["New rows (not in the baseline):"] + [f"- `{k}`" for k in comparison.appeared] + [""]
    if comparison.vanished:
        lines += ["Rows in the baseline but not in this run:"] + [f"- `{k}`" for k in comparison.vanished] + [""]
    return lines


def write_summary(result, out: Path, comparison=None) -> Path:
    return write_atomic(out / "summary.md", summary(result, comparison))
