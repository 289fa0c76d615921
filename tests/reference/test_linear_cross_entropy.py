"""linear_cross_entropy's reference against an independent mpmath evaluation, bit for bit, on hard inputs.

The expected values here never use softaudit's arithmetic: the logits are exact Fractions of the inputs, the loss
and dloss/dlogits are mpmath at 400 bits from the textbook formulas, the products with W and x are exact Fraction
sums, and the rounding to the dtype picks the nearest of three neighbouring floats by exact comparison.
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import mpmath
import numpy as np
import pytest

from softaudit import reference

BF16 = ml_dtypes.bfloat16
DTYPES = (np.float32, BF16, np.float16, np.float64)


def _round(value, dtype):
    """The float of `dtype` nearest to `value` (an mpf or Fraction), ties to even, by exact comparison."""
    if isinstance(value, Fraction):
        exact = value
    else:
        sign, man, exp, _ = mpmath.mpf(value)._mpf_
        exact = (-1) ** sign * Fraction(int(man)) * Fraction(2) ** int(exp)
    guess = np.array(float(mpmath.mpf(exact.numerator) / exact.denominator), np.float64).astype(dtype)
    bits = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]
    raw = guess.view(bits)
    found = []
    for step in (-1, 0, 1):
        c = np.array(raw.astype(np.int64) + step).astype(bits).view(dtype)
        if np.isfinite(c.astype(np.float64)):
            found.append((abs(Fraction(float(c)) - exact), int(np.array(c).view(bits)) % 2, c))
    found.sort(key=lambda t: (t[0], t[1]))
    return found[0][2]


def _logits(x, w, b):
    n, v = len(x), len(w)
    return [
        [
            sum((Fraction(float(x[i, h])) * Fraction(float(w[j, h])) for h in range(x.shape[1])), Fraction(0))
            + (Fraction(float(b[j])) if b is not None else 0)
            for j in range(v)
        ]
        for i in range(n)
    ]


def _mp(f: Fraction):
    return mpmath.mpf(f.numerator) / f.denominator


def _expected(x, w, t, b=None, eps=0.0, zl=0.0, cap=None, ignore=-100, prec=400):
    """Per row (loss, dz at w = 1) in mpmath at `prec` bits; ignored rows None."""
    out = []
    with mpmath.workprec(prec):
        for i, row in enumerate(_logits(x, w, b)):
            if t[i] == ignore:
                out.append(None)
                continue
            z = [_mp(f) for f in row]
            raw = z
            if cap is not None:
                z = [cap * mpmath.tanh(v / cap) for v in z]
            lse = mpmath.log(mpmath.fsum(mpmath.exp(v) for v in z))
            v = len(z)
            loss = (1 - mpmath.mpf(eps)) * (lse - z[t[i]]) + eps * mpmath.fsum(lse - zj for zj in z) / v
            loss += zl * lse**2
            dz = []
            for j, zj in enumerate(z):
                p = mpmath.exp(zj - lse)
                q = (1 - mpmath.mpf(eps)) * (j == t[i]) + mpmath.mpf(eps) / v
                d = (1 + 2 * zl * lse) * p - q
                if cap is not None:
                    d *= mpmath.sech(raw[j] / cap) ** 2
                dz.append(d)
            out.append((loss, dz))
    return out


def _inputs(dtype, n, h, v, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    x = reference.round_to(rng.standard_normal((n, h)) * scale, dtype).astype(np.float64)
    w = reference.round_to(rng.standard_normal((v, h)) * 0.5, dtype).astype(np.float64)
    return x, w, rng.integers(0, v, n)


def _cancelling(dtype):
    """Logits that cancel in the product: W's rows hold +a and -a (1 + 2**-k) pairs, x is a ramp, so each logit is a
    small difference of large products."""
    rng = np.random.default_rng(3)
    h, v = 8, 11
    big = reference.round_to(rng.uniform(100, 1000, (v, h // 2)), dtype).astype(np.float64)
    nudged = reference.round_to(big * (1 + rng.choice([2.0**-7, 2.0**-9, 0.0], big.shape)), dtype).astype(np.float64)
    w = np.concatenate([big, -nudged], axis=1)
    x = reference.round_to(np.ones((3, h)) + rng.uniform(0, 0.01, (3, h)), dtype).astype(np.float64)
    x[:, h // 2 :] = x[:, : h // 2]
    return x, w, np.array([0, 5, 10])


def _near_overflow(dtype):
    """Logits past float16's largest finite value (x W^T is never rounded, so they are fine) and far apart: most
    p_j are below e**-10000, and a row's top two logits are close."""
    x = reference.round_to(np.array([[1.0, 1.0, 1.0, 1.0], [0.5, -0.5, 1.0, 0.25]]), dtype).astype(np.float64)
    w = np.array([[16384, 16384, 16384, 16384], [16384, 0, 16384, 8192], [1, 2, 3, 4.0], [16384, 16384, 16384, 16376]])
    return x, reference.round_to(w, dtype).astype(np.float64), np.array([1, 2])


CASES = {
    "gaussian": lambda dt: _inputs(dt, 3, 16, 37, 1),
    "confident": lambda dt: _inputs(dt, 3, 16, 37, 2, scale=6.0),
    "cancelling": _cancelling,
    "near_overflow": _near_overflow,
}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", list(CASES))
def test_loss_and_gradients_match_mpmath(case, dtype):
    x, w, t = CASES[case](dtype)
    g = np.array([1.5, -0.75, 2.0])[: len(x)]
    # (p_j down to e**-65526 beside terms of 16,384: dx needs all of those bits)
    prec = 2**17 if case == "near_overflow" else 400
    expected = _expected(x, w, t, prec=prec)
    loss = reference.linear_cross_entropy(x, w, t, dtype=dtype)
    want = [_round(e[0], dtype) for e in expected]
    np.testing.assert_array_equal(loss.view(np.uint8), np.array(want, dtype).view(np.uint8))
    _check_grads(x, w, t, g, expected, dtype, "none", prec=prec)


def _check_grads(x, w, t, g, expected, dtype, reduction, ignore=-100, prec=400):
    dx, dw, db = reference.linear_cross_entropy_grad(x, w, t, g, dtype=dtype, reduction=reduction, ignore_index=ignore)
    kept = [i for i, e in enumerate(expected) if e is not None]
    if reduction == "none":
        weights = {i: mpmath.mpf(float(g[i])) for i in kept}
    else:
        div = len(kept) if reduction == "mean" else 1
        weights = {i: mpmath.mpf(float(g)) / div for i in kept}
    with mpmath.workprec(prec):
        dz = {i: [weights[i] * d for d in expected[i][1]] for i in kept}
        n, h = x.shape
        v = w.shape[0]
        want_dx = [
            [
                _round(mpmath.fsum(dz[i][j] * w[j, k] for j in range(v)), dtype) if i in dz else dtype(0)
                for k in range(h)
            ]
            for i in range(n)
        ]
        want_dw = [[_round(mpmath.fsum(dz[i][j] * x[i, k] for i in kept), dtype) for k in range(h)] for j in range(v)]
        want_db = [_round(mpmath.fsum(dz[i][j] for i in kept), dtype) for j in range(v)]
    for got, want in ((dx, want_dx), (dw, want_dw), (db, want_db)):
        np.testing.assert_array_equal(got.astype(np.float64), np.array(want, dtype).astype(np.float64))


@pytest.mark.parametrize("dtype", (np.float32, BF16), ids=lambda d: np.dtype(d).name)
def test_options_ignored_rows_and_reductions(dtype):
    x, w, t = _inputs(dtype, 4, 8, 19, 5, scale=2.0)
    t = t.copy()
    t[1] = -100
    b = reference.round_to(np.linspace(-1, 1, 19), dtype).astype(np.float64)
    for opts in ({"label_smoothing": 0.1}, {"z_loss": 1e-3}, {"softcap": 3.0}):
        expected = _expected(
            x, w, t, b, eps=opts.get("label_smoothing", 0.0), zl=opts.get("z_loss", 0.0), cap=opts.get("softcap")
        )
        loss = reference.linear_cross_entropy(x, w, t, dtype=dtype, bias=b, **opts)
        want = [dtype(0) if e is None else _round(e[0], dtype) for e in expected]
        np.testing.assert_array_equal(loss.astype(np.float64), np.array(want, dtype).astype(np.float64))
        with mpmath.workprec(400):
            total = mpmath.fsum(e[0] for e in expected if e is not None)
        mean = reference.linear_cross_entropy(x, w, t, dtype=dtype, bias=b, reduction="mean", **opts)
        assert float(mean) == float(_round(total / 3, dtype))
        dx, _, db = reference.linear_cross_entropy_grad(
            x, w, t, np.array(0.5), dtype=dtype, bias=b, reduction="mean", **opts
        )
        assert not dx[1].any()  # the ignored row
        kept = [i for i in range(4) if i != 1]
        with mpmath.workprec(400):
            want_db = [
                _round(mpmath.fsum(expected[i][1][j] for i in kept) * mpmath.mpf(0.5) / 3, dtype) for j in range(19)
            ]
        np.testing.assert_array_equal(db.astype(np.float64), np.array(want_db, dtype).astype(np.float64))


def test_ties_give_exact_zeros():
    """Classes 0 and 1 tie (logit 0.5 each, so equal p) with opposite weights in the first two columns, and the
    target's weights are 0 there: dx's first two entries are exactly p0 - p1 = 0 (and 2 p0 - 2 p1)."""
    x = np.array([[0.0, 0.0, 1.0]])
    w = np.array([[1.0, 2.0, 0.5], [-1.0, -2.0, 0.5], [0.0, 0.0, -1.0]])
    t = np.array([2])
    loss = reference.linear_cross_entropy(x, w, t, dtype=np.float32)
    with mpmath.workprec(200):
        want = mpmath.log(2 * mpmath.exp(0.5) + mpmath.exp(-1)) + 1
    assert float(loss[0]) == float(_round(want, np.float32))
    dx, dw, _ = reference.linear_cross_entropy_grad(x, w, t, np.array([1.0]), dtype=np.float32)
    assert dx[0, 0] == 0 and dx[0, 1] == 0 and not np.signbit(dx[0, 0])
    assert (dw[:, :2] == 0).all()  # x's first two entries are 0


def test_inputs_it_refuses_in_one_line():
    with pytest.raises(ValueError, match="x \\(N, H\\) and weight \\(V, H\\)"):
        reference.linear_cross_entropy(np.ones((2, 3)), np.ones((4, 2)), np.array([0, 1]), dtype=np.float32)
    with pytest.raises(ValueError, match="bias of shape"):
        reference.linear_cross_entropy(
            np.ones((2, 3)), np.ones((4, 3)), np.array([0, 1]), dtype=np.float32, bias=np.ones(3)
        )


def test_nan_input_leaves_its_row_undefined():
    x = np.array([[1.0, np.nan], [0.5, 0.25]])
    w = np.array([[1.0, 2.0], [0.5, -1.0], [0.0, 1.0]])
    found = reference.evaluate_linear_cross_entropy(x, w, np.array([0, 2]), dtype=np.float32)
    assert list(found.undefined) == [True, False]
    assert np.isnan(found.value[0]) and np.isfinite(found.value[1])


def test_every_class_tied_is_rational_and_decided():
    """Every weight row equal: each row's logits tie, p = 1/V exactly, and dz, dx, dweight and dbias are rational
    (dweight can sit exactly on a float of the dtype or a midpoint, where refining would never end: the hunt found
    it); dx is exactly 0."""
    x = np.array([[0.5, -0.25, 1.0], [2.0, 0.75, -1.5]])
    w = np.tile(np.array([[1.5, -3.0, 0.5]]), (4, 1))
    t = np.array([0, 2])
    g = np.array([1.0, -0.5])
    for dtype in (BF16, np.float32):
        dx, dw, db = reference.linear_cross_entropy_grad(x, w, t, g, dtype=dtype)
        assert not dx.any()
        dz = [[Fraction(float(g[i])) * (Fraction(1, 4) - (j == t[i])) for j in range(4)] for i in range(2)]
        want_dw = [
            [_round(sum(dz[i][j] * Fraction(float(x[i, k])) for i in range(2)), dtype) for k in range(3)]
            for j in range(4)
        ]
        want_db = [_round(dz[0][j] + dz[1][j], dtype) for j in range(4)]
        np.testing.assert_array_equal(dw.astype(np.float64), np.array(want_dw, dtype).astype(np.float64))
        np.testing.assert_array_equal(db.astype(np.float64), np.array(want_db, dtype).astype(np.float64))
