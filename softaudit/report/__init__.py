"""Reports: each module writes one format from the results table (and the gate's comparison), atomically."""

from __future__ import annotations

from pathlib import Path

from .github import annotations as annotations
from .html import write_html
from .junit import write_junit
from .markdown import write_summary
from .results_json import write_results_json
from .tables import write_results_csv, write_worst_csv

#: The report formats; "github" prints annotations instead of writing a file.
FORMATS = ("csv", "html", "md", "json", "junit", "github")
FILE_FORMATS = ("csv", "html", "md", "json", "junit")
#: The files each file format writes: together, one run's set of reports.
FILES = {"csv": ("results.csv", "worst.csv"), "html": ("report.html",), "md": ("summary.md",), "json": ("results.json",),
         "junit": ("junit.xml",)}  # fmt: skip


def write_reports(result, out, formats=FILE_FORMATS, comparison=None) -> list[Path]:
    """Write the chosen formats into `out`; return the paths written."""
    out = Path(out)
    written = []
    if "csv" in formats:
        written += [write_results_csv(result, out), write_worst_csv(result, out)]
    if "json" in formats:
        written.append(write_results_json(result, out, comparison))
    if "md" in formats:
        written.append(write_summary(result, out, comparison))
    if "junit" in formats:
        written.append(write_junit(result, out, comparison))
    if "html" in formats:
        written.append(write_html(result, out, comparison))
    return written


__all__ = ["FILES", "FILE_FORMATS", "FORMATS", "annotations", "write_reports"]
