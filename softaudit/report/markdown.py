"""summary.md: verdicts, what to fix and regressions, fit for a pull-request comment or $GITHUB_STEP_SUMMARY."""

from __future__ import annotations

from itertools import accumulate

from ..results import summary_line
from ._files import accelerator_line
from ._findings import cell_text, families_text, interrupted_line, issues, number, verdict_matrix

#: GitHub's limit for a comment's body: What to fix keeps its most severe lines within it.
LIMIT = 65_536
SYMBOL = {"pass": "pass", "warn": "warn", "fail": "**FAIL**", "error": "**ERROR**", "skip": "skip"}


def summary(result, comparison=None) -> str:
    """The summary's Markdown: counts, the gate's verdict, the verdict matrix and what to fix."""
    table = result.table
    dtypes = list(dict.fromkeys(table.dtype))
    cells = verdict_matrix(table)
    lines = ["# softaudit", ""]
    if interrupted_line(result):
        lines += [f"**{interrupted_line(result)}**", ""]
    shapes = result.settings.get("shapes")
    made = f"Shapes `{'`, `'.join(shapes)}`, sampled rows" if shapes else f"Suite `{result.settings['suite']}`"
    lines += [f"{summary_line(table)} (candidate x dtype x family). {made}.", ""]
    gpu = accelerator_line((w.device for w in result.worst_inputs), result.frameworks)
    if gpu:
        lines += [gpu, ""]
    if comparison is not None:
        lines += _gate_section(comparison)
    lines += ["## Verdicts", "", "| candidate | " + " | ".join(dtypes) + " |", "|---|" + "---|" * len(dtypes)]
    for candidate in dict.fromkeys(table.candidate):
        row = []
        for dtype in dtypes:
            verdict, counts, total = cells.get((candidate, dtype), ("", {}, 0))
            row.append(cell_text(verdict, counts, total, SYMBOL) if verdict else "")
        lines.append(f"| `{candidate}` | " + " | ".join(row) + " |")
    found = issues(table)
    if found:
        lines += [
            "",
            "## What to fix",
            "",
            "Error is max |y - exact| / (u x scale), the error against the problem's conditioning (docs/metrics.md).",
            "",
            "| verdict | candidate | dtype | families | error | max ulp | cause | fix |",
            "|---|---|---|---|---|---|---|---|",
        ]
        rows = []
        for g in found:
            cells_ = [
                SYMBOL[g["verdict"]],
                f"`{g['candidate']}`",
                g["dtype"],
                families_text(g["families"]),
                number(g["max_cond_err"]),
                number(g["max_ulp"]),
                g["why"],
                g["fix"],
            ]
            rows.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells_) + " |")
        room = LIMIT - len("\n".join(lines)) - 200  # (200: the line saying what was left out)
        kept = sum(1 for size in accumulate(len(row) + 1 for row in rows) if size <= room)
        lines += rows[:kept]
        if kept < len(rows):
            lines += [
                "",
                f"{len(rows) - kept} more lines, the last of this table (it runs from the most severe), are in "
                f"report.html and results.csv: a pull-request comment holds {LIMIT} characters.",
            ]
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
