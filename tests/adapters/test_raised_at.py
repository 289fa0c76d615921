"""A candidate that raises has its error row say where: the file and line of the frame that raised, in the user's
code (a numpy call that raised is told by the user's line that made it), however the call was isolated."""

import json

import pytest

import softaudit

KERNELS = """import numpy as np


def helper(x):
    raise ValueError("bad row")


def raises_in_a_helper(x, axis=-1):
    return helper(x)


def raises_in_numpy(x, axis=-1):
    return np.reshape(x, (7, 7, 7))
"""


def _line(text: str) -> int:
    """The line of the first line of KERNELS that contains `text`, counted here, not by the code under test."""
    return next(i for i, line in enumerate(KERNELS.splitlines(), 1) if text in line)


@pytest.mark.parametrize("isolation", ["none", "worker"])
def test_the_error_row_names_the_file_and_line_that_raised(tmp_path, monkeypatch, isolation):
    (tmp_path / "kernels.py").write_text(KERNELS)
    monkeypatch.chdir(tmp_path)
    targets = ["kernels.py:raises_in_a_helper", "kernels.py:raises_in_numpy"]
    table = softaudit.audit(
        targets, kind="softmax", dtypes=["float32"], suite="quick", families=["textbook"], isolation=isolation
    ).table
    helper, numpy_call = table.note
    assert helper == f"raised ValueError: bad row (at kernels.py:{_line('raise ValueError')}, in helper)"
    assert numpy_call.startswith("raised ValueError: cannot reshape"), numpy_call
    assert numpy_call.endswith(f"(at kernels.py:{_line('np.reshape')}, in raises_in_numpy)"), numpy_call


def test_a_library_function_as_the_candidate_is_named_by_its_own_frame():
    """json.loads as a candidate raises in the standard library alone, with no line of the user's: the candidate's
    own frame (the outermost) is named, in its file."""
    import inspect

    lines, first = inspect.getsourcelines(json.loads)
    raising = first + next(i for i, line in enumerate(lines) if "raise TypeError" in line)
    table = softaudit.audit(
        softaudit.Candidate("softmax", "loads", json.loads),
        dtypes=["float32"],
        suite="quick",
        families=["textbook"],
        isolation="none",
    ).table
    (note,) = table.note
    assert note.startswith("raised TypeError: "), note
    assert note.endswith(f"(at {json.__file__}:{raising}, in loads)"), note
