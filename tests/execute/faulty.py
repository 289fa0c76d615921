"""Candidates that fail the way other people's code does: crash, abort, exit, hang, blow up memory, flood output.

Each is a softmax candidate; `sound` is a correct one, called before and after a fault to show the pool recovered.
"""

import contextlib
import ctypes
import os
import signal
import sys
import time

import numpy as np

from softaudit import candidate


@candidate(kind="softmax")
def sound(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@candidate(kind="softmax")
def segfault(x, axis=-1):
    return ctypes.string_at(0)


@candidate(kind="softmax")
def aborts(x, axis=-1):
    os.abort()


@candidate(kind="softmax")
def exits_3(x, axis=-1):
    sys.exit(3)


@candidate(kind="softmax")
def exits_0(x, axis=-1):
    sys.exit(0)


@candidate(kind="softmax")
def os_exit_5(x, axis=-1):
    os._exit(5)


@candidate(kind="softmax")
def kills_itself(x, axis=-1):
    os.kill(os.getpid(), signal.SIGKILL)


@candidate(kind="softmax")
def blocks_alarm(x, axis=-1):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(60)


@candidate(kind="softmax")
def swallows(x, axis=-1):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # the in-process time limit is an Exception: swallowed here
            time.sleep(60)


@candidate(kind="softmax")
def spins(x, axis=-1):
    while True:
        pass


@candidate(kind="softmax")
def hangs_on_float32(x, axis=-1):
    if x.dtype == np.float32:
        time.sleep(60)
    return sound(x, axis)


@candidate(kind="softmax")
def allocates(x, axis=-1):
    return np.ones(2**31, np.uint8).sum() + x  # 2 GiB


@candidate(kind="softmax")
def prints(x, axis=-1):
    line = "x" * 1023 + "\n"
    for _ in range(8 * 1024):  # 8 MiB through Python, 8 MiB straight to the file descriptors
        print(line, end="")
        sys.stderr.write(line)
    os.write(1, b"y" * 2**22)
    os.write(2, b"z" * 2**22)
    return sound(x, axis)


_kept = []


@candidate(kind="softmax")
def grows(x, axis=-1):
    """Keeps 400 MB it allocated, as torch and JAX keep their kernels and caches, past loky's leak check (300 MB,
    checked at most once a second); each output is the worker's pid."""
    if not _kept:
        _kept.append(np.ones(50_000_000))  # (written, so resident)
    time.sleep(1.1)
    return np.full(x.shape, float(os.getpid()), x.dtype)


_calls = []


@candidate(kind="softmax")
def counts(x, axis=-1):
    """Each output the number of calls this process has made of it (and the pid, in the second column), so a test
    sees the order and the process of a batch of calls; raises on rows whose first entry is 99."""
    _calls.append(1)
    if x.size and x.reshape(-1)[0] == 99:
        raise ValueError("a 99")
    out = np.full(x.shape, float(len(_calls)), x.dtype)
    out[..., 1] = os.getpid()
    return out


@candidate(kind="softmax")
def naps(x, axis=-1):
    """Sleeps x's first entry in seconds, then returns zeros: a call that takes a set time."""
    time.sleep(float(x.reshape(-1)[0]))
    return np.zeros(x.shape, x.dtype)
