"""What every report says about the rows: the interrupted banner, the verdict matrix, and the rows to act on
(the counts line is `softaudit.results.summary_line`).

Rows to act on (warn, fail, error) are grouped into findings, one per bug: the rows one bug model explains
(softaudit/diagnosis.py) are one finding with its dtypes and families listed, its worst numbers, its note and its
fix; the rows none explains are grouped by candidate, dtype, verdict and cause.
"""

from __future__ import annotations

import math

#: Verdicts from the most to the least severe: a group or a matrix cell shows the first one present.
ORDER = ("error", "fail", "warn", "skip", "pass")
#: What `issues` groups the rows no bug model explains by, and the columns it reads ("output", "finding" and "fix"
#: where the table has them).
_KEYS = ("candidate", "dtype", "verdict", "cause")
_COLUMNS = (*_KEYS, "finding", "family", "max_cond_err", "max_ulp", "note", "fix", "output")


def interrupted_line(result) -> str:
    """What an interrupted run's reports say first ("" for a run that finished)."""
    if not result.interrupted:
        return ""
    return (
        "Interrupted: the run was stopped (Ctrl-C or SIGTERM) before it finished. These are the rows that "
        "finished; the rest were not run, and the baseline gate did not compare this run."
    )


def verdict_matrix(table) -> dict:
    """(candidate, dtype) -> (the cell's verdict, {verdict: families}, families in all).

    A family's verdict is the most severe of its rows (attention_grad has one per output: dq, dk, dv). The cell's
    verdict is the most severe family's among error, fail and warn; else pass where a family passed (a family
    skipped beside passing ones does not grey the cell), else skip."""
    # (each family's most severe verdict as its rank in ORDER, the least rank of its rows: one groupby for the
    # whole table, since a groupby per cell is slow on the main job's thousands of rows)
    rank = table.verdict.map(ORDER.index)
    per_family = rank.groupby([table.candidate, table.dtype, table.family], sort=False).min()
    found: dict = {}  # (candidate, dtype) -> {verdict: families}, in the table's order
    for (candidate, dtype, _), r in per_family.items():
        counts = found.setdefault((candidate, dtype), {})
        counts[ORDER[r]] = counts.get(ORDER[r], 0) + 1
    cells = {}
    for cell, counts in found.items():
        verdict = next((v for v in ("error", "fail", "warn", "pass") if counts.get(v)), "skip")
        cells[cell] = (verdict, {v: counts[v] for v in ORDER if counts.get(v)}, sum(counts.values()))
    return cells


def cell_text(verdict: str, counts: dict, total: int, names=None) -> str:
    """A verdict matrix cell in words: "pass", "pass, 1 of 12 skipped", "fail 1, warn 13 of 17", "skip"."""
    names = names or {}
    if verdict == "skip":
        return names.get("skip", "skip")
    if verdict == "pass":
        skipped = counts.get("skip", 0)
        return names.get("pass", "pass") + (f", {skipped} of {total} skipped" if skipped else "")
    shown = [f"{names.get(v, v)} {counts[v]}" for v in ORDER if v != "pass" and counts.get(v)]
    return ", ".join(shown) + f" of {total}"


def issues(table, verdicts=("error", "fail", "warn")) -> list[dict]:
    """The rows with these verdicts as findings, most severe first: one per bug.

    Rows a bug model explains (the `finding` column, softaudit/diagnosis.py) are one finding per candidate and
    model, whatever their dtypes and families; the others (unexplained, error) are grouped by candidate, dtype,
    verdict and cause. Each: candidate, dtype (the dtypes, comma-separated), verdict (the most severe), cause (the
    finding's name, else the row's cause), families (in table order, each once), max_cond_err and max_ulp (the
    largest over its rows, NaN where nothing was compared), why (the finding's sentence, one line), note (that of
    the row with the largest error, which it names first where the group has several rows) and fix.
    """
    # grouped in Python over the rows as dicts: per-group pandas calls are slow for the main job's hundreds of
    # groups, and the CLI's summary, summary.md and report.html each ask
    rows = table[table.verdict.isin(verdicts)]
    found: dict = {}  # group key -> its rows, in the table's order (groupby's sort=False)
    for row in rows[[c for c in _COLUMNS if c in rows]].to_dict(orient="records"):
        found.setdefault(_group_key(row), []).append(row)
    groups = []
    for group in found.values():
        first = group[0]
        errors = [_float(row["max_cond_err"]) for row in group]
        compared = [i for i, e in enumerate(errors) if not math.isnan(e)]
        # the first row of the largest error, as idxmax picks it
        lead = group[max(compared, key=errors.__getitem__)] if compared else first
        finding = _text(first.get("finding"))
        note = _lead_note(lead, len(group))
        groups.append(
            {
                "candidate": first["candidate"],
                "dtype": ", ".join(dict.fromkeys(row["dtype"] for row in group)),
                "verdict": min((row["verdict"] for row in group), key=ORDER.index),
                "cause": finding if finding else _text(first["cause"]),
                "families": list(dict.fromkeys(row["family"] for row in group)),
                "max_cond_err": _max(errors),
                "max_ulp": _max([_float(row["max_ulp"]) for row in group]),
                "why": _text(lead["note"]).split("; ")[0] if finding else note,
                "note": note,
                "fix": _text(lead.get("fix")),
            }
        )
    return sorted(groups, key=lambda g: ORDER.index(g["verdict"]))


def _group_key(row: dict) -> tuple:
    """A finding a bug model names is one group per candidate; other rows group by candidate, dtype, verdict and
    cause."""
    finding = _na(row.get("finding"))
    if finding and finding != "unexplained":
        return (row["candidate"], finding)
    return (*(_na(row[k]) for k in _KEYS), finding)


def families_text(families: list, most: int = 4) -> str:
    shown = ", ".join(families[:most])
    return shown + (f" +{len(families) - most} more" if len(families) > most else "")


def number(value) -> str:
    """A measure for people: 3 significant digits, '-' for NaN (nothing compared)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.3g}"


def _lead_note(lead, rows: int) -> str:
    """The note of a group's worst row; "in FAMILY (OUTPUT): " before it where the group has other rows."""
    note = _text(lead["note"])
    if rows == 1 or not note:
        return note
    output = _text(lead.get("output"))
    return f"in {lead['family']}{f' ({output})' if output else ''}: {note}"


def _max(values: list) -> float:
    """The largest of some numbers, NaN (nothing compared) skipped; NaN where all are."""
    return max((v for v in values if not math.isnan(v)), default=math.nan)


def _float(value) -> float:
    return math.nan if value is None else float(value)


def _na(value):
    """A group key part: every missing value (None, NaN) one key, as groupby(dropna=False) has it."""
    return None if value is None or value != value else value


def _text(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
