"""The mutant generator (softaudit.candidates.mutants): labelled mutants that differ from the built-in and compile,
and a known one that `run` kills."""

import re

import numpy as np
import pytest

import softaudit
from softaudit.adapters import Candidate
from softaudit.candidates import builtins
from softaudit.candidates.mutants import OPERATORS, mutants


def _builtin(name):
    return next(c for c in builtins() if c.name == name)


def test_mutants_are_labelled_differ_from_the_original_and_compile():
    for name in ("softmax.max_shifted", "masked_softmax.where"):
        found = mutants(_builtin(name))
        assert found, name
        for m in found:
            assert re.fullmatch(r".+ at candidates/\w+\.py:\d+", m.label), m.label
            assert m.source() != m.original(), m.label
            made = m.candidate()
            assert made.kind == m.kind and callable(made.call) and made.name != name


def test_every_operator_class_makes_mutants_of_a_tiled_attention():
    made = {m.mistake for m in mutants(_builtin("attention.tiled_b64"))}
    assert made == {op.mistake for op in OPERATORS}


def _shift_dropped():
    (m,) = [m for m in mutants(_builtin("softmax.max_shifted")) if m.label.startswith("max shift dropped")]
    return m


def test_a_dropped_max_shift_overflows_where_the_built_in_does_not():
    m = _shift_dropped()
    assert "x - row_max(x) -> x" in m.label
    x = np.array([[200.0, 0.0]], np.float32)  # exp(200) overflows float32 (its max is about e**88.7)
    original, mutant = _builtin("softmax.max_shifted").call(x), m.candidate().call(x)
    # softmax([200, 0]) = [1 / (1 + e**-200), e**-200 / (1 + e**-200)]: 1, and e**-200 = 1.4e-87, below half of
    # float32's smallest subnormal (1.4e-45): 0
    np.testing.assert_array_equal(original, np.array([[1.0, 0.0]], np.float32))
    assert np.isnan(mutant[0, 0])  # inf / inf


def test_run_kills_a_dropped_max_shift():
    m = _shift_dropped()
    kw = dict(dtypes=["float32"], families=["textbook"], isolation="none", workers=1)
    original = softaudit.audit(_builtin("softmax.max_shifted"), **kw).table
    mutant = softaudit.audit(m.candidate(), **kw).table
    assert set(original["verdict"]) <= {"pass", "warn"}
    assert "fail" in set(mutant["verdict"])
    assert mutant["nan"].sum() > 0


def test_a_mutant_that_does_not_apply_says_so():
    with pytest.raises(ValueError, match="not a built-in"):
        mutants(Candidate("softmax", "mine", lambda x, axis=-1: x))
