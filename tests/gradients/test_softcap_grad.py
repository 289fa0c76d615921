"""attention_grad under a tanh softcap (issue 25): f = C tanh(c q.k / C) + bias, dS = sech(c q.k / C)**2 P (dP - D).

Expected values come from an mpmath evaluation of the textbook formulas at 300 bits written here, apart from the
reference (softaudit/reference/_grad_softcap.py evaluates with proven bounds and rounds; this one does neither), and
exact zeros from algebra worked out by hand in each test's docstring."""

import ml_dtypes
import mpmath
import numpy as np
import pytest

from softaudit import reference


def _mp_vjp(q, k, v, g, cap, keep=None, bias=None, scale=None):
    """(dq, dk, dv) at 300 bits as lists of mpf, one batch entry; keep (Lq, Lk) or None, bias (Lq, Lk) or None."""
    with mpmath.workprec(300):
        lq, d = q.shape
        lk, dv = v.shape
        c = 1 / mpmath.sqrt(d) if scale is None else mpmath.mpf(scale)
        Q, K, V, G = ([[mpmath.mpf(float(x)) for x in row] for row in a] for a in (q, k, v, g))
        dq = [[mpmath.mpf(0)] * d for _ in range(lq)]
        dk = [[mpmath.mpf(0)] * d for _ in range(lk)]
        dvv = [[mpmath.mpf(0)] * dv for _ in range(lk)]
        for i in range(lq):
            cols = [j for j in range(lk) if keep is None or keep[i, j]]
            if not cols:
                continue
            s = {j: c * mpmath.fsum(a * b for a, b in zip(Q[i], K[j])) for j in cols}
            f = {
                j: cap * mpmath.tanh(s[j] / cap) + (0 if bias is None else mpmath.mpf(float(bias[i, j]))) for j in cols
            }
            top = max(f.values())
            e = {j: mpmath.exp(f[j] - top) for j in cols}
            total = mpmath.fsum(e.values())
            p = {j: e[j] / total for j in cols}
            dp = {j: mpmath.fsum(a * b for a, b in zip(G[i], V[j])) for j in cols}
            big_d = mpmath.fsum(p[j] * dp[j] for j in cols)
            for j in cols:
                ds = p[j] * (dp[j] - big_d) / mpmath.cosh(s[j] / cap) ** 2
                for a in range(d):
                    dq[i][a] += c * ds * K[j][a]
                    dk[j][a] += c * ds * Q[i][a]
                for a in range(dv):
                    dvv[j][a] += p[j] * G[i][a]
        return dq, dk, dvv


def _rounded(values, dtype):
    """mpf values rounded to dtype: to float64 (correctly, by mpmath), then to a narrower dtype (a second rounding
    that differs only where the float64 value is a midpoint of the narrower one, which these random cases avoid)."""
    return np.array([[float(x) for x in row] for row in values]).astype(dtype)


def _case(seed, lq=4, lk=7, d=4, spread=3.0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((lq, d)) * spread,
        rng.standard_normal((lk, d)),
        rng.standard_normal((lk, d)),
        rng.standard_normal((lq, d)),
        rng,
    )


def _in(dtype, *arrays):
    return [np.asarray(a).astype(dtype).astype(np.float64) for a in arrays]


def _same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and np.array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("setting", ["plain", "masked", "bias", "past the cap"])
def test_the_capped_backward_is_correctly_rounded(dtype, setting):
    """Every element of dq, dk, dv is the 300-bit value rounded to the dtype: tier A decides the 16- and 32-bit
    formats' (sigma from exp, with its bound), tier C the float64's (direct evaluation at rising precision)."""
    q, k, v, g, rng = _case({"plain": 0, "masked": 1, "bias": 2, "past the cap": 3}[setting])
    cap = {"plain": 2.0, "masked": 3.0, "bias": 1.5, "past the cap": 0.5}[setting]
    keep = rng.random((4, 7)) < 0.6 if setting == "masked" else None
    if keep is not None:
        keep[0] = False  # a query with nothing to attend: dq 0
    bias = rng.standard_normal((4, 7)) * 2 if setting == "bias" else None
    q, k, v, g = _in(dtype, q, k, v, g)
    got = reference.attention_grad(q, k, v, g, keep, softcap=cap, bias=bias, dtype=dtype)
    want = _mp_vjp(q, k, v, g, cap, keep, bias)
    for r, w in zip(got, want):
        assert _same_bits(r, _rounded(w, dtype)), (r, _rounded(w, dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_tier_a_decides_as_the_direct_evaluation_does(dtype):
    """method="mpmath" skips the fast tiers: every element from tier C. On a larger case (2 heads, 8 queries, 40
    keys, d 16, scores to about 3 caps, a mask) the default's tier A must give the same bits wherever it decided."""
    rng = np.random.default_rng(5)
    q, k, v, g = _in(dtype, *(rng.standard_normal(s) for s in ((2, 8, 16), (2, 40, 16), (2, 40, 16), (2, 8, 16))))
    q = q * 3
    keep = rng.random((8, 40)) < 0.7
    auto = reference.evaluate_attention_grad(q, k, v, g, keep, softcap=4.0, dtype=dtype)
    exact = reference.evaluate_attention_grad(q, k, v, g, keep, softcap=4.0, dtype=dtype, method="mpmath")
    for a, e in zip(auto, exact):
        assert (a.tier == 1).mean() > 0.9  # tier A decides nearly all
        assert _same_bits(a.value, e.value)


def test_exact_zeros_are_found():
    """Zeros by algebra, each an exact +0 in float64 (the 300-bit textbook sum leaves rounding noise there):
    - a key column of 0: dq_ia = c sum_j dS_ij k_ja = 0;
    - every value equal (dP_ij = g_i.v the same over j, so dP - D = 0): dS = 0, so dq = dk = 0;
    - every key equal, with a bias (one t, so one sigma; the groups differ by their bias only): dq_ia S**2 is
      sum over pairs of sigma e_G e_H k_a (P_G n_H - n_G P_H), and the pair (H, G) cancels (G, H);
    - two queries with the same q and opposite g: their P rows are equal and dv = sum_i P_ij g_ia = 0."""
    q, k, v, g, rng = _case(4)
    k0 = k.copy()
    k0[:, 2] = 0
    dq, _, _ = reference.attention_grad(q, k0, v, g, softcap=2.0, dtype=np.float64)
    assert _same_bits(dq[:, 2], np.zeros(4)) and (dq[:, [0, 1, 3]] != 0).all()

    same_v = np.repeat(v[:1], 7, axis=0)
    dq, dk, _ = reference.attention_grad(q, k, same_v, g, softcap=2.0, dtype=np.float64)
    assert _same_bits(dq, np.zeros_like(dq)) and _same_bits(dk, np.zeros_like(dk))

    same_k = np.repeat(k[:1], 7, axis=0)
    bias = rng.standard_normal((4, 7))
    dq, dk, _ = reference.attention_grad(q, same_k, v, g, softcap=2.0, bias=bias, dtype=np.float64)
    assert _same_bits(dq, np.zeros_like(dq)) and (dk != 0).all()

    q2, g2 = q[:2].copy(), g[:2].copy()
    q2[1], g2[1] = q2[0], -g2[0]
    _, _, dv = reference.attention_grad(q2, k, v, g2, softcap=2.0, dtype=np.float64)
    assert _same_bits(dv, np.zeros_like(dv))


def test_a_score_of_zero_is_the_uncapped_problem():
    """Where every score is 0 (q = 0) the cap changes nothing (C tanh(0) = 0, sigma = 1): the uncapped reference's
    bits, rational outputs included (d = 4: c = 1/2, and P = 1/7 on every key, so dv = sum_i g_i / 7)."""
    _, k, v, g, _ = _case(6)
    q = np.zeros((4, 4))
    capped = reference.attention_grad(q, k, v, g, softcap=3.0, dtype=np.float64)
    plain = reference.attention_grad(q, k, v, g, dtype=np.float64)
    for a, b in zip(capped, plain):
        assert _same_bits(a, b)


def test_scores_far_past_the_cap_give_gradients_below_every_format():
    """s / C about 400: sigma = sech(400)**2 is about 4 e**-800, below float64's subnormals, so dq and dk round to
    signed zeros (dq_ia = c sigma ... of the sign the 300-bit value has) in float32; dv does not depend on sigma."""
    q, k, v, g, _ = _case(7, spread=1.0)
    q = q * 800 / np.abs(q @ k.T).min()  # every |c q.k| at least 400 (c = 1/2): s / C >= 400 with C = 1
    q32, k32, v32, g32 = _in(np.float32, q, k, v, g)
    got = reference.attention_grad(q32, k32, v32, g32, softcap=1.0, dtype=np.float32)
    want = _mp_vjp(q32, k32, v32, g32, 1.0)
    for r, w in zip(got, want):
        assert _same_bits(r, _rounded(w, np.float32))
    assert (got[0] == 0).all() and (np.signbit(got[0]) == np.array([[x < 0 for x in row] for row in want[0]])).all()


def _mp_dsink(q, k, v, g, cap, z, keep=None):
    """dz = -sum_i P_iz D_i at 300 bits: the sink one more weight e**z (its logit not capped), of value 0."""
    with mpmath.workprec(300):
        lq, d = q.shape
        c = 1 / mpmath.sqrt(d)
        total = mpmath.mpf(0)
        for i in range(lq):
            cols = [j for j in range(k.shape[0]) if keep is None or keep[i, j]]
            s = {j: c * mpmath.fsum(mpmath.mpf(float(a)) * float(b) for a, b in zip(q[i], k[j])) for j in cols}
            e = {j: mpmath.exp(cap * mpmath.tanh(s[j] / cap)) for j in cols}
            sink = mpmath.exp(mpmath.mpf(float(z)))
            denominator = mpmath.fsum(e.values()) + sink
            dp = {j: mpmath.fsum(mpmath.mpf(float(a)) * float(b) for a, b in zip(g[i], v[j])) for j in cols}
            big_d = mpmath.fsum(e[j] / denominator * dp[j] for j in cols)
            total -= sink / denominator * big_d
        return total


@pytest.mark.parametrize("dtype", [np.float64, np.float32, ml_dtypes.bfloat16])
def test_the_sinks_gradient_under_a_cap_is_correctly_rounded(dtype):
    """dz = -sum_i P_iz D_i with P from the capped scores (the sink's own logit uncapped), one sink per head; and an
    exact 0 where every D_i is (equal values and g orthogonal to them: dP = 0 on every key)."""
    rng = np.random.default_rng(8)
    q, k, v, g = _in(dtype, *(rng.standard_normal(s) for s in ((2, 4, 4), (2, 6, 4), (2, 6, 4), (2, 4, 4))))
    q = q * 3
    z = _in(dtype, np.array([0.5, -1.0]))[0]
    keep = rng.random((4, 6)) < 0.7
    got = reference.sinks_grad(q, k, v, g, z, keep, softcap=2.0, dtype=dtype)
    want = np.array([float(_mp_dsink(q[h], k[h], v[h], g[h], 2.0, z[h], keep)) for h in range(2)]).astype(dtype)
    assert _same_bits(got, want)
    v0 = np.zeros_like(v)
    v0[..., 0] = 1.0
    g0 = g.copy()
    g0[..., 0] = 0.0
    assert _same_bits(reference.sinks_grad(q, k, v0, g0, z, keep, softcap=2.0, dtype=np.float64), np.zeros(2))
