"""Writing a file atomically: the one way softaudit writes a file (reports, baselines, the corpus, the cache).

The data goes to a temporary file in the target's own folder, then one rename puts it in place: a reader, or a run
interrupted while writing, finds the old file or the new one, never half of one. The temporary is a hidden file
(`.NAME.XXXXXXXX.tmp`); one left by a process killed while writing is removed by whoever owns the folder (the
cache's pruning).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_file(path, binary: bool = False, private: bool = False):
    """A file open for writing (text: UTF-8, newlines as written) whose content becomes `path` when the block ends;
    when the block raises, `path` is left as it was. private: the file keeps the temporary's 0600 (a cache of
    pickles); otherwise it gets an ordinary file's permissions (0666 less the umask)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            yield f
        if not private:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path, text: str) -> Path:
    """Write text to path atomically; return the path."""
    with atomic_file(path) as f:
        f.write(text)
    return Path(path)


def is_temporary(name: str) -> bool:
    """Whether a file name is that of a temporary (every one is hidden: softaudit's own files never are)."""
    return name.startswith(".")


def _umask() -> int:
    umask = os.umask(0)  # (the only way to read it is to set it: put back at once)
    os.umask(umask)
    return umask
