"""The mutant generator (softaudit.candidates.mutants): labelled mutants that differ from the built-in and compile,
and a known one that `run` kills."""

import re
from pathlib import Path

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


# The holes benchmarks/mutation.py found (mutants the hunt killed and run did not), each with the family that closes
# it: the test that would have caught it.
ROOT = Path(__file__).resolve().parents[1]


def _mutant(builtin, mistake, text):
    (m,) = [m for m in mutants(_builtin(builtin)) if m.mistake == mistake and text in m.source()]
    return m


def _verdicts(target, family, dtype):
    table = softaudit.audit(target, dtypes=[dtype], families=[family], isolation="none", workers=1).table
    return set(table["verdict"])


def test_tile_edges_fails_an_online_softmax_whose_running_max_misses_a_later_tile():
    # (the hunt found it in bfloat16: the max 3008 of a row of 132 in its second block, past exp's overflow)
    m = _mutant("softmax.online_b128", "max for min", "np.maximum(m, _mutant_row_min(chunk))")
    assert _verdicts(_builtin("softmax.online_b128"), "tile_edges", "bfloat16") <= {"pass", "warn"}
    assert "fail" in _verdicts(m.candidate(), "tile_edges", "bfloat16")


def test_attn_window_fails_a_window_whose_right_side_is_taken_as_unbounded_at_0():
    # (right < 0 made right < 1: window=(256, 0) moved bfloat16 outputs within its fail line; the hunt drew (0, 0))
    m = _mutant("attention.tiled_b64", "constant", "(right < 1)")
    assert _verdicts(_builtin("attention.tiled_b64"), "attn_window", "bfloat16") <= {"pass", "warn"}
    assert "fail" in _verdicts(m.candidate(), "attn_window", "bfloat16")


def test_attn_sinks_fails_the_held_out_kernel_that_drops_the_sink_on_a_partial_last_tile():
    kernel = str(ROOT / "benchmarks" / "heldout" / "sink_attention.py")
    assert "fail" in _verdicts(kernel, "attn_sinks", "float16")


def test_merge_large_lse_fails_a_merge_shifted_by_the_smallest_lse():
    # (lses within a few units of each other hid it; the hunt drew splits far apart)
    m = _mutant("merge_attention.textbook", "max for min", "lse.min(axis=0)")
    assert _verdicts(_builtin("merge_attention.textbook"), "merge_large_lse", "float64") <= {"pass", "warn"}
    assert "fail" in _verdicts(m.candidate(), "merge_large_lse", "float64")


def test_g_wide_fails_a_backward_that_sums_a_float16_g_in_float16():
    # (g near float16's max / 64, as loss scaling makes it: the hunt drew a row of 17 such g)
    m = _mutant("log_softmax_grad.f32acc", "cast dropped", "    g = g\n")
    assert _verdicts(_builtin("log_softmax_grad.f32acc"), "g_wide", "float16") <= {"pass", "warn"}
    assert "fail" in _verdicts(m.candidate(), "g_wide", "float16")
