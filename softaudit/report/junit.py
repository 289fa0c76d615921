"""junit.xml (xunit2): a testsuite per candidate, a testcase per dtype x family, <failure> or <error> with why.

A warn is a passing test whose <system-out> says why (a failure under a strict policy); a skip is <skipped>.
"""

from __future__ import annotations

from xml.etree import ElementTree as ET

from ..results import RowKey, row_key


def junit(result, comparison=None) -> str:
    """The XML: a regression against the baseline fails its testcase whatever the verdict."""
    regressions = {c.key: c.what for c in (comparison.regressions if comparison else [])}
    failing = result.policy.failing - {"error"}  # (errors are <error> elements of their own)
    root = ET.Element("testsuites", name="softaudit")
    for candidate, group in result.table.groupby("candidate", sort=False):
        suite = ET.SubElement(
            root,
            "testsuite",
            name=str(candidate),
            tests=str(len(group)),
            failures=str(int(group.verdict.isin(failing).sum())),
            errors=str(int((group.verdict == "error").sum())),
            time=f"{group.seconds.fillna(0).sum():.6f}",
        )
        for row in group.to_dict(orient="records"):
            seconds = row["seconds"]
            case = ET.SubElement(
                suite,
                "testcase",
                classname=str(candidate),
                name=" / ".join(_case_name(row)),
                time=f"{0.0 if seconds != seconds else seconds:.6f}",
            )
            key = row_key(row)
            why = "; ".join(filter(None, [f"regression: {regressions[key]}" if key in regressions else "", _why(row)]))
            if row["verdict"] == "error":
                ET.SubElement(case, "error", message=why).text = why
            elif row["verdict"] == "skip":
                ET.SubElement(case, "skipped", message=why)
            elif row["verdict"] in failing or key in regressions:
                ET.SubElement(case, "failure", message=why).text = why
            elif row["verdict"] == "warn":
                ET.SubElement(case, "system-out").text = f"warn: {why}"
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _case_name(row) -> tuple:
    """A testcase's name within its candidate's suite: the row key without the candidate (dtype, family, and the
    output for a kind with several: attention_grad's dq, dk and dv rows are three testcases, not one name thrice)."""
    key = RowKey.of(row)
    return key[1:] if key.output else key[1:3]


def _why(row) -> str:
    note, fix = (row.get(k) for k in ("note", "fix"))
    text = "" if note != note or note is None else str(note)
    return text + (f". Fix: {fix}" if isinstance(fix, str) and fix else "")
