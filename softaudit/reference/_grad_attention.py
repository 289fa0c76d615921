"""The vector-Jacobian product of attention, correctly rounded: (dq, dk, dv) from the upstream gradient g = dO.

With P = softmax(c q k^T, masked) per query: dV = P^T dO, dP = dO V^T, dS = P (dP - D) with D = rowsum(dP P),
dQ = c dS K, dK = c dS^T Q. A query that may attend no key has P = 0: its dq is 0 and it adds nothing to dk, dv;
a key no query may attend gets dk = dv = 0 exactly. Tier A (float64 with BLAS bounds, targets of at most 24 bits)
decides what its bound allows; tier C (_grad_exact forms per query) the rest. docs/reference.md, "Gradients".

(Longer than the house's 400 lines: the fast tiers of one VJP share its bound and its probabilities P; the exact tier's
forms already live in _grad_exact.py.)
"""

from __future__ import annotations

import math

import numpy as np

from . import _dd, _grad_exact, _grad_softcap, _ozaki
from ._attention import _SAFE, capped_scores_a, prepare, raw_scores_a, weights_dd
from ._dd import TINY, U
from ._engine import Result, _Collector, fast_input, fast_target, row_blocks, tier_a_target
from ._exact import _fraction
from ._formats import Format, decide_arrays, exact_mpf
from ._grad_exact import Form, Scale, group
from ._rational import Fraction
from ._rows import LIBM_EXP_REL, Approx
from ._validate import float_array


def _bound(a, a_err, b, n):
    """|fl(a @ b) - a_exact @ b| for a within a_err of a_exact: gamma_n |a| |b| (any BLAS) plus a_err |b|."""
    up = 1 + 2 * _dd.gamma(n)
    return (_dd.gamma(n) * (np.abs(a) @ np.abs(b)) + a_err @ np.abs(b)) * up


def tier_a(q, k, v, g, keep, scale, bias=None, softcap=None, derivative=True) -> tuple[Approx, Approx, Approx]:
    """float64, one batch entry: q (Lq, d), k (Lk, d), v (Lk, dv), g (Lq, dv), keep (Lq, Lk), bias (Lq, Lk) or
    None (finite where kept), softcap a positive float or None (derivative False: without the cap's derivative)."""
    lq, lk = q.shape[0], k.shape[0]
    c, c_rel, p, p_err, dss, ds_err = score_grad_a(q, k, v, g, keep, scale, bias, softcap, derivative)
    # dV = P^T dO
    dv_hi = p.T @ g
    dv_err = _bound(p.T, p_err.T, g, lq) + (keep.T @ (g != 0)) * 4 * TINY  # underflowing products and bounds
    out = []
    for a, a_err, b, n in ((dss, ds_err, k, lk), (dss.T, ds_err.T, q, lq)):
        hi = c * (a @ b)
        err = abs(c) * (_bound(a, a_err, b, n) + n * TINY * (np.abs(a) @ (b != 0))) + np.abs(hi) * (c_rel + U)
        out.append(Approx(hi, None, err * (1 + _SAFE) + 4 * TINY * ((hi != 0) | (err != 0)), 0.0))
    return out[0], out[1], Approx(dv_hi, None, dv_err * (1 + _SAFE), 0.0)


def score_grad_a(q, k, v, g, keep, scale, bias=None, softcap=None, derivative=True):
    """Tier A's (c, c_rel, P, P's bound, dS, dS's bound) in float64 for one batch entry (`tier_a`'s arguments):
    P within p_err (inf on rows whose exps are not certified), dS = P (dP - D) within ds_err, times the cap's
    derivative sigma under a softcap (`_sigma_a`)."""
    d, lq, lk, dv = q.shape[1], q.shape[0], k.shape[0], v.shape[1]
    c, c_rel = (scale, 0.0) if scale is not None else (1 / math.sqrt(d), 2 * U)
    raw, raw_err = raw_scores_a(q, k, scale)
    s, ds = capped_scores_a(raw, raw_err, bias, softcap)
    s = np.where(keep, s, -np.inf)
    any_key = keep.any(axis=1)
    m = np.where(any_key, s.max(axis=1, initial=-np.inf), 0.0)[:, None]
    t = s - m
    e = np.where(keep, np.exp(t), 0.0)
    first = np.where(keep, ds + U * np.abs(t), 0.0)
    eta = np.where(keep, first * (1 + _SAFE) + LIBM_EXP_REL, 0.0)
    total = np.where(any_key, _dd.pairwise_sum(e)[0], 1.0)
    sigma = (_dd.pairwise_sum(e * eta)[0] / total + _dd.gamma(_dd.depth(lk)) + lk * TINY) * (1 + _SAFE)
    p = e / total[:, None]
    p_err = np.where(keep, p * (eta + sigma[:, None] + 2 * U) * (1 + _SAFE) + TINY, 0.0)
    unsure = ~(first.max(axis=1, initial=0.0) <= 2.0**-20) | ~(sigma <= 2.0**-20)
    p_err[unsure] = np.inf
    # dP = dO V^T, centred on one of its kept values per row (the centre cancels exactly from dS)
    dp = g @ v.T
    dp_err = _dd.gamma(dv) * (np.abs(g) @ np.abs(v).T) * (1 + 2 * _dd.gamma(dv)) + dv * TINY * (dp != 0)
    guess = np.where(keep, p * dp, 0.0).sum(axis=1)
    pick = np.where(keep, np.abs(dp - guess[:, None]), np.inf).argmin(axis=1)
    rows = np.arange(lq)
    h = np.where(keep, dp - dp[rows, pick][:, None], 0.0)
    h_err = np.where(keep, dp_err + dp_err[rows, pick][:, None] + U * np.abs(h), 0.0)
    ah = np.abs(h)
    gamma = _dd.gamma(_dd.depth(lk) + 1)
    r = _dd.pairwise_sum(p * h)[0]
    weighted = _dd.pairwise_sum((p + p_err) * ah)[0]
    r_err = ((gamma + U) * weighted + _dd.pairwise_sum(p_err * ah + (p + p_err) * h_err)[0]) * (1 + 2 * gamma)
    r_err += (h != 0).sum(axis=1) * TINY
    dd_ = h - r[:, None]
    d_err = h_err + r_err[:, None] + U * np.abs(dd_)
    dss = p * dd_
    ds_err = (p + p_err) * d_err + p_err * np.abs(dd_) + U * np.abs(dss) + 4 * TINY * ((dd_ != 0) | (d_err != 0))
    if softcap is not None and derivative:
        sigma, sigma_err = _sigma_a(raw, raw_err, softcap)
        f_abs = np.abs(dss)
        dss = sigma * dss
        ds_err = sigma * ds_err + (f_abs + ds_err) * sigma_err + U * np.abs(dss) + TINY
    ds_err = np.where(keep, ds_err, 0.0)
    ds_err *= 1 + _SAFE
    return c, c_rel, p, p_err, dss, ds_err


def _sigma_a(s, ds, cap):
    """sech(s / cap)**2 in float64 for raw scores s within ds, and its absolute bound, from numpy's exp (not from
    1 - tanh**2, which cancels where tanh is near 1): y = e**(-2 |x|), sigma = 4 y / (1 + y)**2.

    x = s / cap is within dx = (ds + u |s|) / cap, which moves y by e**(2 dx) - 1 relative; exp adds LIBM_EXP_REL;
    sigma's relative change is (1 - y) / (1 + y) <= 1 times y's, and 1 + y, its square and the quotient round
    within 4u. A y below 2**-1022 is within 2**-1074 absolute: 8 * 2**-1074 of sigma covers it."""
    x = s / cap
    dx = (ds + U * np.abs(s)) / cap
    y = np.exp(-2 * np.abs(x))
    sigma = 4 * y / ((1 + y) * (1 + y))
    rel = (LIBM_EXP_REL + np.expm1(2 * dx) + 4 * U) * (1 + _SAFE)
    return sigma, sigma * rel + 8 * TINY


def tier_b(q, k, v, g, keep, scale, bias=None, *, slices: int, block: int = 1 << 20) -> tuple[Approx, Approx, Approx]:
    """Double-double, one batch entry (float64 arrays below 2**500), in blocks of query rows of about `block`
    scores. Every matrix product is an Ozaki product (_ozaki: exact BLAS products of slices, `slices` per part);
    the elementwise steps are double-double operations with tier A's bounds at DD_OP_REL. Products of exact
    inputs are exact, so equal dP values give h = 0 exactly and constant rows give dS = 0 with bound 0.

    Scores spread past float64's range (weights below 2**-865) keep exponents apart (`_wide_exponents`): each
    output row or column is computed at its own power of two, so gradients far below every format's subnormals
    still get their sign, and round to their signed zero."""
    lq, d = q.shape
    lk, dv = v.shape
    ch, cl, c_rel = _dd.scale_dd(scale, d)
    wide = _wide_exponents(q, k, keep, ch, bias)
    k_rows, v_rows = (_ozaki.slice_rows([a], slices) for a in (k, v))
    # dq = c dS K = c dS (K - k_r) for any fixed key row k_r, as every row of dS sums to 0 (masked entries are 0).
    # Centred on the key nearest the mean, K - k_r (exact, as a double-double) is small when the keys are alike
    # (similar representations), and 0 when they are equal, which makes dq an exact 0 rather than noise.
    centre = k[np.abs(k - k.mean(axis=0)).sum(axis=1).argmin()] if lk else np.zeros(d)
    k_off = _dd.two_sum(k, -centre)
    k_cols = _ozaki.slice_rows([a.T for a in k_off], slices)
    k_off_size = np.abs(k_off[0]) * (1 + 2 * _dd.U)
    dq_h, dq_l, dq_err = np.zeros((lq, d)), np.zeros((lq, d)), np.zeros((lq, d))
    dq_x = np.zeros(lq, dtype=np.int64)
    dk_sum, dv_sum = _ozaki.ExactSum((lk, d)), _ozaki.ExactSum((lk, dv))
    dk_err, dv_err = np.zeros((lk, d)), np.zeros((lk, dv))
    for rows in row_blocks(np.arange(lq), lk, block):
        b = None if bias is None else bias[rows]
        p, p_err, px = _probabilities(q[rows], k_rows, keep[rows], b, ch, cl, c_rel, slices, wide is not None)
        ds, ds_err, sx = _score_grad(p, p_err, px, g[rows], v_rows, keep[rows], slices)
        ds_q, ds_q_err, ds_k, ds_k_err, p_v, p_v_err = ds, ds_err, ds, ds_err, p, p_err
        if wide is not None:  # each at its output's power of two: dq's rows, dk's and dv's columns
            live = (ds[0] != 0) | (ds_err != 0)
            dq_x[rows] = np.where(live.any(axis=1), np.where(live, sx, _FAR).max(axis=1), 0)
            ds_q, ds_q_err = _shift(ds, ds_err, sx - dq_x[rows, None])
            ds_k, ds_k_err = _shift(ds, ds_err, sx - wide[0])
            p_v, p_v_err = _shift(p, p_err, px - wide[1])
        dq_sum = _ozaki.ExactSum((len(p[0]), d))
        err = _ozaki.product(_ozaki.slice_rows(list(ds_q), slices), k_cols, dq_sum)
        hi, lo, own = dq_sum.result()
        dq_h[rows], dq_l[rows], dq_err[rows] = hi, lo, err + own + _ozaki.spread(ds_q_err, k_off_size)
        q_cols, g_cols = _ozaki.slice_rows([q[rows].T], slices), _ozaki.slice_rows([g[rows].T], slices)
        dk_err += _ozaki.product(_ozaki.slice_rows([a.T for a in ds_k], slices), q_cols, dk_sum)
        dk_err += _ozaki.spread(ds_k_err.T, np.abs(q[rows]))
        dv_err += _ozaki.product(_ozaki.slice_rows([a.T for a in p_v], slices), g_cols, dv_sum)
        dv_err += _ozaki.spread(p_v_err.T, np.abs(g[rows]))
    grow = 1 + 2 * _dd.gamma(lq)  # the float64 sums of the blocks' bounds
    dk_h, dk_l, own = dk_sum.result()
    out = []
    for hi, lo, err in ((dq_h, dq_l, dq_err), (dk_h, dk_l, dk_err * grow + own)):
        hi, lo = _dd.mul(hi, lo, np.full_like(hi, ch), np.full_like(hi, cl))  # times c
        err = abs(ch) * err * (1 + 2.0**-50) + np.abs(hi) * (c_rel + 2 * _dd.DD_OP_REL)
        out.append((hi, lo, err * (1 + _SAFE) + 4 * TINY * ((hi != 0) | (err != 0))))
    hi, lo, own = dv_sum.result()
    out.append((hi, lo, dv_err * grow + own))
    if wide is None:
        return tuple(Approx(hi, lo, err, 0.0) for hi, lo, err in out)
    return tuple(_apart(*o, x[:, None]) for o, x in zip(out, (dq_x, wide[0][0], wide[1][0])))


#: An exponent below any in use (for maxima over entries that have none).
_FAR = -(1 << 40)


def _wide_exponents(q, k, keep, c, bias=None) -> tuple[np.ndarray, np.ndarray] | None:
    """None, or for scores spread past float64's range (a kept weight below about 2**-865, every score within
    WIDE_ARG_MIN / 2 of its row's top): the powers of two at which dk's and dv's columns are summed, each (1, Lk).

    Estimated from the float64 scores, the same for every block of rows: log2 of a weight is its score minus the
    row's top over ln2 (within 1 + log2 Lk: the softmax sum is between 1 and Lk). dS has the weight's exponent,
    except the top key's, which has the row's second largest: its dS is P_top times r, the rest's weighted dP."""
    # |c q.k| <= |c| |q| |k| (Cauchy-Schwarz): below the threshold for the largest norms, no score can be 600 below
    # its row's top, and the float64 product of every score (a cost on tier B's path) is not needed.
    sizes = [np.sqrt(np.einsum("ij,ij->i", a, a)).max(initial=0.0) for a in (q, k)]
    spread = 0.0 if bias is None else 2 * np.abs(np.where(keep, bias, 0.0)).max(initial=0.0)
    if 2 * abs(c) * sizes[0] * sizes[1] + spread < 599.0:
        return None
    with np.errstate(all="ignore"):
        s = np.where(keep, c * (q @ k.T) + (0.0 if bias is None else bias), -np.inf)
        top = s.max(axis=1, keepdims=True, initial=-np.inf)
        t = np.where(keep, s - top, 0.0)
    if not (t.min(initial=0.0) < -600.0 and t.min(initial=0.0) >= _dd.WIDE_ARG_MIN / 2):
        return None
    x = np.where(keep, np.rint(t / math.log(2)), _FAR).astype(np.int64)
    rows, first = np.arange(len(x)), s.argmax(axis=1)
    others = x.copy()
    others[rows, first] = _FAR
    second = others.max(axis=1, initial=_FAR)
    ds_x = x.copy()
    ds_x[rows, first] = np.where(keep[rows, first], np.where(second > _FAR, second, 0), _FAR)
    return ds_x.max(axis=0, initial=_FAR)[None, :], x.max(axis=0, initial=_FAR)[None, :]


def _shift(pair, err, shift):
    """(hi + lo) 2**shift and err 2**shift for an int64 shift, err widened by what rounding to float64's
    subnormals loses (2**-1075 for each of hi, lo and err). Shifts up are at most log2 Lk + 2 where the entry is
    not 0; past 60 (which the estimates rule out) the bound becomes inf rather than overflow."""
    hi, lo = pair
    nonzero = (hi != 0) | (err != 0)
    over = (shift > 60) & nonzero
    shift = np.minimum(shift, 60)
    hi, lo, err = _dd.times_pow2(shift, hi, lo, err)
    err = err + np.where((shift < 0) & nonzero, 2 * TINY, 0.0)
    return (hi, lo), np.where(over, np.inf, err)


def _apart(hi, lo, err, x) -> Approx:
    """The Approx of (hi + lo) 2**x within err 2**x. Its sign is kept where the bound decides it, so a value far
    below every format's subnormals rounds to its signed zero: in decide_arrays, or as `below` where even float64's
    2**-1075 is far above it (shifted, hi, lo and err would be 0 there, which reads as an exact 0)."""
    sign = np.where(np.abs(hi) - np.abs(lo) > err, np.sign(hi), 0.0)
    below = (sign != 0) & (np.frexp(np.abs(hi) + np.abs(lo) + err)[1] + x <= -1075)  # the sum is below 2**frexp
    (hi, lo), err = _shift((hi, lo), err, x)
    return Approx(hi, lo, err * (1 + 2.0**-50), sign, below)


def _probabilities(q, k_rows, keep, bias, ch, cl, c_rel, slices, wide: bool):
    """P = softmax(c q k^T + bias) over the kept keys as a double-double (p_hi, p_lo) and its bound (inf on rows
    whose exps are not certified), and with `wide` their exponents apart (P = p 2**x; else None); rows with no kept
    key get P = 0 exactly. bias: None, or finite where kept (one double-double add, as the forward's tier B)."""
    total = _ozaki.ExactSum((len(q), k_rows.rest.shape[0]))
    s_err = _ozaki.product(_ozaki.slice_rows([q], slices), k_rows, total)
    sh, sl, own = total.result()
    sh, sl = _dd.mul(sh, sl, np.full_like(sh, ch), np.full_like(sh, cl))
    ds = (abs(ch) * (s_err + own) * (1 + 2.0**-50) + np.abs(sh) * (c_rel + 2 * _dd.DD_OP_REL)) * (1 + _SAFE)
    if bias is not None:
        sh, sl = _dd.add_d(sh, sl, np.where(keep, bias, 0.0))
        ds = ds + np.abs(sh) * 2 * _dd.DD_OP_REL
    eh, el, total_h, total_l, eta, sigma, unsure, x = weights_dd(sh, sl, ds, keep, wide)
    ph, pl = _dd.div(eh, el, total_h[:, None], total_l[:, None])
    p_err = np.where(keep, ph * (eta + sigma[:, None] + 2 * _dd.DD_OP_REL) * (1 + _SAFE) + 4 * TINY, 0.0)
    p_err[unsure] = np.inf
    return (ph, pl), p_err, x


def _score_grad(p, p_err, x, g, v_rows, keep, slices):
    """dS = P (dP - D), D = rowsum(dP P), dP = g v^T, as a double-double and its bound. dP is centred per row on
    one of its kept values (the centre cancels from dS exactly), so equal dP values give dS = 0 exactly.

    With P's exponents apart (x, else None), dS's come back too (P = p 2**x, dS = ds 2**sx), and every row centres
    on its top key, whose dS is then P_top times r, with r summed at its own power of two: no cancellation, however
    far below the top the other weights are."""
    ph, pl = p
    lk = ph.shape[1]
    total = _ozaki.ExactSum(ph.shape)
    dp_err = _ozaki.product(_ozaki.slice_rows([g], slices), v_rows, total)
    dph, dpl, own = total.result()
    dp_err = dp_err + own
    if x is None:  # the kept value nearest D = sum P dP, so that the terms P h of r stay small
        guess = np.where(keep, ph * dph, 0.0).sum(axis=1)
        pick = np.where(keep, np.abs(dph - guess[:, None]), np.inf).argmin(axis=1)
    else:  # the top key
        pick = np.where(keep, _dd.times_pow2(x, ph)[0], -1.0).argmax(axis=1)
    rows = np.arange(len(ph))
    hh, hl = _dd.add(dph, dpl, -dph[rows, pick][:, None], -dpl[rows, pick][:, None])
    hh, hl = np.where(keep, hh, 0.0), np.where(keep, hl, 0.0)
    h_err = np.where(keep, dp_err + dp_err[rows, pick][:, None] + _dd.DD_OP_REL * np.abs(hh), 0.0)
    h_err[rows, pick] = 0.0  # dP_pick - dP_pick is 0 exactly
    th, tl = _dd.mul(ph, pl, hh, hl)
    ah = np.abs(hh)
    sizes, errs = (ph + p_err) * ah, p_err * ah + (ph + p_err) * h_err
    lost = 0.0
    if x is not None:  # r = sum P h at the largest exponent of a term that is not 0
        live = keep & ((hh != 0) | (h_err != 0))
        r_x = np.where(live.any(axis=1), np.where(live, x, _FAR).max(axis=1), 0)
        shift = np.where(live, x - r_x[:, None], 0)
        th, tl, sizes, errs = _dd.times_pow2(shift, th, tl, sizes, errs)
        lost = ((shift < 0) & live).sum(axis=1) * 4 * TINY  # times_pow2's rounding of th, tl, sizes and errs
    rh, rl = _dd.pairwise_sum(th, tl)
    depth = _dd.depth(lk, 2) + 1
    up = 1 + 2 * _dd.gamma(_dd.depth(lk))  # the float64 pairwise sums of the bounds below
    weighted = _dd.pairwise_sum(sizes)[0]
    r_err = (depth * _dd.DD_OP_REL * weighted + _dd.pairwise_sum(errs)[0] + lost) * up
    r_err = r_err * (1 + _SAFE) + 4 * TINY * (hh != 0).sum(axis=1)
    sx = None
    if x is None:
        dh, dl = _dd.add(hh, hl, -rh[:, None], -rl[:, None])
        d_err = h_err + r_err[:, None] + _dd.DD_OP_REL * np.abs(dh)
    else:  # d = h - r: where h is exactly 0 (the top key), d = -r at r's exponent; elsewhere r 2**r_x is added
        (sh_, sl_), s_err_ = _shift((rh, rl), r_err, r_x)
        dh, dl = _dd.add(hh, hl, -sh_[:, None], -sl_[:, None])
        apart = keep & ~live & (r_x < 0)[:, None]
        dh, dl = np.where(apart, -rh[:, None], dh), np.where(apart, -rl[:, None], dl)
        d_err = np.where(apart, r_err[:, None], h_err + s_err_[:, None]) + _dd.DD_OP_REL * np.abs(dh)
        sx = x + np.where(apart, r_x[:, None], 0)
    sh, sl = _dd.mul(ph, pl, dh, dl)
    s_err = (ph + p_err) * d_err + p_err * np.abs(dh) + _dd.DD_OP_REL * np.abs(sh)
    s_err = s_err * (1 + _SAFE) + 4 * TINY * ((dh != 0) | (d_err != 0))
    s_err = np.where(keep, s_err, 0.0)
    return (np.where(keep, sh, 0.0), np.where(keep, sl, 0.0)), s_err, sx


def _scale_parts(scale, d):
    """(Scale of the exponents, sign flip of the scores, Scale of dq and dk) for a given scale or None."""
    if scale is None:
        c = Scale(d=d)
        return c, 1, c
    c = Fraction(scale)
    return (Scale(abs(c)) if c else Scale(Fraction(1))), (-1 if c < 0 else (0 if c == 0 else 1)), Scale(c)


def exact_rows(q, k, v, g, keep, scale, skip, bias=None):
    """Tier C's exact setting of one batch entry: (Q, K, G as Fractions, the factor of dq and dk, and per query i
    not skipped that attends some key: (cols, Weights, dP, dP grouped by key, {col: key}, {col: dP})). bias (Lq, Lk)
    or None is added to the scores: with a rational c the exponents c q.k + b are rational keys, else `Biased` ones
    (c t + b, grouped by both parts)."""
    d = q.shape[1]

    def frac(a):
        return [[_fraction(exact_mpf(x)) for x in row] for row in a]

    Q, K, V, G = (frac(np.where(np.isfinite(a.astype(np.float64)), a, 0)) for a in (q, k, v, g))
    exp_scale, flip, factor = _scale_parts(scale, d)
    rows = {}
    for i in range(len(Q)):
        cols = [j for j in range(len(K)) if keep[i, j]]
        if skip[i] or not cols:  # undefined (nothing of it is asked for), or P = 0
            continue
        scores = [flip * sum((a * b for a, b in zip(Q[i], K[j])), Fraction(0)) for j in cols]
        w_scale = exp_scale
        if bias is not None:
            b = [_fraction(exact_mpf(bias[i, j])) for j in cols]
            if exp_scale.rational is not None:  # c s + b, rational: the exponents themselves
                scores = [exp_scale.rational * s + x for s, x in zip(scores, b)]
                w_scale = _grad_exact.ONE
            else:
                scores = [_grad_exact.Biased(s, x, d) for s, x in zip(scores, b)]
        top = max(scores)
        keys = [s - top for s in scores]
        dp = [sum((a * b for a, b in zip(G[i], V[j])), Fraction(0)) for j in cols]
        w = _grad_exact.Weights(keys, w_scale)
        rows[i] = (cols, w, dp, group(keys, dp), dict(zip(cols, keys)), dict(zip(cols, dp)))
    return Q, K, G, factor, rows


def score_grad_form(row, j) -> Form:
    """dS_ij = P_ij (dP_ij - D_i) of a query's row (`exact_rows`) at its kept key j, as a cov form."""
    _, w, _, dp_group, key_of, dp_of = row
    return Form(w, cov=({key_of[j]: dp_of[j]} if dp_of[j] else {}, {key_of[j]: Fraction(1)}, dp_group))


def _exact_batch(q, k, v, g, keep, scale, fmt, want, skip, bias=None):
    """Tier C for one batch entry: want = (dq mask, dk mask, dv mask); yields (which, index, Entry)."""
    Q, K, G, factor, rows = exact_rows(q, k, v, g, keep, scale, skip, bias)
    for i, a in zip(*np.nonzero(want[0])):
        if i not in rows:
            yield 0, (i, a), _grad_exact.decide_terms([], factor, fmt)
            continue
        cols, w, dp, dp_group, _, _ = rows[i]
        ka = [K[j][a] for j in cols]
        form = Form(w, cov=(group(w.keys, [x * y for x, y in zip(ka, dp)]), group(w.keys, ka), dp_group))
        yield 0, (i, a), _grad_exact.decide_terms([(Fraction(1), form)], factor, fmt)
    for which, weights_of in ((1, Q), (2, G)):
        for j, a in zip(*np.nonzero(want[which])):
            merged: dict = {}  # queries with the same weights (and dP row, for dk) share one form
            for i, (_, w, dp, _, key_of, dp_of) in rows.items():
                if j not in key_of or not weights_of[i][a]:
                    continue
                sig = (tuple(w.keys), key_of[j]) + ((tuple(dp), dp_of[j]) if which == 1 else ())
                if sig not in merged:
                    if which == 1:
                        form = score_grad_form(rows[i], j)
                    else:
                        form = Form(w, mean={key_of[j]: Fraction(1)})
                    merged[sig] = [Fraction(0), form]
                merged[sig][0] += weights_of[i][a]
            terms = [(wt, f) for wt, f in merged.values()]
            yield which, (j, a), _grad_exact.decide_terms(terms, factor if which == 1 else _grad_exact.ONE, fmt)


def _fast_tiers(b, arrays, keep, scale, bias, fmt: Format, outs, pending, softcap=None, derivative=True):
    """Tiers A (targets of at most 24 bits) and B on batch entry b, each on what the one before left. Queries
    whose gradient is undefined are left out (keep is False on their rows): nothing defined depends on them, and
    their non-finite values are replaced by 0 so no product carries them; so is the bias where not kept. Under a
    softcap tier B does not run (it has no double-double tanh, and it centres K on the rows of dS summing to 0,
    which sigma breaks): what tier A leaves goes to tier C."""
    head = [np.where(np.isfinite(a[b]), a[b], 0).astype(np.float64) for a in arrays]
    bias = None if bias is None else np.where(keep, bias[b], 0.0)
    tiers = [(1, lambda *args: tier_a(*args, softcap=softcap, derivative=derivative))] if tier_a_target(fmt) else []
    small = max(np.abs(a).max(initial=0.0) for a in head + ([] if bias is None else [bias])) < 2.0**500
    if small and softcap is None:
        tiers.append((2, lambda *args: tier_b(*args, slices=3 if fmt.precision <= 24 else 5)))
    for tier, run in tiers:
        if not any(m[b].any() for m in pending):
            return
        with np.errstate(all="ignore"):
            approxes = run(*head, keep, scale, bias)
            for o, m, approx in zip(outs, pending, approxes):
                rounded, decided = decide_arrays(approx.hi, approx.lo, approx.err, approx.sign, fmt)
                if approx.below is not None:
                    rounded = np.where(approx.below, np.copysign(0.0, approx.sign), rounded)
                    decided |= approx.below
                decided &= m[b]
                o.put_block(b, rounded, approx, decided, tier)
                m[b] &= ~decided


def upstream(g, shape: tuple) -> np.ndarray:
    """g as a float array of the output's shape, else one ValueError."""
    g = float_array(g, "g", min_ndim=2)
    if g.shape != tuple(shape):
        raise ValueError(f"g must have the output's shape {tuple(shape)}, got {g.shape}")
    return g


def attention_grad(
    q,
    k,
    v,
    g,
    mask,
    scale,
    fmt: Format,
    method: str,
    detail: bool = False,
    bias=None,
    extra_keys: int = 0,
    softcap=None,
    derivative: bool = True,
) -> tuple:
    """(dq, dk, dv) correctly rounded; q, k, v share their batch shape (no broadcasting of q, k, v). With detail,
    three Results (undefined per query for dq, per key for dk and dv). bias and softcap as `prepare` takes them (the
    scores cap tanh(c q.k / cap) + b); the last `extra_keys` keys are no output (a sink's: dk and dv have that many
    rows fewer). derivative False: the gradient a backward that leaves out the cap's derivative computes."""
    problem = prepare(q, k, v, mask, scale, bias=bias, softcap=softcap)
    q0, k0, v0 = (np.asarray(a) for a in (q, k, v))
    if not (q0.shape[:-2] == k0.shape[:-2] == v0.shape[:-2]):
        raise ValueError("attention_grad needs q, k and v of one batch shape (the mask may broadcast)")
    g = upstream(g, problem.shape)
    qs, ks, vs, keep = problem.q, problem.k, problem.v, problem.keep
    nb, lq, d = qs.shape
    lk, dv = ks.shape[1], vs.shape[2]
    g3 = g.reshape(nb, lq, dv)
    has_key = keep.any(axis=2)
    with np.errstate(invalid="ignore"):
        bad = (problem.undefined.reshape(nb, lq) | ~np.isfinite(g3).all(axis=2)) & has_key
    outs = [_Collector(shape, fmt, detail=detail) for shape in ((nb, lq, d), (nb, lk, d), (nb, lk, dv))]
    bad_key = (keep & bad[:, :, None]).any(axis=1)
    pending = [np.broadcast_to(m[:, :, None], o.values.shape).copy() for m, o in zip((~bad, ~bad_key, ~bad_key), outs)]
    for o, m in zip(outs, pending):
        o.fill(~m, np.nan)
    lk0 = lk - extra_keys
    for o, m in zip(outs[1:], pending[1:]):  # the extra keys' dk and dv: no output
        o.fill(np.broadcast_to(np.arange(lk)[None, :, None] >= lk0, m.shape), 0.0)
        m[:, lk0:] = False
    if method == "auto" and fast_target(fmt) and all(fast_input(a) for a in (qs, ks, vs, g3)):
        for b in np.flatnonzero([any(m[b].any() for m in pending) for b in range(nb)]):
            run = (b, (qs, ks, vs, g3), keep[b] & ~bad[b][:, None], problem.scale, problem.bias, fmt, outs, pending)
            _fast_tiers(*run, softcap=problem.softcap, derivative=derivative)
    for b in range(nb):
        if any(m[b].any() for m in pending):
            arrays, keep_b, want = (qs[b], ks[b], vs[b], g3[b]), keep[b], [m[b] for m in pending]
            bias_b = None if problem.bias is None else problem.bias[b]
            if problem.softcap is None:
                found = _exact_batch(*arrays, keep_b, problem.scale, fmt, want, bad[b], bias=bias_b)
            else:

                def plain(w, arrays=arrays, keep_b=keep_b, bad_b=bad[b], bias_b=bias_b):
                    return _exact_batch(*arrays, keep_b, problem.scale, fmt, w, bad_b, bias=bias_b)

                cap = problem.softcap
                found = _grad_softcap.exact_batch(
                    *arrays, keep_b, problem.scale, cap, fmt, want, bad[b], bias_b, plain, derivative
                )
            for which, (i, a), entry in found:
                outs[which].put_exact((b, i, a), *entry)
    shapes = (q0.shape,) + tuple(a.shape[:-2] + (lk0, a.shape[-1]) for a in (k0, v0))
    rows = (slice(None), slice(None, lk0), slice(None, lk0))
    if not detail:
        return tuple(o.array()[:, r].reshape(shape) for o, r, shape in zip(outs, rows, shapes))
    undefined = (bad, bad_key[:, :lk0], bad_key[:, :lk0])
    return tuple(
        Result(
            *(a[:, r].reshape(shape) for a in (o.array(), o.hi, o.lo, o.err, o.tier)),
            u.reshape(shape[:-1]),
            None if o.fine is None else o.fine[:, r].reshape(shape),
        )
        for o, r, shape, u in zip(outs, rows, shapes, undefined)
    )
