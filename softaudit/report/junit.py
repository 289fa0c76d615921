"""junit.xml (xunit2): a testsuite per candidate, a testcase per dtype x family, <failure> or <error> with why."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree as ET

from ._files import write_atomic


def junit(result, comparison=None) -> str:
    regressions = {c.key: c.what for c in (comparison.regressions if comparison else [])}
    root = ET.Element("testsuites", name="softaudit")
    for candidate, group in result.table.groupby("candidate", sort=False):
        suite = ET.SubElement(root, "testsuite", name=str(candidate), tests=str(len(group)),
                              failures=str(int((group.verdict == "fail").sum())),
                              errors=str(int((group.verdict == "error").sum())),
                              time=f"{group.seconds.fillna(0).sum():.6f}")  # fmt: skip
        for row in group.itertuples():
            case = ET.SubElement(suite, "testcase", classname=str(candidate), name=f"{row.dtype} / {row.family}",
                                 time=f"{0.0 if row.seconds != row.seconds else row.seconds:.6f}")  # fmt: skip
            key = f"{candidate} | {row.dtype} | {row.family}"
            if row.verdict == "error":
                ET.SubElement(case, "error", message=str(row.note)).text = str(row.note)
            elif row.verdict == "skip":
                ET.SubElement(case, "skipped", message=str(row.note))
            elif row.verdict == "fail" or key in regressions:
                why = "; ".join(filter(None, [f"regression: {regressions[key]}" if key in regressions else "", str(row.note)]))
                ET.SubElement(case, "failure", message=why).text = why
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(result, out: Path, comparison=None) -> Path:
    return write_atomic(out / "junit.xml", junit(result, comparison))
