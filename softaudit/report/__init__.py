"""Reports: each module renders one format; one registry says which files each format writes, and `write_reports`
writes them (atomically, softaudit/_atomic.py). `softaudit run` and `softaudit hunt` both write through it."""

from __future__ import annotations

from pathlib import Path

from .._atomic import write_atomic
from .._report_files import FILE_FORMATS as FILE_FORMATS
from .._report_files import FILES, HUNT_FILES
from .._report_files import FORMATS as FORMATS
from ._files import machine as machine
from ._files import platform_key as platform_key
from ._files import versions as versions
from ._findings import families_text as families_text
from ._findings import issues as issues
from ._findings import number as number
from .github import annotations as annotations
from .html import report_html
from .hunt_tables import hunt_csv, hunt_md
from .hunt_tables import hunt_table as hunt_table
from .junit import junit
from .markdown import summary as summary
from .results_json import results_json
from .tables import results_csv, worst_csv

#: Each file's renderer: render(result, comparison) -> the file's text (a hunt's: render(findings, None)).
RENDERERS = {
    "results.csv": results_csv,
    "worst.csv": worst_csv,
    "report.html": report_html,
    "summary.md": summary,
    "results.json": results_json,
    "junit.xml": junit,
    "hunt.csv": hunt_csv,
    "hunt.md": hunt_md,
}
#: An audit's report formats: format -> {file name: render(result, comparison) -> the file's text}; the formats and
#: their files are named in softaudit/_report_files.py, which the settings read.
WRITERS = {fmt: {name: RENDERERS[name] for name in names} for fmt, names in FILES.items()}
#: A hunt's report formats: format -> {file name: render(findings, None) -> the file's text}.
HUNT_WRITERS = {fmt: {name: RENDERERS[name] for name in names} for fmt, names in HUNT_FILES.items()}


def write_reports(result, out, formats=FILE_FORMATS, comparison=None, writers: dict = WRITERS) -> list[Path]:
    """Write the chosen formats of `writers` (a format it has not is left out) into `out`; the paths written."""
    out = Path(out)
    return [
        write_atomic(out / name, render(result, comparison))
        for fmt in writers
        if fmt in formats
        for name, render in writers[fmt].items()
    ]


__all__ = [
    "FILE_FORMATS",
    "FORMATS",
    "HUNT_WRITERS",
    "WRITERS",
    "annotations",
    "families_text",
    "hunt_table",
    "issues",
    "machine",
    "number",
    "platform_key",
    "summary",
    "versions",
    "write_reports",
]
