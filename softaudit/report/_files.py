"""Writing report files atomically, and what every report says about where it was made."""

from __future__ import annotations

import os
import platform
import sys
import tempfile
from importlib import metadata
from pathlib import Path


def write_atomic(path: Path, text: str) -> Path:
    """Write text to path through a temporary file in the same folder and a rename: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def versions() -> dict:
    found = {"python": sys.version.split()[0]}
    for name in ("softaudit", "numpy", "mpmath", "pandas", "ml_dtypes", "hypothesis", "click"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpus": os.cpu_count(),
    }
