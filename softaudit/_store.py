"""Prepared families on disk, so a new process need not compute the references again (`softaudit.prepare`).

One file per family: a pickle (protocol 5) whose arrays lie out of band in the same file, each 64-byte aligned.
`load` maps the file and the arrays are read-only views of the mapping: nothing is copied, and the pages are
read when a measure first touches them. A file is used only by the code that wrote it, on a CPU that computes as this
one does: its name carries a fingerprint of softaudit's source, of numpy, ml_dtypes and mpmath, and of numpy's SIMD
targets and BLAS kernels (softaudit._platform.cpu). A file that cannot be read is treated as missing and removed.
Files are written atomically; `prune` (after an audit that wrote) removes the least recently used once the folder
holds more than `MAX_BYTES`. What a file holds is its object's to say: a prepared case keeps its reference packed
(and a built-in one the recipe that makes its inputs again), and derives the rest when read
(softaudit.prepare.Prepared, softaudit/_packed.py). What the main job's folder holds is in docs/benchmarks.md
(benchmarks/bench_cache.py).

These are pickles: keep the folder private (it is made 0700), as with any cache of pickled data.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import mmap
import os
import pickle
import struct
import sys
import time
from pathlib import Path

from ._atomic import atomic_file, is_temporary

MAGIC = b"softaud1"
ALIGN = 64
#: `prune` removes the least recently used files beyond this many bytes: the default suite's files five times over
#: (several seeds, or the files of earlier versions until they age out), or the full suite's.
MAX_BYTES = 2 << 30


def folder(chosen: str | os.PathLike | None = None) -> Path | None:
    """The cache folder: `chosen`, else $SOFTAUDIT_CACHE_DIR, else $XDG_CACHE_HOME/softaudit, else
    ~/.cache/softaudit; None where that is "off" (or empty)."""
    if chosen is None:
        chosen = os.environ.get("SOFTAUDIT_CACHE_DIR")
    if chosen is None:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "softaudit"
    return None if str(chosen).strip().lower() in ("", "off") else Path(chosen).expanduser()


@functools.cache
def fingerprint() -> str:
    """A digest of everything that decides a prepared family: softaudit's source, numpy, ml_dtypes and mpmath, and
    what numpy computes with on this CPU (its SIMD targets and BLAS kernels: the comparisons' errors kept with a
    family depend on them, so a cache written as another CPU is never read as this one's)."""
    import ml_dtypes
    import mpmath
    import numpy

    from ._platform import cpu

    versions = f"{sys.version_info[:2]} {numpy.__version__} {ml_dtypes.__version__} {mpmath.__version__} {cpu()}"
    digest = hashlib.sha256(versions.encode())
    package = Path(__file__).parent
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:20]


def save(path: Path, obj) -> int:
    """Write obj to path atomically (softaudit/_atomic.py), readable only by its owner; the bytes written."""
    buffers = []
    header = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    offsets, at = [], _aligned(len(MAGIC) + 16 + 16 * len(raws) + len(header))
    for raw in raws:
        offsets.append((at, raw.nbytes))
        at = _aligned(at + raw.nbytes)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with atomic_file(path, binary=True, private=True) as f:
        f.write(MAGIC + struct.pack("<QQ", len(header), len(raws)))
        f.write(b"".join(struct.pack("<QQ", o, n) for o, n in offsets) + header)
        for (offset, _), raw in zip(offsets, raws):
            f.write(b"\0" * (offset - f.tell()))
            f.write(raw)
        size = f.tell()
    return size


def load(path: Path):
    """The object saved at path, its arrays read-only views of the mapped file; None if there is none or it cannot
    be read (then it is removed)."""
    try:
        file = open(path, "rb")  # noqa: SIM115 (closed below, once mapped)
    except OSError:  # none there (or no folder)
        return None
    try:
        with file:
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        view = memoryview(mapped)
        if view[: len(MAGIC)] != MAGIC:
            raise ValueError("not a softaudit cache file")
        header_size, count = struct.unpack_from("<QQ", view, len(MAGIC))
        table = struct.unpack_from(f"<{2 * count}Q", view, len(MAGIC) + 16)
        start = len(MAGIC) + 16 + 16 * count
        buffers = [view[table[2 * i] : table[2 * i] + table[2 * i + 1]] for i in range(count)]
        if any(len(b) != table[2 * i + 1] for i, b in enumerate(buffers)):
            raise ValueError("truncated")
        obj = pickle.loads(view[start : start + header_size], buffers=buffers)
        with contextlib.suppress(OSError):
            os.utime(path)  # (recently used: pruned last)
        return obj
    except Exception:  # empty, truncated, not ours: computed afresh
        with contextlib.suppress(OSError):
            path.unlink()
        return None


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def prune(folder: Path) -> None:
    """Remove the least recently used files until the folder holds at most MAX_BYTES."""
    if not folder.is_dir():
        return
    files, now = [], time.time()
    for entry in os.scandir(folder):
        try:
            if not entry.is_file():
                continue
            stat = entry.stat()
        except FileNotFoundError:  # (another process's file, renamed or removed meanwhile)
            continue
        if not is_temporary(entry.name):
            files.append((stat.st_mtime, stat.st_size, entry.path))
        elif stat.st_mtime < now - 3600:  # left by a process killed while writing
            Path(entry.path).unlink(missing_ok=True)
    held = sum(size for _, size, _ in files)
    for _, size, name in sorted(files):
        if held <= MAX_BYTES:
            break
        Path(name).unlink(missing_ok=True)
        held -= size
