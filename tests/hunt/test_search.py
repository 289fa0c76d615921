"""The hunt finds what `softaudit run` finds in batches and masks, moves it to the boundary that matters, and prints it.

Each search runs derandomised (CI set, as in CI) with a small budget; the expected shrunk inputs are worked out here
independently of the hunt: two rows for a sum over the whole array, one fully masked row for the -1e9 fill, and the
overflow threshold found by stepping through the dtype's values with numpy.
"""

import math

import numpy as np
import pytest
from click.testing import CliRunner

from softaudit.cli import main
from softaudit.hunt import hunt

BROKEN = '''
import numpy as np
import softaudit


@softaudit.candidate(kind="softmax")
def whole_array(x, axis=-1):
    """Softmax that max-shifts and sums over the whole array instead of each row."""
    e = np.exp(x - x.max())
    return (e / e.sum()).astype(x.dtype)


@softaudit.candidate(kind="softmax")
def min_shifted(x, axis=-1):
    """Softmax that subtracts the row's minimum: exp (in float64, rounded to the dtype) overflows once a row spans
    more than about log(max)."""
    with np.errstate(all="ignore"):
        e = np.exp((x - x.min(axis=-1, keepdims=True)).astype(np.float64)).astype(x.dtype)
        return e / e.sum(axis=-1, keepdims=True)
'''


@pytest.fixture(autouse=True)
def derandomised(monkeypatch):
    monkeypatch.setenv("CI", "1")


@pytest.fixture
def broken(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text(BROKEN)
    return path


def first_overflowing(dtype) -> float:
    """The smallest value t of the dtype whose exp, rounded to the dtype, is inf: stepped to with nextafter from a
    value whose exp is finite (0.1% below log(max))."""
    t = np.array(0.999 * math.log(float(np.finfo(dtype).max)), dtype)
    with np.errstate(over="ignore"):
        assert np.isfinite(np.array(np.exp(float(t))).astype(dtype))
        while np.isfinite(np.array(np.exp(float(t))).astype(dtype)):
            t = np.nextafter(t, np.array(np.inf, dtype))
    return float(t)


def test_a_sum_over_the_whole_array_is_found_and_shrunk_to_two_rows(broken):
    (finding,) = hunt(f"{broken}:whole_array", dtypes=["float32"], budget=10, corpus=None)
    assert finding.failed, finding.reason
    assert finding.inputs["x"].shape == (2, 1)  # one row alone is right: the defect needs two


def test_the_neg1e9_fill_gives_nan_on_one_fully_masked_row_in_float16():
    (finding,) = hunt("softaudit.candidates.masked_softmax:fill_neg1e9", dtypes=["float16"], budget=10, corpus=None)
    assert finding.failed and finding.reason.startswith("fully masked rows give nan"), finding.reason
    assert finding.inputs["x"].shape == finding.mask.shape == (1, 1)
    assert not finding.mask.any()


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_an_overflow_is_shrunk_to_the_threshold_of_the_dtype(broken, dtype):
    (finding,) = hunt(f"{broken}:min_shifted", dtypes=[dtype], budget=10, corpus=None)
    assert finding.failed and "NaN" in finding.reason, finding.reason
    x = finding.inputs["x"].astype(np.float64)
    assert x.shape == (1, 2) and sorted(np.abs(x[0]))[0] == 0  # a 0 and the logit that overflows
    spread = float(np.abs(x).max())
    assert spread == first_overflowing(dtype)
    below = float(np.nextafter(np.array(spread, dtype), np.array(0, dtype)))
    assert below < math.log(float(np.finfo(dtype).max)) < spread  # (about log(max): the check's check)


def test_the_terminal_shows_the_input_in_hex_and_decimal_its_reason_and_the_corpus_file(broken, tmp_path):
    options = ["--dtype", "float16", "--budget", "10", "--corpus", str(tmp_path / "corpus"), "--out", str(tmp_path)]
    result = CliRunner().invoke(main, ["hunt", f"{broken}:min_shifted", *options])
    assert result.exit_code == 1, result.output
    assert "broken:min_shifted float16: 1 NaN where the exact result is defined" in result.output
    assert "x (1, 2) float16:" in result.output
    assert "0x1.63p+3 (11.09)" in result.output  # 11.09375, the first float16 whose exp overflows
    corpus = tmp_path / "corpus" / "broken_min_shifted.json"
    assert f"corpus: {corpus}" in result.output and corpus.is_file()
