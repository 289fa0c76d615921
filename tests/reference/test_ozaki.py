"""Ozaki products against exact rational matrix products: the bound holds, and it is 0 exactly when it should be."""

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from softaudit.reference import _ozaki


def exact_product(a, b):
    """a @ b.T in rationals (a float64 is a dyadic rational, so this is the exact value)."""
    fa = [[Fraction(float(x)) for x in row] for row in a]
    fb = [[Fraction(float(x)) for x in row] for row in b]
    return [[sum((x * y for x, y in zip(r, c)), Fraction(0)) for c in fb] for r in fa]


def ozaki(parts, b, slices):
    total = _ozaki.ExactSum((parts[0].shape[0], b.shape[0]))
    err = _ozaki.product(_ozaki.slice_rows(parts, slices), _ozaki.slice_rows([b], slices), total)
    hi, lo, own = total.result()
    return hi, lo, err + own


@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 5),
    n=st.integers(1, 40),
    p=st.integers(1, 5),
    spread=st.integers(0, 200),
    dtype=st.sampled_from([np.float16, np.float32, np.float64]),
    slices=st.integers(1, 5),
    seed=st.integers(0, 2**32 - 1),
    zeros=st.booleans(),
)
def test_the_bound_holds_for_every_spread_and_slice_count(m, n, p, spread, dtype, slices, seed, zeros):
    """Entries spread over 2**spread in magnitude (wider than any slice count holds), cancelling signs."""
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal(s) * 2.0 ** rng.integers(-spread, 1, s) for s in ((m, n), (p, n)))
    if zeros:
        a[rng.random(a.shape) < 0.3] = 0.0
    a, b = (x.astype(dtype).astype(np.float64) for x in (a, b))
    hi, lo, err = ozaki([a], b, slices)
    exact = exact_product(a, b)
    for i, j in np.ndindex(hi.shape):
        assert abs(Fraction(float(hi[i, j])) + Fraction(float(lo[i, j])) - exact[i][j]) <= Fraction(float(err[i, j]))


def test_narrow_float32_operands_give_exact_products_with_bound_zero():
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(np.float32).astype(np.float64) for s in ((7, 64), (9, 64)))
    hi, lo, err = ozaki([a], b, 3)
    assert (err == 0).all()
    exact = exact_product(a, b)
    assert all(Fraction(float(hi[i, j])) + Fraction(float(lo[i, j])) == exact[i][j] for i, j in np.ndindex(hi.shape))


def test_a_double_double_operand_and_subnormal_products():
    """hi + lo operands (as P and dS are), and products whose units fall below 2**-1074."""
    rng = np.random.default_rng(1)
    hi = rng.standard_normal((4, 30)) * 2.0**-520
    lo = hi * 2.0**-53 * rng.random((4, 30))
    b = rng.standard_normal((3, 30)) * 2.0**-540
    h, lo_out, err = ozaki([hi, lo], b, 3)
    exact = exact_product(hi, b)
    exact_lo = exact_product(lo, b)
    for i, j in np.ndindex(h.shape):
        total = exact[i][j] + exact_lo[i][j]
        assert abs(Fraction(float(h[i, j])) + Fraction(float(lo_out[i, j])) - total) <= Fraction(float(err[i, j]))
    assert (err > 0).all()  # the products underflow: the bound must say so


def test_the_exact_sum_keeps_every_rounding_error():
    rng = np.random.default_rng(2)
    terms = [rng.standard_normal(50) * 2.0 ** rng.integers(-80, 80, 50) for _ in range(9)]
    total = _ozaki.ExactSum(50)
    for t in terms:
        total.add(t)
    hi, lo, err = total.result()
    for i in range(50):
        exact = sum(Fraction(float(t[i])) for t in terms)
        assert abs(Fraction(float(hi[i])) + Fraction(float(lo[i])) - exact) <= Fraction(float(err[i]))
