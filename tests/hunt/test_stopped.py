"""A hunt whose judgement of an input raises (the reference's PrecisionExhausted, made to happen here on inputs with
a value past 2) stops with that input kept: shrunk by Hypothesis, saved to the corpus where failures go, printed
with where it went, and the hunt exits 1 as a run with an error row does."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from softaudit import reference
from softaudit.cli import main
from softaudit.hunt import hunt
from softaudit.reference import PrecisionExhausted

CANDIDATE = """
import numpy as np
import softaudit


@softaudit.candidate(kind="softmax")
def max_shifted(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
"""


def _undecidable(x) -> bool:
    return bool(np.any(np.abs(np.asarray(x, np.float64)) > 2))


@pytest.fixture(autouse=True)
def derandomised(monkeypatch):
    monkeypatch.setenv("CI", "1")


@pytest.fixture
def undecidable(monkeypatch):
    real = reference.round_rows

    def round_rows(formula, x, *args, **kwargs):
        if _undecidable(x):
            raise PrecisionExhausted("rounding undecided at 131072 bits")
        return real(formula, x, *args, **kwargs)

    monkeypatch.setattr(reference, "round_rows", round_rows)


@pytest.fixture
def candidate(tmp_path):
    path = tmp_path / "sound.py"
    path.write_text(CANDIDATE)
    return f"{path}:max_shifted"


def test_the_input_that_stopped_the_search_is_kept_and_saved(candidate, tmp_path, undecidable):
    corpus = tmp_path / "corpus"
    (finding,) = hunt(candidate, dtypes=["float32"], budget=10, corpus=corpus, isolation="none")
    assert finding.stopped and not finding.failed
    assert finding.reason == "hunt stopped: PrecisionExhausted: rounding undecided at 131072 bits"
    assert _undecidable(finding.inputs["x"])  # the input that raised, as Hypothesis left it
    saved = json.loads((corpus / "sound_max_shifted.json").read_text())
    (entry,) = saved["cases"]
    x = np.array([[float.fromhex(v) for v in row] for row in entry["inputs"]["x"]["values"]])
    assert np.array_equal(x.reshape(finding.inputs["x"].shape), finding.inputs["x"].astype(np.float64))
    assert entry["reason"] == finding.reason and finding.corpus_file == str(corpus / "sound_max_shifted.json")


def test_the_terminal_says_error_and_where_the_input_went(candidate, tmp_path, undecidable):
    corpus = tmp_path / "corpus"
    options = ["--dtype", "float32", "--budget", "10", "--corpus", str(corpus), "--out", str(tmp_path)]
    result = CliRunner().invoke(main, ["hunt", candidate, "--isolation", "none", "--workers", "1", *options])
    assert result.exit_code == 1, result.output
    assert "ERROR" in result.output and "hunt stopped: PrecisionExhausted" in result.output
    assert f"corpus: {corpus / 'sound_max_shifted.json'}" in result.output
