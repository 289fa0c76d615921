"""What a user writes and catches is public: CandidateSkip for a kernel's "not supported", the error types."""

import numpy as np
import pytest

import softaudit


def no_float8(x, axis=-1):
    """A kernel that supports no float8 type: it says so, and the audit reports a skip with its reason."""
    if x.dtype.itemsize == 1:
        raise softaudit.CandidateSkip("no float8")
    w = x.astype(np.float64)
    e = np.exp(w - w.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def test_a_numpy_candidate_that_raises_candidate_skip_gives_skip_rows_with_its_reason():
    result = softaudit.audit(
        no_float8, kind="softmax", dtypes=["float8_e4m3fn", "float16"], suite="quick", families=["textbook", "gaussian"]
    )
    table = result.table.set_index(["dtype", "family"])
    assert list(table.loc["float8_e4m3fn"].verdict) == ["skip", "skip"]
    assert list(table.loc["float8_e4m3fn"].note) == ["no float8", "no float8"]
    assert list(table.loc["float16"].verdict) == ["pass", "pass"] and result.passed


@pytest.mark.parametrize(
    "name, module",
    [
        ("CandidateSkip", "softaudit.adapters._bridge"),
        ("CandidateError", "softaudit.adapters._call"),
        ("TargetError", "softaudit.adapters._targets"),
        ("CaseFileError", "softaudit.cases._files"),
    ],
)
def test_the_types_a_user_catches_are_exported(name, module):
    assert name in softaudit.__all__ and getattr(softaudit, name).__module__ == module


def test_the_errors_are_the_ones_raised():
    with pytest.raises(softaudit.TargetError):
        softaudit.audit("no_such_module_xyz")
    with pytest.raises(softaudit.CaseFileError):
        softaudit.audit("softaudit.candidates.softmax:naive", cases=["missing.npy"])
    from softaudit.worst import replay

    result = softaudit.audit(no_float8, kind="softmax", dtypes=["float16"], suite="quick", families=["textbook"])
    (record,) = result.worst.values()
    broken = softaudit.Candidate("softmax", "broken", lambda x, axis=-1: 1 / 0)
    with pytest.raises(softaudit.CandidateError, match="raised ZeroDivisionError"):
        replay(record, broken)
