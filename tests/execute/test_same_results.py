"""Isolated gives what InProcess gives, bit for bit: built-ins of every kind, 16-bit dtypes, masks, framework ops;
a candidate without a source reaches the worker by cloudpickle, or runs in process with a note; a whole audit's
table."""

import os
import threading

import ml_dtypes
import numpy as np
import pandas as pd
import pytest

import softaudit
from softaudit import Candidate, CandidateError, CandidateSkip
from softaudit.candidates import builtins
from softaudit.execute import InProcess, Isolated, _calls

RNG = np.random.default_rng(1)
ROWS = RNG.standard_normal((3, 200)) * 8
MASK = RNG.random((3, 200)) < 0.7
Q, K, V = (RNG.standard_normal((1, 2, 16, 8)) for _ in range(3))
CAUSAL = np.tril(np.ones((16, 16), bool))[None, None]


def inputs(kind: str, dtype):
    """(arrays, mask, output shape) of a kind, rounded to dtype."""
    if kind == "attention":
        return {n: a.astype(dtype) for n, a in zip("qkv", (Q, K, V))}, CAUSAL, Q.shape
    shape = ROWS.shape[:-1] if kind == "logsumexp" else ROWS.shape
    return {"x": ROWS.astype(dtype)}, (MASK if kind == "masked_softmax" else None), shape


def both(executors, candidate, dtype):
    arrays, mask, shape = inputs(candidate.kind, dtype)
    return [ex.call(candidate, arrays, mask, shape, dtype, 60) for ex in executors]


@pytest.fixture(scope="module")
def executors():
    with InProcess() as here, Isolated() as isolated:
        yield here, isolated


def bits(a: np.ndarray) -> bytes:
    return a.tobytes()


KINDS = ("softmax", "log_softmax", "logsumexp", "masked_softmax", "attention")
SOME = [c for kind in KINDS for c in [c for c in builtins() if c.kind == kind][:2]]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("candidate", SOME, ids=[c.name for c in SOME])
def test_builtins_give_the_same_bits(executors, candidate, dtype):
    (a, note_a), (b, note_b) = both(executors, candidate, dtype)
    assert a.dtype == b.dtype == np.dtype(dtype) and a.shape == b.shape
    assert bits(a) == bits(b) and note_a == note_b


@pytest.mark.parametrize("module", ["torch", "jax"])
def test_framework_candidates_run_in_workers(executors, module):
    pytest.importorskip(module)
    from softaudit.adapters._targets import load_target

    compared = []
    for kind in ("softmax", "attention"):  # (the first of each kind: imports and warm-up are what matter here)
        candidate = next(c for c in load_target(f"softaudit.frameworks.{module}") if c.kind == kind)
        for dtype in (np.float32, np.float64):
            (a, _), (b, _) = both(executors, candidate, dtype)
            assert bits(a) == bits(b), candidate.name
            compared.append(candidate.name)
    assert len(compared) == 4


def test_a_skip_is_a_skip(executors):
    def skips(x, axis=-1):
        raise CandidateSkip("no such dtype here")

    with pytest.raises(CandidateSkip, match=r"^no such dtype here$"):
        both(executors[1:], Candidate("softmax", "skips", skips), np.float32)


def test_a_lambda_reaches_the_worker_by_cloudpickle(executors):
    pid = Candidate("softmax", "pid", lambda x, axis=-1: np.full(x.shape, float(os.getpid())))
    (here, note_here), (there, note_there) = both(executors, pid, np.float64)
    assert here[0, 0] == os.getpid() != there[0, 0] and note_here == note_there == ""


def test_a_candidate_cloudpickle_cannot_send_runs_in_process_with_a_note(executors):
    lock = threading.Lock()

    def locked(x, axis=-1):
        with lock:
            return np.full(x.shape, float(os.getpid()))

    (_, _), (there, note) = both(executors, Candidate("softmax", "locked", locked), np.float64)
    assert there[0, 0] == os.getpid() and note.startswith("ran in process: cloudpickle cannot send it (TypeError")


def test_a_candidate_that_does_not_load_in_a_worker_is_an_error(executors):
    gone = Candidate("softmax", "gone", lambda x, axis=-1: x, source="softaudit_no_such_module:f")
    cause = "^does not load in a worker: TargetError: module 'softaudit_no_such_module'"
    with pytest.raises(CandidateError, match=cause):
        both(executors[1:], gone, np.float32)


@pytest.mark.parametrize("batch_bytes", [_calls.BATCH_BYTES, 1], ids=["a unit a round trip", "a case a round trip"])
def test_an_isolated_audit_gives_the_in_process_table(monkeypatch, batch_bytes):
    """A unit's calls go to the worker while the unit before is judged (Serial.submit_staged); a unit of several
    round trips is judged before the next unit's are sent. Either way, the table made in process."""
    monkeypatch.setattr(_calls, "BATCH_BYTES", batch_bytes)
    targets = [c for c in builtins() if c.kind == "softmax"][:3]
    tables = [
        softaudit.audit(targets, dtypes=["float16"], suite="quick", isolation=isolation, cache_dir="off").table
        for isolation in ("none", "worker")
    ]
    pd.testing.assert_frame_equal(*(table.drop(columns="seconds") for table in tables))
