"""Exact rounding into every format, checked against the oracle's independent rounding."""

import math
from fractions import Fraction

import ml_dtypes
import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mpmath import libmp

from softaudit.reference._formats import decide_arrays, format_of, round_fraction, round_mpf

from .oracle import round_to

FAST = ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"]


def same(a: float, b: float) -> bool:
    """Equal, or both NaN (the float8 types without inf overflow to NaN)."""
    return a == b or (math.isnan(a) and math.isnan(b))


def _rounded(value: float, dtype) -> float:
    magnitude, negative = round_mpf(libmp.from_float(value), False, format_of(dtype))
    return math.copysign(libmp.to_float(magnitude), -1.0 if negative else 1.0)


@pytest.mark.parametrize("dtype", FAST)
@given(value=st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_round_mpf_matches_independent_rounding(dtype, value):
    assert same(_rounded(value, dtype), round_to(mpmath.mpf(value), dtype))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float8_e4m3fn", "float8_e5m2"])
def test_ties_go_to_even_including_subnormals_and_the_overflow_threshold(dtype):
    fmt = format_of(dtype)
    fi = ml_dtypes.finfo(fmt.dtype)
    tiny = float(fi.smallest_subnormal)
    assert _rounded(tiny / 2, dtype) == 0.0  # the midpoint between 0 and the smallest subnormal: even is 0
    assert _rounded(1.5 * tiny, dtype) == 2 * tiny  # between 1 and 2 subnormal steps: even is 2
    one_up = 1 + 2.0 ** -(fmt.precision - 1)
    assert _rounded(1 + 2.0**-fmt.precision, dtype) == 1.0
    assert _rounded(one_up + 2.0**-fmt.precision, dtype) == 1 + 2.0 ** -(fmt.precision - 2)
    top = float(fi.max)
    ulp = 2.0 ** (math.floor(math.log2(top)) - fmt.precision + 1)
    assert _rounded(top + ulp / 4, dtype) == top
    expected = float(np.array([np.inf]).astype(fmt.dtype).astype(np.float64)[0])
    assert same(_rounded(top + ulp, dtype), expected)


def test_bfloat16_rounding_is_correct_where_the_ml_dtypes_cast_rounds_twice():
    value = 1 + 2.0**-8 + 2.0**-30  # just above the midpoint between 1 and 1 + 2**-7
    assert _rounded(value, "bfloat16") == 1 + 2.0**-7
    cast = float(np.array([value]).astype(ml_dtypes.bfloat16).astype(np.float64)[0])
    if tuple(int(p) for p in ml_dtypes.__version__.split(".")[:2]) < (0, 7):
        assert cast == 1.0  # through float32 the 2**-30 is lost, then the tie goes to even
    else:  # (ml_dtypes 0.7 casts float64 to bfloat16 in one rounding)
        assert cast == 1 + 2.0**-7


@pytest.mark.parametrize("dtype", FAST)
@given(num=st.integers(-(10**30), 10**30), den=st.integers(1, 10**30))
def test_round_fraction_matches_independent_rounding(dtype, num, den):
    magnitude, negative = round_fraction(Fraction(num, den), format_of(dtype))
    got = math.copysign(libmp.to_float(magnitude), -1.0 if negative else 1.0)
    with mpmath.workprec(400):
        want = round_to(mpmath.mpf(num) / den, dtype)
    assert same(got, want)


def _near_boundaries(fmt, seed, with_lo):
    """Values (some negative, some subnormal in the format) a fraction of an ulp from representable values."""
    rng = np.random.default_rng(seed)
    tiny = math.ldexp(1.0, fmt.emin)
    base = np.concatenate(
        [rng.standard_normal(1500), np.ldexp(1.0, rng.integers(-30, 30, 400)), rng.random(300) * tiny * 4]
    ) * rng.choice([-1.0, 1.0], 2200)
    offsets = rng.choice([-1.5, -1, -0.5, -0.25, 0.25, 0.5, 1, 1.5, 0], len(base))
    ulp = np.ldexp(np.abs(base), -fmt.precision)
    h = base + np.maximum(ulp, math.ldexp(1.0, fmt.min_subnormal_exp - 1)) * offsets
    lo = np.ldexp(h, -54) * rng.uniform(-1, 1, len(h)) if with_lo else None
    if lo is not None:
        h, lo = h + lo, (h - (h + lo)) + lo  # a normalised double-double
    err = np.abs(h) * 2.0 ** rng.uniform(-80, -18, len(h))
    return h, lo, err


@pytest.mark.parametrize("positive", [False, True])  # results known to be positive (softmax) take a shortcut
@pytest.mark.parametrize("with_lo", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"])
def test_decide_arrays_never_decides_wrongly(dtype, with_lo, positive):
    """Every decided result equals the oracle's rounding of both ends of the interval (and so of all of it)."""
    fmt = format_of(dtype)
    h, lo, err = _near_boundaries(fmt, 0, with_lo)
    if positive:
        h, lo = np.abs(h), None if lo is None else np.copysign(1.0, h) * lo
    rounded, decided = decide_arrays(h, lo, err, 1.0 if positive else 0, fmt)
    assert decided.mean() > 0.3 and not decided.all()
    low = np.zeros_like(h) if lo is None else lo
    as_stored = rounded.astype(fmt.dtype).astype(np.float64)  # overflow is +-inf until the cast to the dtype
    with mpmath.workprec(200):
        for value, l, e, r in zip(h[decided], low[decided], err[decided], as_stored[decided]):
            exact = mpmath.mpf(float(value)) + mpmath.mpf(float(l))
            for point in (exact - mpmath.mpf(float(e)), exact + mpmath.mpf(float(e))):
                assert same(round_to(point, dtype), float(r))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_decide_shortcuts_agree_with_the_general_route(dtype):
    from softaudit.reference import _formats

    fmt = format_of(dtype)
    h, lo, err = _near_boundaries(fmt, 1, with_lo=dtype == "float64")
    with np.errstate(all="ignore"):
        general, general_ok = _formats._decide_general(h, lo, err, fmt)
        if dtype == "float32":
            short, short_ok = _formats._decide_by_cast(h, err, 0)
        else:
            short, short_ok = h, _formats._decide_float64(h, np.abs(h), lo, err)
    both = general_ok & short_ok
    assert both.mean() > 0.3
    np.testing.assert_array_equal(general[both], short[both])


def test_unknown_dtype_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown dtype 'float13'.*bfloat16"):
        format_of("float13")
    with pytest.raises(ValueError, match="floating-point"):
        format_of(np.int32)


@pytest.mark.parametrize("dtype", FAST)
def test_round_to_matches_independent_rounding(dtype):
    from softaudit import reference

    rng = np.random.default_rng(9)
    values = np.concatenate(
        [rng.standard_normal(300) * 10.0 ** rng.integers(-8, 8, 300), [1 + 2.0**-8 + 2.0**-30, -0.0, np.inf, -np.inf]]
    )
    got = reference.round_to(values, dtype).astype(np.float64)
    held = np.array([np.inf, -np.inf]).astype(format_of(dtype).dtype).astype(np.float64)  # NaN without an inf
    for v, g in zip(values, got):
        expected = round_to(mpmath.mpf(float(v)), dtype) if np.isfinite(v) else held[int(v < 0)]
        assert same(float(g), expected)
