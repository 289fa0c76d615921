"""Arrays between the parent and a worker through a shared-memory file both map, not through the pool's pipe.

A pipe moves megabytes slowly: a (1, 8, 1024, 64) float32 attention (6 MiB in, 2 MiB out) would cost far more per
call through it than its copies through shared memory. The parent
writes a call's inputs, the worker maps the file once and writes the output after them; calls are serial, so one
region serves them all. The file lives in /dev/shm (memory) where there is one, in a private folder the parent
removes on close or exit (a parent killed with SIGKILL leaves it behind, as any temporary file).
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import shutil
import tempfile
import weakref

import numpy as np

_ALIGN = 64
#: The first bytes of the file: which call of a round trip the worker is in (-1: none started) and since when
#: (time.monotonic(), one clock for every process), so that the parent gives each call its own time limit.
HEADER = _ALIGN


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


class Arena:
    """The parent's side: a file grown as calls need, written by `put`, read by `take`."""

    def __init__(self):
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self._folder = tempfile.mkdtemp(prefix="softaudit-", dir=base)
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._folder, ignore_errors=True)
        self._map, self.path, self.size, self._count = None, None, 0, 0

    def put(self, arrays: list, out_shapes: tuple, out_dtype) -> tuple[list, list]:
        """Write the arrays (None stays None); their specs (offset, shape, dtype), and the outputs', one per shape."""
        specs, offset = [], HEADER
        for a in arrays:
            specs.append(None if a is None else (offset, a.shape, a.dtype))
            offset = offset if a is None else _aligned(offset + a.nbytes)
        out_dtype = np.dtype(out_dtype)
        outs = []
        for shape in out_shapes:
            outs.append((offset, tuple(shape), out_dtype))
            offset = _aligned(offset + math.prod(shape) * out_dtype.itemsize)
        self._reserve(offset)
        progress(self._map)[...] = (-1.0, 0.0)
        for a, spec in zip(arrays, specs):
            if a is not None:
                view(self._map, spec)[...] = a
        return specs, outs

    def progress(self) -> tuple[int, float]:
        """(the call the worker is in, since when); (-1, 0.0) before it starts the first."""
        index, since = progress(self._map)
        return int(index), float(since)

    def take(self, spec: tuple) -> np.ndarray:
        """A copy of what the worker wrote at spec."""
        return view(self._map, spec).copy()

    def _reserve(self, nbytes: int) -> None:
        if nbytes <= self.size:
            return
        self._release()
        self.size = max(2 * self.size, -(-nbytes // 2**20) * 2**20)
        self._count += 1
        self.path = os.path.join(self._folder, f"arena-{self._count}")  # (a new name: the worker maps it afresh)
        with open(self.path, "w+b") as f:
            f.truncate(self.size)
            self._map = mmap.mmap(f.fileno(), self.size)

    def _release(self) -> None:
        if self._map is not None:
            self._map.close()
            with contextlib.suppress(FileNotFoundError):  # (at exit, the folder's finalizer may have gone first)
                os.unlink(self.path)
            self._map = None

    def close(self) -> None:
        self._release()
        self._cleanup()


def progress(buffer) -> np.ndarray:
    """The header's (call index, monotonic start) as a float64 view: the worker writes the time, then the index
    (x86 keeps stores in order; the parent reads twice before it acts on a deadline anyway)."""
    return np.ndarray((2,), np.float64, buffer=buffer, offset=0)


def view(buffer, spec: tuple) -> np.ndarray:
    offset, shape, dtype = spec
    return np.ndarray(shape, dtype, buffer=buffer, offset=offset)


_mapped: dict = {}  # the worker's side: path -> its mapping (one at a time)


def worker_views(path: str, size: int, specs: list) -> tuple[list, object]:
    """In the worker: views of the arrays at specs (None stays None), and the mapping they are in."""
    found = _mapped.get(path)
    if found is None:
        for old in _mapped.values():
            with contextlib.suppress(BufferError):  # (a view still alive somewhere: the mapping goes with it)
                old.close()
        _mapped.clear()
        with open(path, "r+b") as f:
            found = _mapped[path] = mmap.mmap(f.fileno(), size)
    return [None if spec is None else view(found, spec) for spec in specs], found
