"""The report formats and the files each writes, by name only: what `--format` and [tool.softaudit] formats may name
(softaudit/settings.py reads it) and what softaudit/report/ gives a renderer each. It lives below both, so the
settings name the formats without importing the reports, which import the results, which the settings are read by.
"""

#: An audit's formats that write files: format -> its files ("github" writes none: it prints annotations).
FILES = {
    "csv": ("results.csv", "worst.csv"),
    "html": ("report.html",),
    "md": ("summary.md",),
    "json": ("results.json",),
    "junit": ("junit.xml",),
}
#: A hunt's formats: format -> its files.
HUNT_FILES = {"csv": ("hunt.csv",), "md": ("hunt.md",)}
#: The formats that write files, and every format.
FILE_FORMATS = tuple(FILES)
FORMATS = (*FILE_FORMATS, "github")
