"""Properties of the reference, driven by Hypothesis, checked against the independent oracle."""

import math

import mpmath
import numpy as np
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from softaudit import reference as R

from .oracle import attention_row, rounded, rounded_rows

DTYPES = ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"]
KINDS = ["softmax", "log_softmax", "logsumexp"]


def dtype_of(name):
    return R.format_of(name).dtype


def bits(a: np.ndarray) -> np.ndarray:
    """The bit patterns of a float array, with every NaN the same, for bit-for-bit comparison."""
    a = np.asarray(a, dtype=np.float64)
    return np.where(np.isnan(a), np.nan, a).view(np.int64)


@st.composite
def rows(draw, max_len=4096):
    """Gaussian rows at a scale from 1e-30 to 1e30, some with an offset, some long, cast to the dtype."""
    dtype = draw(st.sampled_from(DTYPES))
    n = draw(st.one_of(st.integers(1, 16), st.integers(17, 256), st.integers(257, max_len)))
    count = draw(st.integers(1, 3)) if n <= 256 else 1
    scale = 10.0 ** draw(st.floats(-30, 30))
    offset = draw(st.sampled_from([0.0, 1.0, -1.0])) * scale * draw(st.floats(0, 100))
    seed = draw(st.integers(0, 2**32 - 1))
    x = np.random.default_rng(seed).standard_normal((count, n)) * scale + offset
    with np.errstate(over="ignore"):
        return dtype, x.astype(dtype_of(dtype))


LONG_ROWS = {
    dtype: np.random.default_rng(4096).standard_normal((1, 4096)).astype(dtype_of(dtype)) * 8
    for dtype in ("float64", "float16")
}


@settings(max_examples=60)
@given(case=rows(), kind=st.sampled_from(KINDS))
@example(case=("float64", LONG_ROWS["float64"]), kind="softmax")
@example(case=("float16", LONG_ROWS["float16"]), kind="log_softmax")
def test_matches_plain_mpmath_at_twice_the_precision(case, kind):
    """Twice the dtype's precision, or ten times where twice cannot decide (see oracle.rounded)."""
    dtype, x = case
    got = getattr(R, kind)(x, dtype=dtype).astype(np.float64)
    want = rounded_rows(kind, x, dtype)
    np.testing.assert_array_equal(bits(got), bits(want))


@st.composite
def exact_shift(draw):
    """A row of small integers times 2**e and a shift c such that x + c is exact in the dtype."""
    dtype = draw(st.sampled_from(DTYPES))
    p = R.format_of(dtype).precision
    e = draw(st.integers(-4, 4))
    n = draw(st.integers(1, 50))
    ints = draw(st.lists(st.integers(-(2 ** (p - 2)), 2 ** (p - 2)), min_size=n, max_size=n))
    shift = draw(st.integers(-(2 ** (p - 2)), 2 ** (p - 2)))
    x = np.ldexp(np.array(ints, dtype=np.float64), e)
    c = math.ldexp(shift, e)
    return dtype, x.astype(dtype_of(dtype)), (x + c).astype(dtype_of(dtype))


@given(case=exact_shift(), kind=st.sampled_from(["softmax", "log_softmax"]))
def test_exactly_shift_invariant(case, kind):
    dtype, x, shifted = case
    f = getattr(R, kind)
    np.testing.assert_array_equal(bits(f(x, dtype=dtype)), bits(f(shifted, dtype=dtype)))


@given(case=rows(max_len=300), kind=st.sampled_from(KINDS), seed=st.integers(0, 2**32 - 1))
def test_permutation_equivariant(case, kind, seed):
    dtype, x = case
    perm = np.random.default_rng(seed).permutation(x.shape[1])
    f = getattr(R, kind)
    expected = f(x, dtype=dtype)
    got = f(x[:, perm], dtype=dtype)
    np.testing.assert_array_equal(bits(got), bits(expected if kind == "logsumexp" else expected[:, perm]))


@given(case=rows(max_len=300), seed=st.integers(0, 2**32 - 1), junk=st.sampled_from([np.nan, np.inf, -np.inf, 1e4]))
def test_masked_softmax_is_softmax_of_the_kept_entries(case, seed, junk):
    dtype, x = case
    rng = np.random.default_rng(seed)
    mask = rng.random(x.shape) < 0.7
    mask[:, 0] = True
    with np.errstate(over="ignore"):
        filled = np.where(mask, x, np.asarray(junk).astype(x.dtype))  # masked slots hold junk, which must not matter
    got = R.masked_softmax(filled, mask, dtype=dtype)
    undefined = R.undefined_rows(filled, mask)
    for row, keep, out, bad in zip(x, mask, got, undefined):
        np.testing.assert_array_equal(bits(out[keep]), bits(R.softmax(row[keep], dtype=dtype)))
        if bad:  # a kept +inf (the cast overflowed): the whole row is NaN
            assert np.isnan(out.astype(np.float64)).all()
            continue
        assert not np.any(out[~keep])  # exactly 0 (positive zero) on masked entries
        assert not np.signbit(out[~keep].astype(np.float64)).any()


@given(
    dtype=st.sampled_from(DTYPES),
    d=st.integers(1, 64),
    lq=st.integers(1, 4),
    dv=st.integers(1, 8),
    scale=st.floats(-3, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_attention_with_a_single_key_returns_its_value(dtype, d, lq, dv, scale, seed):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(s) * 10.0**scale for s in ((lq, d), (1, d), (1, dv)))
    q, k, v = (a.astype(dtype_of(dtype)) for a in (q, k, v))
    assume(all(np.isfinite(a.astype(np.float64)).all() for a in (q, k, v)))
    got = R.attention(q, k, v, dtype=dtype)
    np.testing.assert_array_equal(bits(got), bits(np.broadcast_to(v.astype(np.float64), (lq, dv))))


@settings(max_examples=40)
@given(
    dtype=st.sampled_from(["float16", "bfloat16", "float32", "float64"]),
    d=st.integers(1, 16),
    lq=st.integers(1, 3),
    lk=st.integers(1, 6),
    dv=st.integers(1, 3),
    scale=st.floats(-2, 1.5),
    masked=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_attention_matches_plain_mpmath(dtype, d, lq, lk, dv, scale, masked, seed):
    rng = np.random.default_rng(seed)
    q, k, v = ((rng.standard_normal(s) * 10.0**scale).astype(dtype_of(dtype)) for s in ((lq, d), (lk, d), (lk, dv)))
    mask = rng.random((lq, lk)) < 0.6 if masked else np.ones((lq, lk), bool)
    mask[:, 0] = True
    got = R.attention(q, k, v, mask, dtype=dtype).astype(np.float64)
    want = [rounded(lambda prec, i=i: attention_row(q[i], k, v, mask[i], None, prec), dtype) for i in range(lq)]
    np.testing.assert_array_equal(bits(got), bits(np.array(want)))


def _near_midpoints(target, count, seed):
    """Rows [0, t] whose softmax lands within about 2**-53 of a rounding boundary of `target`.

    p = 1 / (1 + e**t): pick a midpoint b between neighbours in `target` and t = log(1/b - 1) rounded to float64.
    """
    rng = np.random.default_rng(seed)
    p = R.format_of(target).precision
    with mpmath.workprec(200):
        mids = [mpmath.mpf(0.5) + mpmath.ldexp(2 * int(m) + 1, -p - 1) for m in rng.integers(0, 2 ** (p - 1), count)]
        ts = [float(mpmath.log(1 / b - 1)) for b in mids]
    return np.stack([np.zeros(count), np.array(ts)], axis=1)


def test_fast_tiers_and_pure_mpmath_agree_bit_for_bit_near_rounding_boundaries():
    for target in ["float16", "bfloat16", "float32", "float64"]:
        x = _near_midpoints(target, 60, seed=7)
        for kind in ("softmax", "log_softmax"):
            fast = R.evaluate(kind, x, dtype=target)
            slow = R.evaluate(kind, x, dtype=target, method="mpmath")
            np.testing.assert_array_equal(bits(fast.value), bits(slow.value))
        if target != "float64":  # float64 inputs this close to a 24-bit boundary are beyond tier A
            assert (R.evaluate("softmax", x, dtype=target).tier == 2).any()


@settings(max_examples=30)
@given(case=rows(max_len=600), kind=st.sampled_from(KINDS))
def test_fast_tiers_and_pure_mpmath_agree_bit_for_bit(case, kind):
    dtype, x = case
    fast = getattr(R, kind)(x, dtype=dtype)
    slow = getattr(R, kind)(x, dtype=dtype, method="mpmath")
    np.testing.assert_array_equal(bits(fast), bits(slow))


def test_dtype_none_gives_mpmath_values_correctly_rounded_to_prec():
    x = np.array([[0.5, -3.0, 7.25], [1e-300, 0.0, -1e300]])
    got = R.softmax(x, prec=80)
    assert got.dtype == object and isinstance(got[0, 0], mpmath.mpf)
    with mpmath.workprec(300):
        for row, out in zip(x, got):
            total = mpmath.fsum(mpmath.exp(mpmath.mpf(v)) for v in row)
            for v, o in zip(row, out):
                exact = mpmath.exp(mpmath.mpf(v)) / total
                with mpmath.workprec(80):
                    assert o == +exact  # unary plus rounds to the working precision, to nearest


@settings(max_examples=30)
@given(
    dtype=st.sampled_from(["float16", "bfloat16", "float32"]),
    scale=st.sampled_from([0.0, -0.0, -1.0, -0.125, -3.5]),
    lk=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
)
def test_attention_with_a_zero_or_negative_scale_matches_plain_mpmath(dtype, scale, lk, seed):
    """Scale 0 makes every weight equal (the exact output is the mean of the values, often a tie), a negative
    scale makes the lowest score the top one; both once made the exact tier search for ever."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(s).astype(dtype_of(dtype)) for s in ((2, 3), (lk, 3), (lk, 2)))
    got = R.attention(q, k, v, dtype=dtype, scale=scale).astype(np.float64)
    keep = [True] * lk
    want = [rounded(lambda prec, i=i: attention_row(q[i], k, v, keep, scale, prec), dtype) for i in range(2)]
    np.testing.assert_array_equal(bits(got), bits(np.array(want)))
