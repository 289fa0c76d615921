"""junit.xml (xunit2): a testsuite per candidate, a testcase per dtype x family, <failure> or <error> with why.

A warn is a passing test whose <system-out> says why (a failure under a strict policy); a skip is <skipped>.
Against a baseline only a regression fails: a known failure or error (the baseline has it) is <skipped> with
"known fail (in the baseline)" and its why, so a CI test widget is green exactly when the gate is.
"""

from __future__ import annotations

from xml.etree import ElementTree as ET

from ..results import RowKey, row_key


def junit(result, comparison=None) -> str:
    """The XML: a regression against the baseline fails its testcase whatever the verdict; against a baseline, a
    failure it already has is skipped as known."""
    regressions = {c.key: c.what for c in (comparison.regressions if comparison else [])}
    failing = result.policy.failing - {"error"}  # (errors are <error> elements of their own)
    root = ET.Element("testsuites", name="softaudit")
    table = result.table
    # the rows as dicts once, grouped here (to_dict of each candidate's group, twice, was most of the main job's
    # junit time); a suite's time is pandas' sum of its rows' still, the same float as before
    groups: dict = {}  # candidate -> its rows, in the table's order
    for row in table.to_dict(orient="records"):
        groups.setdefault(row["candidate"], []).append(row)
    times = {candidate: s.sum() for candidate, s in table.seconds.fillna(0).groupby(table.candidate, sort=False)}
    for candidate, rows in groups.items():
        outcomes = [_outcome(row, failing, regressions, comparison is not None) for row in rows]
        suite = ET.SubElement(
            root,
            "testsuite",
            name=str(candidate),
            tests=str(len(rows)),
            failures=str(sum(o[0] == "failure" for o in outcomes)),
            errors=str(sum(o[0] == "error" for o in outcomes)),
            skipped=str(sum(o[0] == "skipped" for o in outcomes)),
            time=f"{times[candidate]:.6f}",
        )
        for row, (element, why) in zip(rows, outcomes):
            seconds = row["seconds"]
            case = ET.SubElement(
                suite,
                "testcase",
                classname=str(candidate),
                name=" / ".join(_case_name(row)),
                time=f"{0.0 if seconds != seconds else seconds:.6f}",
            )
            if element == "system-out":
                ET.SubElement(case, element).text = why
            elif element in ("failure", "error"):
                ET.SubElement(case, element, message=why).text = why
            elif element == "skipped":
                ET.SubElement(case, element, message=why)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _outcome(row, failing, regressions: dict, gated: bool) -> tuple[str | None, str]:
    """(the testcase's element: "failure", "error", "skipped", "system-out" or None for a plain pass, its text)."""
    key = row_key(row)
    why = "; ".join(filter(None, [f"regression: {regressions[key]}" if key in regressions else "", _why(row)]))
    verdict = row["verdict"]
    bad = verdict == "error" or verdict in failing
    if verdict == "skip":
        return "skipped", why
    if bad and gated and key not in regressions:
        return "skipped", f"known {verdict} (in the baseline): {why}"
    if verdict == "error":
        return "error", why
    if bad or key in regressions:
        return "failure", why
    return ("system-out", f"warn: {why}") if verdict == "warn" else (None, why)


def _case_name(row) -> tuple:
    """A testcase's name within its candidate's suite: the row key without the candidate (dtype, family, and the
    output for a kind with several: attention_grad's dq, dk and dv rows are three testcases, not one name thrice)."""
    key = RowKey.of(row)
    return key[1:] if key.output else key[1:3]


def _why(row) -> str:
    note, fix = (row.get(k) for k in ("note", "fix"))
    text = "" if note != note or note is None else str(note)
    return text + (f". Fix: {fix}" if isinstance(fix, str) and fix else "")
