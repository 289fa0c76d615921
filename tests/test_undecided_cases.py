"""A case whose exact result the reference cannot decide (PrecisionExhausted) is an `error` row naming the case, and
the run goes on: the family's other cases are measured, the other families judged as ever. The engine is made to
raise on one chosen input (the reference itself decides every input the project knows of)."""

import numpy as np
import pytest

import softaudit
from softaudit import reference
from softaudit.cases import FAMILIES
from softaudit.reference import PrecisionExhausted, format_of


@softaudit.candidate(kind="softmax")
def max_shifted(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


POISON = 12.5  # the input value on which the engine gives up


@pytest.fixture
def undecidable(monkeypatch):
    """The row engine raising PrecisionExhausted on any input holding POISON."""
    real = reference.round_rows

    def round_rows(formula, x, *args, **kwargs):
        if np.any(x.astype(np.float64) == POISON):
            raise PrecisionExhausted("rounding undecided at 131072 bits")
        return real(formula, x, *args, **kwargs)

    monkeypatch.setattr(reference, "round_rows", round_rows)


def test_an_undecidable_case_file_is_an_error_row_naming_it_and_the_run_goes_on(tmp_path, undecidable):
    poisoned, fine = tmp_path / "poisoned.npy", tmp_path / "fine.npy"
    np.save(poisoned, np.array([[0.0, POISON, 1.0]]))
    np.save(fine, np.array([[0.0, 2.0, 1.0]]))
    table = softaudit.audit(
        max_shifted,
        dtypes=["float32"],
        cases=[poisoned, fine],
        families=["file:poisoned", "file:fine"],
        isolation="none",
        cache=False,
    ).table
    rows = table.set_index("family")
    assert rows.loc["file:poisoned", "verdict"] == "error"
    note = rows.loc["file:poisoned", "note"]
    assert f"case 0 ({poisoned})" in note and "PrecisionExhausted: rounding undecided at 131072 bits" in note
    assert rows.loc["file:fine", "verdict"] == "pass"


def test_a_built_in_familys_undecidable_case_leaves_its_other_cases_measured(monkeypatch):
    """One case of the gaussian family made undecidable: its row is an error that names case 2 and says what makes
    it again, and the family's other cases are still measured."""
    fmt = format_of("float32")
    cases = FAMILIES["gaussian"].cases("softmax", fmt, "quick", 0)
    assert len(cases) > 2
    marked = float(reference.round_to(cases[2].arrays["x"], "float32").reshape(-1)[0])
    real = reference.round_rows

    def round_rows(formula, x, *args, **kwargs):
        if x.size and float(x.reshape(-1)[0]) == marked:
            raise PrecisionExhausted("rounding undecided at 131072 bits")
        return real(formula, x, *args, **kwargs)

    monkeypatch.setattr(reference, "round_rows", round_rows)
    table = softaudit.audit(
        max_shifted, dtypes=["float32"], suite="quick", families=["gaussian"], isolation="none", cache=False
    ).table
    (row,) = table.to_dict("records")
    assert row["verdict"] == "error" and row["cause"] == "error"
    assert "the reference could not decide gaussian's case 2 (" in row["note"]
    assert "made again by suite 'quick', seed 0" in row["note"]
    assert row["cases"] == len(cases) - 1 and row["elements"] > 0
