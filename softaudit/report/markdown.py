"""summary.md: verdicts, what to fix and regressions, fit for a pull-request comment or $GITHUB_STEP_SUMMARY."""

from __future__ import annotations

from ..results import summary_line
from ._files import accelerator_line
from ._findings import families_text, interrupted_line, issues, number, verdict_matrix

SYMBOL = {"pass": "pass", "warn": "warn", "fail": "**FAIL**", "error": "**ERROR**", "skip": "skip"}


def summary(result, comparison=None) -> str:
    """The summary's Markdown: counts, the gate's verdict, the verdict matrix and what to fix."""
    table = result.table
    dtypes = list(dict.fromkeys(table.dtype))
    cells = verdict_matrix(table)
    lines = ["# softaudit", ""]
    if interrupted_line(result):
        lines += [f"**{interrupted_line(result)}**", ""]
    lines += [f"{summary_line(table)} (candidate x dtype x family). Suite `{result.settings['suite']}`.", ""]
    gpu = accelerator_line(w.device for w in result.worst_inputs)
    if gpu:
        lines += [gpu, ""]
    if comparison is not None:
        lines += _gate_section(comparison)
    lines += ["## Verdicts", "", "| candidate | " + " | ".join(dtypes) + " |", "|---|" + "---|" * len(dtypes)]
    for candidate in dict.fromkeys(table.candidate):
        row = []
        for dtype in dtypes:
            verdict, count, total = cells.get((candidate, dtype), ("", 0, 0))
            row.append(SYMBOL.get(verdict, "") + (f" {count}/{total}" if verdict != "pass" and total else ""))
        lines.append(f"| `{candidate}` | " + " | ".join(row) + " |")
    found = issues(table)
    if found:
        lines += [
            "",
            "## What to fix",
            "",
            "Error is max |y - exact| / (u x scale), the error against the problem's conditioning (docs/metrics.md).",
            "",
            "| verdict | candidate | dtype | families | error | max ulp | why | fix |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for g in found:
            cells_ = [
                SYMBOL[g["verdict"]],
                f"`{g['candidate']}`",
                g["dtype"],
                families_text(g["families"]),
                number(g["max_cond_err"]),
                number(g["max_ulp"]),
                g["note"],
                g["fix"],
            ]
            lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells_) + " |")
    return "\n".join(lines) + "\n"


def _gate_section(comparison) -> list[str]:
    lines = ["## Against the baseline", ""]
    if comparison.regressions:
        lines.append(f"**{len(comparison.regressions)} regression(s):**")
        lines += [f"- `{c.key}`: {c.what}" for c in comparison.regressions]
    else:
        lines.append("No regressions.")
    lines.append("")
    if not comparison.same_platform:
        lines += [
            f"The baseline was made on another platform ({comparison.platform_change}): differences that do "
            "not change a verdict are platform differences, not regressions.",
            "",
        ]
    if comparison.known:
        lines += [f"{len(comparison.known)} known failure(s) or warning(s), already in the baseline (not fatal).", ""]
    if comparison.platform:
        lines += ["Platform differences:"] + [f"- `{c.key}`: {c.what}" for c in comparison.platform] + [""]
    if comparison.improvements:
        lines += ["Improvements:"] + [f"- `{c.key}`: {c.what}" for c in comparison.improvements] + [""]
    if comparison.appeared:
        lines += ["New rows (not in the baseline):"] + [f"- `{k}`" for k in comparison.appeared] + [""]
    if comparison.vanished:
        lines += ["Rows in the baseline but not in this run:"] + [f"- `{k}`" for k in comparison.vanished] + [""]
    return lines
