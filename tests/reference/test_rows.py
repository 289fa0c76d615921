"""The row tiers' bounds (hi + lo within err of the exact value), and the float64 softmax that tier B's first pass
serves, checked against the independent oracle."""

import mpmath
import numpy as np
import pytest

from softaudit import reference as R
from softaudit.reference import _dd, _rows

from .oracle import rounded_rows, row_kind
from .test_properties import bits

FORMULAS = {f.name: f for f in _rows.FORMULAS}


def _hard_rows():
    """Rows a float64 target meets: Gaussian at the issue's scales, ties, a dominant entry, entries near
    overflow or whose difference overflows, exps far into the subnormal range and below it, removed entries."""
    rng = np.random.default_rng(26)
    rows = [
        rng.standard_normal(300) * 10,
        rng.standard_normal(300) * 3,
        rng.standard_normal(300) * 1e-8,
        np.r_[np.zeros(5), -np.ones(5)],
        np.array([0.0, -1e-300, -40.0, -80.0, -1000.0]),
        np.array([709.0, 708.9, -709.0, 1.7e308, -1.7e308]),
        np.array([0.0, -700.0, -708.4, -740.0, -744.5, -745.2, -746.0, -1000.0, -1e4]),
        rng.uniform(-800, 0, 300),
        np.array([0.5, 0.5 + 2.0**-52, 0.5 - 2.0**-53, 3.0]),
        np.array([-3.0]),
    ]
    n = max(len(r) for r in rows)
    x = np.full((len(rows), n), -np.inf)
    for i, r in enumerate(rows):
        x[i, : len(r)] = r
    removed = x == -np.inf
    removed[0, ::7] = True  # masked entries too, whatever they hold
    return x, removed


@pytest.mark.parametrize("tier", [_rows.tier_b_fast, _rows.tier_b])
@pytest.mark.parametrize("kind", ["softmax", "log_softmax", "logsumexp"])
def test_tier_b_bounds_hold_on_hard_rows(tier, kind):
    x, removed = _hard_rows()
    with np.errstate(all="ignore"):
        approx = tier(FORMULAS[kind], x, removed)
    for i in range(len(x)):
        exact = row_kind(kind, x[i], ~removed[i], 400)
        if kind == "logsumexp":
            exact, cols = [exact], [None]
            his, los, errs = [approx.hi[i]], [approx.lo[i]], [approx.err[i]]
        else:
            with np.errstate(over="ignore"):  # where x - m overflows, log-softmax's hi is NaN: never decided
                cols = np.flatnonzero(~removed[i] & ((kind == "softmax") | np.isfinite(x[i] - x[i][~removed[i]].max())))
            exact = [exact[j] for j in cols]
            his, los, errs = approx.hi[i, cols], approx.lo[i, cols], approx.err[i, cols]
        with mpmath.workprec(400):
            for want, h, lo, err in zip(exact, his, los, errs):
                assert abs(mpmath.mpf(float(h)) + float(lo) - want) <= float(err), (i, kind)


def test_float64_softmax_of_wide_gaussian_logits_needs_no_mpmath():
    """The issue's case, N(0, 10**2) logits in float64: tier B decides every element, correctly rounded."""
    x = np.random.default_rng(10).standard_normal((2, 4096)) * 10
    result = R.evaluate("softmax", x, dtype="float64")
    assert (result.tier == 2).all()
    np.testing.assert_array_equal(bits(result.value), bits(rounded_rows("softmax", x, "float64")))


@pytest.mark.parametrize("kind", ["softmax", "log_softmax", "logsumexp"])
def test_what_the_first_pass_leaves_goes_to_exp_dd_and_mpmath_with_the_same_bits(kind, monkeypatch):
    """With the first pass's bound made 2**-40, most elements fall through to exp_dd, and some to
    mpmath (rows next to float64 rounding boundaries): the bits stay the oracle's."""
    rng = np.random.default_rng(5)
    with mpmath.workprec(200):
        mids = [mpmath.mpf(0.5) + mpmath.ldexp(2 * int(m) + 1, -54) for m in rng.integers(0, 2**52, 30)]
        ts = [float(mpmath.log(1 / b - 1)) for b in mids]
    x = np.concatenate([np.stack([np.zeros(len(ts)), np.array(ts)], axis=1), rng.standard_normal((10, 2)) * 10])
    monkeypatch.setattr(_dd, "EXP_FAST_REL", 2.0**-40)
    rows_left = []
    tier_b = _rows.tier_b
    monkeypatch.setattr(
        _rows, "tier_b", lambda formula, x, removed: rows_left.append(len(x)) or tier_b(formula, x, removed)
    )
    result = R.evaluate(kind, x, dtype="float64")
    assert sum(rows_left) > len(x) / 2 and (result.tier == 2).mean() > 0.5
    np.testing.assert_array_equal(bits(result.value), bits(rounded_rows(kind, x, "float64")))
