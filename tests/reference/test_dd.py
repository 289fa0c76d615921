"""Double-double arithmetic and the assumptions behind the fast tiers, checked against mpmath."""

from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from softaudit.reference import _dd, _rows

finite = st.floats(min_value=-(2.0**500), max_value=2.0**500, allow_nan=False)


@given(finite, finite)
def test_two_sum_and_two_prod_are_exact(a, b):
    s, e = _dd.two_sum(np.float64(a), np.float64(b))
    assert Fraction(float(s)) + Fraction(float(e)) == Fraction(a) + Fraction(b)
    p, e = _dd.two_prod(np.float64(a), np.float64(b))
    if a == 0 or b == 0 or abs(Fraction(a) * Fraction(b)) > Fraction(2) ** -960:
        assert Fraction(float(p)) + Fraction(float(e)) == Fraction(a) * Fraction(b)


def _exp_arguments():
    rng = np.random.default_rng(1)
    t = np.concatenate(
        [
            -rng.random(3000) * 700,
            -rng.random(3000) * 2,
            rng.standard_normal(1000) * 1e-12,
            np.arange(-89, 90) / 256,  # table points
            (np.arange(-89, 89) + 0.5) / 256,  # between table points
            np.log(2) * np.arange(-1000, 1000, 7) + 0.34,  # near the reduction boundaries
        ]
    )
    tl = t * rng.uniform(-(2.0**-53), 2.0**-53, len(t))
    return t, tl


def test_exp_dd_error_is_within_its_bound():
    t, tl = _exp_arguments()
    eh, el = _dd.exp_dd(t, tl)
    worst = 0.0
    with mpmath.workprec(200):
        for a, b, h, lo in zip(t, tl, eh, el):
            exact = mpmath.exp(mpmath.mpf(float(a)) + mpmath.mpf(float(b)))
            # The documented bound: relative, plus 2 * 2**-1074 where the low part is subnormal.
            worst = max(worst, float(max(0, abs(mpmath.mpf(float(h)) + float(lo) - exact) - 2 * _dd.TINY) / exact))
    assert worst <= _dd.EXP_DD_REL
    assert worst > 0  # the comparison is not vacuous


def _exp_fast_arguments():
    """exp_fast's whole range: random, at and between table points, at the reduction boundaries (|r| largest:
    th K half an integer), around the 2**-1022 scaling edge (th near -708.4), into the subnormal results and
    below, and the clamp; tl as large as its bound allows."""
    rng = np.random.default_rng(11)
    step = np.log(2) / 4096
    t = np.concatenate(
        [
            -rng.random(3000) * 1000,
            -rng.random(2000) * 80,
            -rng.random(1000) * 1e-3,
            rng.random(500) * 709,
            -np.arange(3000) * step,  # table points
            -(np.arange(3000) + 0.5) * step,  # reduction boundaries
            -(rng.integers(0, 2**22, 2000) + 0.5) * step,
            -708.4 + rng.uniform(-0.05, 0.05, 300),
            -745 - rng.random(300) * 10,
            [-1000.0, -1000.5, -2000.0, -1e300, -np.inf, 0.0, -0.0, -(2.0**-1074), 709.0],
        ]
    )
    tl = np.where(np.isfinite(t), t * rng.uniform(-(2.0**-53), 2.0**-53, len(t)), 0.0)
    return t, tl


def test_exp_fast_error_is_within_its_bound():
    t, tl = _exp_fast_arguments()
    with np.errstate(all="ignore"):
        eh, el = _dd.exp_fast(t, tl)
    worst = 0.0
    with mpmath.workprec(250):
        for a, b, h, lo in zip(t, tl, eh, el):
            exact = mpmath.exp(mpmath.mpf(float(a)) + mpmath.mpf(float(b)))
            got = mpmath.mpf(float(h)) + float(lo)
            if exact < 2.0**-1074:
                assert got <= 2 * _dd.TINY
                continue
            if h >= 2.0**-969:  # a double-double: hi = fl(hi + lo), |lo| <= 2**-53 hi
                assert float(got) == h and abs(lo) <= 2.0**-53 * h
            worst = max(worst, float(max(0, abs(got - exact) - 2 * _dd.TINY) / exact))
    assert 2.0**-85 < worst <= _dd.EXP_FAST_REL


@pytest.mark.parametrize("n", [1, 2, 7, 100, 4096, 5000])
def test_extract_sum_is_within_its_bound(n):
    """Double-double terms in [0, 1] (ones, zeros, subnormal and random ones), against the exact rational sum."""
    rng = np.random.default_rng(n)
    h = rng.random((4, n)) ** 8
    h[0, ::3] = 1.0
    h[1] = 2.0 ** rng.integers(-1074, 0, n) * rng.random(n)
    h[2, : n // 2] = 0.0
    lo = h * rng.uniform(-(2.0**-53), 2.0**-53, h.shape)
    h, lo = _dd.fast_two_sum(h, lo)
    hi, low, err = _dd.extract_sum(h, lo)
    for row_h, row_l, s, sl, e in zip(h, lo, hi, low, err):
        exact = sum(Fraction(float(a)) + Fraction(float(b)) for a, b in zip(row_h, row_l))
        assert abs(Fraction(float(s)) + Fraction(float(sl)) - exact) <= Fraction(float(e))
        assert e <= 2.0**-90 * float(exact) + 2.0**-100  # tight enough: the softmax's sum is at least 1


def test_mul_short_is_within_its_bound():
    """The softmax's p = e / s: e in (0, 1] (some far below the normal range), 1/s as short_factor gives it."""
    rng = np.random.default_rng(12)
    n = 3000
    ah = np.concatenate([rng.random(n - 200), 2.0 ** rng.uniform(-1070, -960, 200)])
    ah, al = _dd.fast_two_sum(ah, ah * rng.uniform(-(2.0**-53), 2.0**-53, n))
    bh = 1 / (1 + rng.random(n) * 4096)
    bh, bl = _dd.fast_two_sum(bh, bh * rng.uniform(-(2.0**-53), 2.0**-53, n))
    hi, lo = _dd.mul_short(ah, al, *_dd.short_factor(bh, bl))
    worst = Fraction(0)
    for i in range(n):
        exact = (Fraction(float(ah[i])) + Fraction(float(al[i]))) * (Fraction(float(bh[i])) + Fraction(float(bl[i])))
        error = abs(Fraction(float(hi[i])) + Fraction(float(lo[i])) - exact)
        worst = max(worst, max(error - 3 * Fraction(_dd.TINY), Fraction(0)) / exact)
        assert hi[i] == float(Fraction(float(hi[i])) + Fraction(float(lo[i])))  # normalised
    assert 0 < worst <= Fraction(_dd.MUL_SHORT_REL)


def test_log1p_dd_error_is_within_its_bound():
    rng = np.random.default_rng(2)
    s = np.concatenate([rng.random(1000) * 4096, 2.0 ** rng.uniform(-60, 0, 2000), [2.0**-20, 2.0**-20 * (1 - 2**-52)]])
    sl = s * rng.uniform(-(2.0**-53), 2.0**-53, len(s))
    lh, ll = _dd.log1p_dd(s, sl)
    worst = 0.0
    with mpmath.workprec(200):
        for a, b, h, lo in zip(s, sl, lh, ll):
            exact = mpmath.log1p(mpmath.mpf(float(a)) + mpmath.mpf(float(b)))
            worst = max(worst, float(abs((mpmath.mpf(float(h)) + float(lo) - exact) / exact)))
    assert 0 < worst <= _dd.LOG1P_DD_REL


def test_numpy_exp_and_log1p_meet_the_bounds_tier_a_assumes():
    """Tier A trusts numpy's float64 exp and log1p to 2**-46 relative; check this machine's."""
    rng = np.random.default_rng(3)
    t = np.concatenate([-rng.random(4000) * 708, -rng.random(2000), rng.standard_normal(500) * 1e-9])
    s = np.concatenate([rng.random(2000) * 1e4, 2.0 ** rng.uniform(-80, 0, 2000)])
    with mpmath.workprec(120):
        exp_err = max(float(abs(mpmath.mpf(float(np.exp(a))) / mpmath.exp(float(a)) - 1)) for a in t)
        log_err = max(float(abs(mpmath.mpf(float(np.log1p(a))) / mpmath.log1p(float(a)) - 1)) for a in s)
    assert exp_err <= _rows.LIBM_EXP_REL
    assert log_err <= _rows.LIBM_LOG1P_REL


def test_pairwise_sum_error_is_within_gamma_of_its_depth():
    rng = np.random.default_rng(4)
    for n in (1, 2, 3, 7, 128, 1000, 4097):
        x = rng.random((3, n)) * 2.0 ** rng.integers(-20, 20, (3, n))
        got = _dd.pairwise_sum(x)[0]
        for row, s in zip(x, got):
            exact = sum(Fraction(float(v)) for v in row)
            assert abs(Fraction(float(s)) - exact) <= Fraction(_dd.gamma(_dd.depth(n))) * exact
        hi, lo = _dd.pairwise_sum(x, np.zeros_like(x))
        for row, h, low in zip(x, hi, lo):
            exact = sum(Fraction(float(v)) for v in row)
            assert (
                abs(Fraction(float(h)) + Fraction(float(low)) - exact)
                <= Fraction(_dd.depth(n, 2) * _dd.DD_OP_REL) * exact
            )


def _dd_operands(rng, n, same_sign):
    hi = rng.standard_normal(n) * 2.0 ** rng.integers(-40, 40, n)
    lo = hi * 2.0**-54 * rng.uniform(-1, 1, n)
    hi, lo = _dd.fast_two_sum(hi, lo)
    if same_sign:
        hi, lo = np.abs(hi), np.where(hi < 0, -lo, lo)
    return hi, lo


def test_double_double_operations_are_within_their_bound():
    """add, add_same_sign (operands of one sign), mul and div: relative error at most DD_OP_REL."""
    rng = np.random.default_rng(5)
    n = 3000
    cases = {
        "add": (_dd.add, lambda a, b: a + b, False),
        "add_same_sign": (_dd.add_same_sign, lambda a, b: a + b, True),
        "mul": (_dd.mul, lambda a, b: a * b, False),
        "div": (_dd.div, lambda a, b: a / b, False),
    }
    for name, (op, exact_op, same_sign) in cases.items():
        ah, al = _dd_operands(rng, n, same_sign)
        bh, bl = _dd_operands(rng, n, same_sign)
        if name == "add":  # include heavy cancellation
            bh[: n // 3], bl[: n // 3] = -ah[: n // 3] * (1 + 2.0**-30), -al[: n // 3]
        rh, rl = op(ah, al, bh, bl)
        worst = Fraction(0)
        for i in range(n):
            a = Fraction(float(ah[i])) + Fraction(float(al[i]))
            b = Fraction(float(bh[i])) + Fraction(float(bl[i]))
            exact = exact_op(a, b)
            if exact:
                worst = max(worst, abs(Fraction(float(rh[i])) + Fraction(float(rl[i])) - exact) / abs(exact))
        assert worst <= Fraction(_dd.DD_OP_REL), name
