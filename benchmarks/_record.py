"""One benchmark's table in docs/benchmarks.md, written by the benchmark itself (`--write`), so that the numbers the
docs give are the last run's, with the command, the machine and the date beside them.

Each benchmark owns one section between two markers, `<!-- benchmark: NAME -->` and `<!-- end: NAME -->`; writing
replaces that section (or adds it before the history) and leaves every other byte of the page as it was. The page
is replaced atomically (a temporary file in the same folder, then a rename), under a lock, so two benchmarks that
finish together both land.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import os
import platform
import shlex
import sys
import tempfile
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
HISTORY = "## History"


def machine() -> str:
    """The CPU's model, the cores this process may use, the OS, Python and numpy: what the numbers depend on."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    import numpy

    return (
        f"{model}, {cores} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}, "
        f"numpy {numpy.__version__}"
    )


def command(script: str, argv: list[str] | None = None) -> str:
    """The command line that ran the benchmark, without `--write`."""
    args = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--write"]
    return shlex.join(["python", f"benchmarks/{script}", *args])


def table(header: list[str], rows: list[list]) -> str:
    """A Markdown table; cells are written as given (format numbers before)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def section(name: str, title: str, cmd: str, body: str, *, date: str | None = None, where: str | None = None) -> str:
    """The marked section: a heading, the command, the machine and the date of this run, then the body."""
    date = date or datetime.date.today().isoformat()
    where = where or machine()
    return (
        f"<!-- benchmark: {name} -->\n## {title}\n\n`{cmd}`\n\nLast run {date} on {where}.\n\n{body.strip()}\n"
        f"<!-- end: {name} -->\n"
    )


def replace(page: str, name: str, new: str) -> str:
    """page with the section of `name` replaced by `new`; added before the history (or at the end) when absent."""
    start, end = f"<!-- benchmark: {name} -->", f"<!-- end: {name} -->"
    if start in page:
        i = page.index(start)
        j = page.index(end, i) + len(end)
        if page[j : j + 1] == "\n":
            j += 1
        return page[:i] + new + page[j:]
    at = page.find(HISTORY)
    if at < 0:
        return page.rstrip("\n") + "\n\n" + new
    return page[:at] + new + "\n" + page[at:]


def write(name: str, title: str, cmd: str, body: str, doc: Path = DOC, **stamp) -> Path:
    """Replace the section of `name` in doc (docs/benchmarks.md) with this run's, atomically."""
    new = section(name, title, cmd, body, **stamp)
    with open(Path(tempfile.gettempdir()) / "softaudit-benchmarks.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        page = doc.read_text() if doc.exists() else "# Benchmarks\n"
        fd, tmp = tempfile.mkstemp(dir=doc.parent, prefix=f".{doc.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(replace(page, name, new))
            os.replace(tmp, doc)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    print(f"wrote its table to {doc}")
    return doc
