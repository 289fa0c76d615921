"""The results contract (softaudit/results.py): the table's columns and types, the verdicts and the summary line,
the row key, the worst input's exact JSON round trip."""

import math

import numpy as np
import pandas as pd
import pytest

import softaudit
from softaudit import results
from softaudit.results import CASE_COLUMNS, COLUMNS, RowKey, WorstInput

from .test_runner import good, raises


@pytest.fixture(scope="module")
def result():
    """A passing candidate and one that raises (error rows: most columns missing), on cases small enough that the
    worst inputs are kept whole."""
    return softaudit.audit(
        [good, raises],
        kind="softmax",
        dtypes=["float16"],
        suite="quick",
        families=["gaussian", "textbook"],
        isolation="none",
    )


def _is(value, kind) -> bool:
    """Whether a table's value is of the contract's type (a count in a column with a missing value is a float)."""
    if kind is int:
        return isinstance(value, (int, np.integer)) or (isinstance(value, float) and value.is_integer())
    if kind is float:
        return isinstance(value, (float, np.floating))
    return isinstance(value, kind)


def test_the_table_has_the_columns_in_order_each_of_its_type(result):
    table = result.table
    assert list(table.columns) == list(COLUMNS)
    assert set(table.verdict) == {"pass", "error"}
    for column, kind in COLUMNS.items():
        for value in table[column]:
            missing = value is None or (isinstance(value, float) and math.isnan(value))
            assert (missing and column not in ("candidate", "verdict", "note")) or _is(value, kind), (column, value)


def test_the_per_case_table_starts_with_its_columns(result):
    assert list(result.cases.columns[: len(CASE_COLUMNS)]) == list(CASE_COLUMNS)
    assert set(result.cases.columns[len(CASE_COLUMNS) :]) <= {"scale", "n"}  # (the families' parameters)


def test_the_counts_name_every_verdict_and_the_summary_line_says_them():
    table = pd.DataFrame({"verdict": ["pass", "pass", "fail", "skip"]})
    assert results.verdict_counts(table) == {"pass": 2, "warn": 0, "fail": 1, "error": 0, "skip": 1}
    assert results.summary_line(table) == "4 rows: 2 pass, 0 warn, 1 fail, 0 error, 1 skip"
    assert results.summary_line(table[table.verdict != "skip"]) == "3 rows: 2 pass, 0 warn, 1 fail, 0 error"


def test_a_row_key_names_a_row_in_the_worst_inputs_and_the_baseline(result):
    row = result.table.iloc[0].to_dict()
    key = RowKey.of(row)
    assert result.worst[key] is result.worst_inputs[0] and result.worst_inputs[0].key == key
    assert key == (row["candidate"], "float16", row["family"], "")  # (a tuple: README's lookups work)
    assert results.row_key(row) == f"{row['candidate']} | float16 | {row['family']}"
    assert RowKey("c", "float16", "attn_gaussian", "dq").text() == "c | float16 | attn_gaussian | dq"
    assert results.row_key({"candidate": "c", "dtype": "float32", "family": "f"}) == "c | float32 | f"  # (no output)


def test_a_worst_input_comes_back_from_its_json_exactly(result):
    worst = result.worst_inputs[0]
    assert worst.inputs is not None  # (small: the whole case is kept)
    back = WorstInput.from_json(worst.as_json())
    assert back.as_json() == worst.as_json()
    for name, array in worst.inputs.items():
        assert back.inputs[name].dtype == array.dtype and back.inputs[name].tobytes() == array.tobytes()
    assert back.output == worst.output and back.reference == worst.reference and back.key == worst.key


def test_the_result_says_what_failed_and_whether_it_was_interrupted(result):
    assert not result.passed and not result.interrupted
    assert set(result.failing.verdict) == {"error"} and len(result.failing) == 2
