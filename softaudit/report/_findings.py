"""What every report says about the rows: the interrupted banner, the verdict matrix, and the rows to act on
(the counts line is `softaudit.results.summary_line`).

Rows to act on (warn, fail, error) are grouped by candidate, dtype, verdict and cause, so one idiom failing on
eight families reads as one finding with its families listed, its worst numbers, its note and its known fix.
"""

from __future__ import annotations

import math

#: Verdicts from the most to the least severe: a group or a matrix cell shows the first one present.
ORDER = ("error", "fail", "warn", "skip", "pass")


def interrupted_line(result) -> str:
    """What an interrupted run's reports say first ("" for a run that finished)."""
    if not result.interrupted:
        return ""
    return (
        "Interrupted: the run was stopped (Ctrl-C or SIGTERM) before it finished. These are the rows that "
        "finished; the rest were not run, and the baseline gate did not compare this run."
    )


def verdict_matrix(table) -> dict:
    """(candidate, dtype) -> (the most severe verdict, how many rows have it, rows in all)."""
    cells = {}
    for (candidate, dtype), group in table.groupby(["candidate", "dtype"], sort=False):
        counts = group.verdict.value_counts()
        worst = next(v for v in ORDER if counts.get(v) or v == "pass")
        cells[(candidate, dtype)] = (worst, int(counts.get(worst, 0)), len(group))
    return cells


def issues(table, verdicts=("error", "fail", "warn")) -> list[dict]:
    """The rows with these verdicts, grouped by (candidate, dtype, verdict, cause), most severe first.

    Each group: candidate, dtype, verdict, cause, families (in table order), max_cond_err and max_ulp (the
    largest over its rows, NaN where nothing was compared), note (that of the row with the largest error) and fix.
    """
    rows = table[table.verdict.isin(verdicts)]
    groups = []
    for (candidate, dtype, verdict, cause), group in rows.groupby(
        ["candidate", "dtype", "verdict", "cause"], sort=False, dropna=False
    ):
        errors = group.max_cond_err.astype(float)
        lead = group.loc[errors.idxmax()] if errors.notna().any() else group.iloc[0]
        groups.append(
            {
                "candidate": candidate,
                "dtype": dtype,
                "verdict": verdict,
                "cause": _text(cause),
                "families": list(group.family),
                "max_cond_err": _max(errors),
                "max_ulp": _max(group.max_ulp.astype(float)),
                "note": _text(lead.note),
                "fix": _text(lead.get("fix")),
            }
        )
    return sorted(groups, key=lambda g: ORDER.index(g["verdict"]))


def families_text(families: list, most: int = 4) -> str:
    shown = ", ".join(families[:most])
    return shown + (f" +{len(families) - most} more" if len(families) > most else "")


def number(value) -> str:
    """A measure for people: 3 significant digits, '-' for NaN (nothing compared)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.3g}"


def _max(values) -> float:
    return float(values.max()) if values.notna().any() else math.nan


def _text(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
