"""Undefined rows, removed entries, empty rows, ties, and the exact (rational) results."""

import math

import ml_dtypes
import numpy as np
import pytest

from softaudit import reference as R

INF, NAN = np.inf, np.nan


def test_rows_without_a_defined_softmax_give_nan_and_are_reported():
    x = np.array([[1.0, NAN, 2.0], [1.0, INF, 2.0], [-INF, -INF, -INF], [0.0, -INF, 1.0]])
    for kind in ("softmax", "log_softmax"):
        out = getattr(R, kind)(x, dtype="float32")
        assert np.isnan(out[:3]).all() and not np.isnan(out[3]).any()
    assert R.undefined_rows(x).tolist() == [True, True, True, False]
    assert R.undefined_rows(x, kind="logsumexp").tolist() == [True, False, False, False]


def test_removed_entries_are_exactly_zero_or_minus_inf():
    x = np.array([0.0, -INF, 1.0])
    p = R.softmax(x, dtype="float64")
    assert p[1] == 0.0 and not np.signbit(p[1])
    assert R.log_softmax(x, dtype="float64")[1] == -INF
    assert R.logsumexp(np.array([[-INF, -INF], [1.0, INF]]), dtype="float64").tolist() == [-INF, INF]


def test_empty_rows_give_empty_rows_and_logsumexp_minus_inf():
    x = np.zeros((3, 0))
    assert R.softmax(x, dtype="float32").shape == (3, 0)
    assert R.log_softmax(x, dtype="float32").shape == (3, 0)
    assert R.logsumexp(x, dtype="float32").tolist() == [-INF, -INF, -INF]
    assert not R.undefined_rows(x).any()


def test_masked_entries_are_ignored_whatever_they_hold():
    x = np.array([[1.0, NAN, 2.0, INF], [NAN, NAN, NAN, NAN]])
    mask = np.array([[True, False, True, False], [False, False, False, False]])
    out = R.masked_softmax(x, mask, dtype="float32")
    np.testing.assert_array_equal(
        out[0],
        [
            R.softmax(np.array([1.0, 2.0]), dtype="float32")[0],
            0,
            R.softmax(np.array([1.0, 2.0]), dtype="float32")[1],
            0,
        ],
    )
    assert np.isnan(out[1]).all()  # fully masked: undefined
    assert R.undefined_rows(x, mask).tolist() == [False, True]


def test_mask_broadcasts_and_axis_is_honoured():
    x = np.arange(12.0).reshape(3, 4)
    mask = np.array([True, False, True, True])
    np.testing.assert_array_equal(
        R.masked_softmax(x, mask, dtype="float64"), R.masked_softmax(x, np.broadcast_to(mask, x.shape), dtype="float64")
    )
    np.testing.assert_array_equal(R.softmax(x, axis=0, dtype="float64"), R.softmax(x.T, dtype="float64").T)
    assert R.logsumexp(x, axis=0, dtype="float64").shape == (4,)


def test_a_tie_at_half_the_smallest_subnormal_rounds_to_even_zero():
    """1024 equal logits in float8_e4m3fn: each softmax is 2**-10, exactly halfway between 0 and 2**-9."""
    x = np.zeros(1024, dtype=ml_dtypes.float8_e4m3fn)
    for method in ("auto", "mpmath"):
        out = R.softmax(x, dtype="float8_e4m3fn", method=method).astype(np.float64)
        assert (out == 0).all()
    assert (R.softmax(x[:512], dtype="float8_e4m3fn").astype(np.float64) == 2.0**-9).all()


def test_a_dominant_row_gives_a_negative_zero_log_softmax_where_the_exact_value_is_negative():
    """log_softmax of the top of [0, -1000] is -log1p(e**-1000): negative, and far below float32's subnormals."""
    out = R.log_softmax(np.array([0.0, -1000.0]), dtype="float32")
    assert out[0] == 0 and np.signbit(out[0])
    single = R.log_softmax(np.array([5.0, -INF]), dtype="float32")
    assert single[0] == 0 and not np.signbit(single[0])  # exactly 0: one kept entry


def test_an_exact_midpoint_plus_a_tiny_correction_rounds_by_the_correction():
    """bfloat16 log_softmax of [125952, -132096, 638976]: x - m = -513024 is a midpoint, log s ~ e**-513024."""
    x = np.array([[125952, -132096, 638976]], dtype=ml_dtypes.bfloat16)
    for method in ("auto", "mpmath"):
        out = R.log_softmax(x, dtype="bfloat16", method=method).astype(np.float64)
        assert out[0, 0] == -514048.0  # just beyond the midpoint in magnitude, so away from -512000
        assert out[0, 2] == 0 and np.signbit(out[0, 2])


def test_overflow_follows_ieee_rounding_of_the_exact_value():
    big = np.float32(np.finfo(np.float32).max)
    out = R.logsumexp(np.array([big, big], dtype=np.float32), dtype="float32")
    assert out == big  # max + log 2 is within half an ulp of max
    f16 = R.logsumexp(np.array([65504.0, 65504.0, 65504.0], dtype=np.float16), dtype="float16")
    assert f16 == 65504.0
    assert R.logsumexp(np.array([65504.0]), dtype="float8_e5m2") == np.inf  # above 57344 + half an ulp
    assert np.isnan(R.logsumexp(np.array([1000.0]), dtype="float8_e4m3fn").astype(np.float64))  # no inf: NaN


def test_attention_of_equal_scores_is_the_exactly_rounded_mean():
    q = np.zeros((1, 4), np.float32)
    k = np.ones((2, 4), np.float32)
    one_up = np.float32(1) + np.finfo(np.float32).eps
    v = np.array([[1.0], [one_up]], np.float32)  # mean 1 + 2**-24: a float32 midpoint, even is 1
    for method in ("auto", "mpmath"):
        assert R.attention(q, k, v, dtype="float32", method=method)[0, 0] == 1.0
    v3 = np.array([[1.0], [2.0], [4.0]], np.float32)
    out = R.attention(np.zeros((1, 4), np.float32), np.ones((3, 4), np.float32), v3, dtype="float64")
    assert out[0, 0] == 7 / 3  # correctly rounded 7/3


def test_attention_masks_batches_and_undefined_queries():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)
    k = rng.standard_normal((2, 1, 6, 8)).astype(np.float32)  # broadcast over heads
    v = rng.standard_normal((6, 4)).astype(np.float32)  # broadcast over batch and heads
    mask = np.tril(np.ones((5, 6), bool))
    mask[2] = False
    out = R.attention(q, k, v, mask, dtype="float32")
    assert out.shape == (2, 3, 5, 4)
    assert np.isnan(out[:, :, 2]).all() and not np.isnan(out[:, :, [0, 1, 3, 4]]).any()
    assert R.attention_undefined_rows(q, k, v, mask)[..., 2].all()
    # Masked keys' values and keys do not matter.
    k2, v2 = k.copy(), v.copy()
    k2[..., 5, :] = np.nan
    v2[5] = 1e30
    mask[4, 5] = False
    np.testing.assert_array_equal(
        R.attention(q, k2, v2, mask, dtype="float32")[:, :, 4], R.attention(q, k, v, mask, dtype="float32")[:, :, 4]
    )
    nan_q = q.copy()
    nan_q[0, 0, 0, 0] = np.nan
    assert R.attention_undefined_rows(nan_q, k, v)[0, 0, 0] and not R.attention_undefined_rows(nan_q, k, v)[0, 0, 1]


def test_attention_scale_is_exact_when_given_and_real_when_not():
    q = np.array([[1.0, 1.0, 1.0]])
    k = np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    v = np.array([[1.0], [0.0]])
    # With scale 1/sqrt(3) real, the first weight is e**sqrt(3) / (e**sqrt(3) + 1) (sqrt(3) = 3/sqrt(3)).
    import mpmath

    with mpmath.workprec(200):
        exact = mpmath.exp(mpmath.sqrt(3)) / (mpmath.exp(mpmath.sqrt(3)) + 1)
    assert R.attention(q, k, v, dtype="float64")[0, 0] == float(exact)
    rounded_scale = 1 / math.sqrt(3)  # a float64 scale is taken exactly as given
    with mpmath.workprec(200):
        w = mpmath.exp(3 * mpmath.mpf(rounded_scale))
        given = w / (w + 1)
    assert R.attention(q, k, v, scale=rounded_scale, dtype="float64")[0, 0] == float(given)


def test_longdouble_inputs_and_targets_go_through_mpmath():
    if np.finfo(np.longdouble).nmant <= 52:
        pytest.skip("longdouble is float64 here")
    x = np.array([1.0, np.longdouble(1) + np.longdouble(2) ** -60], dtype=np.longdouble)
    out = R.softmax(x, dtype="longdouble")
    assert out.dtype == np.longdouble and out[1] > out[0]
    assert R.softmax(x, dtype="float64")[0] == 0.5  # the 2**-60 difference is far below float64's ulp of 0.5
