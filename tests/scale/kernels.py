"""Softmax candidates for the scale-out tests: a sound one, and ones that crash, hang, return NaN or are marked to run
on a GPU, each on some families only, so that the rules across a candidate's families (not called again after a
time limit, NaN everywhere) are exercised when its families run on different workers.

The quick suite's `textbook` rows are 3 or 4 long; `gaussian` and `offset` rows are 32 long.
"""

import ctypes
import os
import time

import numpy as np

from softaudit import candidate


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@candidate(kind="softmax")
def sound(x, axis=-1):
    return _softmax(x, axis)


@candidate(kind="softmax")
def crashes_on_short_rows(x, axis=-1):
    if x.shape[-1] < 32:
        ctypes.string_at(0)
    return _softmax(x, axis)


@candidate(kind="softmax")
def hangs_on_long_rows(x, axis=-1):
    if x.shape[-1] >= 32:
        time.sleep(60)
    return _softmax(x, axis)


@candidate(kind="softmax")
def nan_everywhere(x, axis=-1):
    return np.full(x.shape, np.nan, x.dtype)


@candidate(kind="softmax", device="cuda")
def marked_for_a_gpu(x, axis=-1):
    """A numpy softmax marked to run on a GPU: it runs on the CPU of whichever worker gets it, and notes the process
    that worker is (this process's parent: isolated calls run in a child of the worker) in $SOFTAUDIT_TEST_WHERE."""
    with open(os.environ["SOFTAUDIT_TEST_WHERE"], "a") as f:
        f.write(f"{os.getppid()}\n")
    return _softmax(x, axis)
