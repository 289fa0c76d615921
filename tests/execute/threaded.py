"""A softmax candidate that reports how many threads numpy's BLAS and torch would use for it (tests/execute/
test_threads.py): it writes them to the file named by $SOFTAUDIT_TEST_THREADS, one line a call."""

import os

import numpy as np
from threadpoolctl import threadpool_info

import softaudit


@softaudit.candidate(kind="softmax")
def threads_seen(x, axis=-1):
    blas = max((i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"), default=0)
    with open(os.environ["SOFTAUDIT_TEST_THREADS"], "a") as f:
        f.write(f"{blas}\n")
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
