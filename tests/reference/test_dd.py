"""Double-double arithmetic and the assumptions behind the fast tiers, checked against mpmath."""

from fractions import Fraction

import mpmath
import numpy as np
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
