"""Each built-in's documented weakness is what the audit finds; the best-practice built-ins pass every family."""

from importlib import resources

import numpy as np
import pytest

import softaudit
from softaudit import candidates
from softaudit import reference as R

BEST = list(candidates.BEST.values())
DTYPES = ["float16", "bfloat16", "float32", "float64"]


@pytest.fixture(scope="module")
def quick(quick_audit):
    table, _ = quick_audit
    assert set(table.dtype) == set(DTYPES)
    return table


def rows(table, name, dtype=None, family=None):
    t = table[table.candidate == name]
    if dtype:
        t = t[t.dtype == dtype]
    if family:
        t = t[t.family == family]
    return t


def test_best_practice_builtins_pass_every_family_in_every_dtype(quick):
    best = quick[quick.candidate.isin(BEST) & ~quick.kind.str.endswith("_grad")]
    assert len(best) > 100
    failing = best[best.verdict != "pass"]
    assert failing.empty, failing[["candidate", "dtype", "family", "note"]].to_string()


def test_best_practice_backward_builtins_never_fail_and_warn_only_for_flushed_subnormals_or_missed_zeros(quick):
    """Best practice computes float32 and float64 gradients in the dtype itself, so a gradient below the normal
    range can come out 0 (a product of a subnormal p), and where the exact gradient is 0 (g constant along the
    row) rounding leaves a tiny nonzero, infinitely many ulps of 0 (docs/gradients.md): those, and nothing else,
    are warns."""
    best = quick[quick.candidate.isin(BEST) & quick.kind.str.endswith("_grad")]
    assert len(best) > 100
    assert set(best.verdict) <= {"pass", "warn"}, best[best.verdict != "pass"][
        ["candidate", "dtype", "family", "note"]
    ].to_string()
    warned = best[best.verdict == "warn"]
    flushed = (warned.flushed > 0) & warned.note.str.contains("subnormal results? came out 0")
    expected = flushed | (warned.family == "g_constant")
    assert expected.all(), warned[["candidate", "dtype", "family", "note"]].to_string()


def test_naive_softmax_overflows_in_float16_past_logits_of_about_11(tmp_path):
    path = tmp_path / "edge.npy"
    np.save(path, np.array([[10.9, 0.0], [11.2, 0.0]]))  # exp(11.2) = 73130 > 65504, exp(10.9) = 54176 < 65504
    table = softaudit.audit(
        "softaudit.candidates.softmax:naive", dtypes=["float16", "float32"], cases=[path], suite="quick"
    ).table
    edge = table[table.family == "file:edge"].set_index("dtype")
    # [11.2, 0]: inf / inf = NaN for the first entry, 1 / inf = 0 for the second (an underflow); [10.9, 0] is fine
    assert edge.loc["float16", "nan"] == 1 and edge.loc["float16", "underflow"] == 1
    assert edge.loc["float16", "verdict"] == "fail"
    assert edge.loc["float32", "nan"] == 0 and edge.loc["float32", "underflow"] == 0


def test_masking_idioms_show_their_documented_weaknesses(quick):
    def fully(name, dtype):
        return rows(quick, name, dtype, "fully_masked").iloc[0]

    assert fully("masked_softmax.fill_neginf", "float32").fully_masked == "nan"
    assert fully("masked_softmax.fill_neg1e9", "float16").fully_masked == "nan"  # -1e9 is -inf in float16
    assert fully("masked_softmax.fill_neg1e9", "float32").fully_masked == "uniform"
    assert fully("masked_softmax.fill_finfo_min", "bfloat16").fully_masked == "uniform"
    assert fully("masked_softmax.where", "float16").fully_masked == "zeros"
    for name in ("masked_softmax.fill_neginf", "masked_softmax.fill_neg1e9", "masked_softmax.fill_finfo_min"):
        assert fully(name, "float32").verdict == "fail"
    below = rows(quick, "masked_softmax.fill_neg1e4", "float32", "below_fill").iloc[0]
    assert below.mask_leak > 0 and "mask leak" in below.note  # kept logits near -3e4 lose to a -1e4 fill


def test_attention_weaknesses(quick):
    large = rows(quick, "attention.naive", "float16", "attn_large_activations").iloc[0]
    assert large.nan + large.overflow > 0 and large.verdict == "fail"  # scores past 65504
    assert rows(quick, "attention.upcast", "float16", "attn_large_activations").iloc[0].verdict == "pass"
    masks = rows(quick, "attention.naive", "float32", "attn_masks").iloc[0]
    assert masks.fully_masked == "nan" and masks.verdict == "fail"


def test_log_softmax_of_a_dominant_entry_loses_its_digits_in_the_shifted_form(quick):
    shifted = rows(quick, "log_softmax.shifted", "float32", "dominant").iloc[0]
    accurate = rows(quick, "log_softmax.log1p_form_f32acc", "float32", "dominant").iloc[0]
    # A precision trade-off, not a defect: the plain same-dtype log-softmax loses the same digits, so it warns, says
    # why (results below u absorbed by a log of a sum near 1) and names the log1p fix.
    assert shifted.max_ulp > 1e3 and shifted.verdict == "warn" and shifted.cause == "absorbed"
    assert "log1p" in shifted.fix and shifted.max_cond_err <= 2 * shifted.plain_cond_err
    assert accurate.max_ulp < 10 and accurate.verdict == "pass"  # computed in float32 itself: a few ulps


def _mnist16():
    with resources.files("softaudit.cases").joinpath("data/mnist_presoftmax_logits.npy").open("rb") as f:
        return R.round_to(np.load(f).astype(np.float64), "float16")


def test_blanchard_higham_higham_overflow_counts_on_mnist_logits_in_float16():
    """Published: the basic log-sum-exp overflows on 475 of the 2500 vectors in fp16, the shifted one on none."""
    x = _mnist16()
    assert x.shape == (2500, 10)
    assert int(np.isinf(candidates.logsumexp.naive(x)).sum()) == 475
    assert int(np.isinf(candidates.logsumexp.shifted(x)).sum()) == 0
    table = softaudit.audit("softaudit.candidates.logsumexp:naive", dtypes=["float16"], suite="default").table
    assert table[table.family == "mnist_logits"].iloc[0].overflow == 475


def test_shifted_softmax_error_stays_under_the_theorem_bound_on_mnist():
    """max|err| / (u max|softmax|) <= n + 2 + 2 (max x - min x), every operation in fp16 (Blanchard et al. 2021)."""
    x = _mnist16()
    u = 2.0**-11
    got = candidates.softmax.max_shifted(x).astype(np.float64)
    exact = R.evaluate("softmax", x, dtype="float64")
    exact = exact.hi + exact.lo
    ratio = np.abs(got - exact).max(axis=1) / (u * np.abs(exact).max(axis=1))
    xs = x.astype(np.float64)
    bound = x.shape[1] + 2 + 2 * (xs.max(axis=1) - xs.min(axis=1))
    assert (ratio <= bound).all()
    assert ratio.max() > 0.5  # the measurement is not vacuous


def test_the_where_idiom_zeroes_fully_masked_rows_only_and_lets_a_kept_nan_through():
    # (it once zeroed every row whose sum was not > 0: a kept NaN came out 0; the hunt found it)
    x = np.array([[np.nan, 1.0], [-np.inf, -np.inf], [1.0, 2.0]], np.float16)
    mask = np.array([[True, True], [True, True], [False, False]])
    g = np.ones(x.shape, np.float16)
    for name in ("where", "where_in_dtype", "where_running"):
        y = getattr(candidates.masked_softmax, name)(x, mask).astype(np.float64)
        assert np.isnan(y[:2]).all() and (y[2] == 0).all(), name
    for name in ("where", "where_in_dtype"):
        dx = getattr(candidates.masked_softmax_grad, name)(x, mask, g).astype(np.float64)
        assert np.isnan(dx[:2]).all() and (dx[2] == 0).all(), name
