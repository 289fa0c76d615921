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


NEW_KINDS = '''
import numpy as np
import softaudit


@softaudit.candidate(kind="cross_entropy")
def mean_counts_ignored(logits, target, *, ignore_index=-100, reduction="none"):
    """Cross-entropy in float64 whose mean divides by every row, ignored ones included (PyTorch #73205's pattern)."""
    x = logits.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True)))[:, 0]
    ignored = target == ignore_index
    loss = np.where(ignored, 0.0, lse - x[np.arange(len(x)), np.where(ignored, 0, target)])
    if reduction == "none":
        return loss.astype(logits.dtype)
    return np.array(loss.sum() / (len(x) if reduction == "mean" else 1)).astype(logits.dtype)


@softaudit.candidate(kind="attention")
def cap_after_mask(q, k, v, mask=None, *, softcap=None):
    """Attention in float64 that caps the scores after the mask's -inf fill (FlashAttention PR #1025): a masked
    key's score becomes -softcap and takes weight. A query with no key gives 0."""
    s = q.astype(np.float64) @ np.swapaxes(k.astype(np.float64), -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    if softcap is not None:
        s = softcap * np.tanh(s / softcap)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    return ((e / np.where(total > 0, total, 1.0)) @ v.astype(np.float64)).astype(q.dtype)
'''


@pytest.fixture
def new_kinds(tmp_path):
    path = tmp_path / "new_kinds.py"
    path.write_text(NEW_KINDS)
    return path


def test_a_mean_that_counts_ignored_rows_is_found_with_its_options_and_replays_through_run(new_kinds, tmp_path):
    """The search draws the options the candidate takes (ignore_index, reduction: not the softcap or smoothing it does
    not take), keeps those the failure needs, and the corpus keeps them for `softaudit run`."""
    import softaudit

    corpus = tmp_path / "corpus"
    (finding,) = hunt(f"{new_kinds}:mean_counts_ignored", dtypes=["float32"], budget=10, corpus=corpus)
    assert finding.failed, finding.reason
    assert finding.options.get("reduction") == "mean" and set(finding.options) <= {"reduction", "ignore_index"}
    from softaudit.report.hunt_tables import hunt_table

    assert "reduction='mean'" in hunt_table([finding]).options[0]  # (hunt.csv and hunt.md name the keywords)
    ignored = finding.inputs["target"] == finding.options.get("ignore_index", -100)
    assert ignored.any() and not ignored.all() and len(ignored) == 2  # (one row of each is all it needs)
    table = softaudit.audit(
        f"{new_kinds}:mean_counts_ignored", dtypes=["float32"], suite="quick", families=["ce_z_loss"], corpus=corpus
    ).table
    replayed = table[table.family == "corpus"]
    assert len(replayed) == 1 and (replayed.verdict == "fail").all()


def test_a_softcap_after_the_mask_is_found_on_a_masked_key_with_the_cap_kept(new_kinds):
    (finding,) = hunt(f"{new_kinds}:cap_after_mask", dtypes=["float32"], budget=10, corpus=None)
    assert finding.failed, finding.reason
    assert set(finding.options) == {"softcap"} and set(finding.inputs) == {"q", "k", "v"}
    assert finding.mask is not None and not finding.mask.all()  # (a masked key: where the capped -inf takes weight)


def test_a_merge_that_subtracts_minus_inf_from_minus_inf_is_found_on_one_empty_split():
    (finding,) = hunt("softaudit.candidates.merge_attention:unguarded", dtypes=["float16"], budget=10, corpus=None)
    assert finding.failed and "NaN where the exact result is defined" in finding.reason, finding.reason
    lses = finding.inputs["lses"].astype(np.float64)
    assert lses.shape == (1, 1) and lses[0, 0] == -np.inf  # (one query whose only split is empty: o = 0, lse = -inf)
