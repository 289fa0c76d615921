"""Tier C of attention: one query's output (and log-sum-exp), correctly rounded at rising precision (Ziv).

The scores are f_j = cap(c t_j) + b_j over the query's kept keys: t_j = q.k_j exactly, c the given scale or the
real 1/sqrt(d), cap C tanh(s / C) or none, b_j a bias (ALiBi's, a sink's logit). o = sum_j e**f_j v_j / sum_j e**f_j.

Exact outputs. Keys of equal score form a class (`score_classes`). Without a cap every f_j is algebraic, so the
distinct e**f_j are linearly independent over the algebraic numbers (Lindemann-Weierstrass) and o is rational
exactly when every class has the same mean value: o is that mean, rounded exactly (refining never decides a tie or
a zero). With a cap the scores are transcendental: equal means still give that mean, and anything else is presumed
irrational (Schanuel's conjecture would make it so).

Near outputs. Scores capped far in the tanh's flat part differ by about 2 C e**(-2 s / C) (C = 0.25, s = 1e5:
e**-800000), below any working precision when each f_j is formed on its own; the gaps are formed as one quantity
instead (`_Gaps`), with relative accuracy however small. With N the keys within 1/2 of the top score and base
their mean value, o = base + sum_j w_j (v_j - base) / (|N| + sum_j w_j), w_j = e**t_j - 1 in N and e**t_j outside
(t_j the gap): a correction that decide_sum rounds however small, so an output within e**-800000 of a tie (two
saturated keys whose values' mean is one) is decided at the first precision.
"""

from __future__ import annotations

from mpmath import libmp

from ._exact import Entry, _fraction, _pow2, _rational, _refine, _to_mpf, decide, decide_sum, rational_scale
from ._formats import Format
from ._rational import Fraction

_UP = libmp.round_up
_SAFE = libmp.from_float(1.01)
_NEAR = _pow2(-1)  # keys whose gap is at most this are weighed as 1 + (e**t - 1)
_SMALL = _pow2(-20)  # every gap's bound below this: the bounds' first-order terms then cover the rest (1.01)


def _up(a, b, op=libmp.mpf_mul):
    return op(a, b, 30, _UP)


def _sum_up(values):
    return libmp.mpf_sum(values, 30, _UP)


def score_classes(raw: list, bias: list, scale: tuple | None, d: int, softcap) -> list:
    """A label per key, equal exactly where the scores f_j are: with no cap and a rational c (a given scale, or d a
    perfect square) f_j itself, an exact rational; with c = 1/sqrt(d) irrational, (t_j, b_j), since c t + b =
    c t' + b' with t != t' would make c rational; with a cap, (c t_j or t_j, b_j), since C tanh x - C tanh x' is
    never rational for distinct algebraic x, x' (writing A = e**2x, B = e**2x', a rational r would give
    r A B + (r - 2) A + (r + 2) B + r = 0, whose distinct exponentials Lindemann-Weierstrass makes independent)."""
    c = _fraction(scale) if scale is not None else rational_scale(d)
    if softcap is None and c is not None:
        return [c * _fraction(t) + _fraction(b) for t, b in zip(raw, bias)]
    if c is not None:
        return [(c * _fraction(t), b) for t, b in zip(raw, bias)]
    return list(zip(raw, bias))


def _rational_attention(classes: list[list[int]], values: list[list], column: int) -> Fraction | None:
    """The exact output when every class of equal scores (`classes`: each one's keys) has the same mean value in the
    column (`values`: each key's exact values): that mean."""
    first = classes[0]
    mean = sum((values[j][column] for j in first), Fraction(0)) / len(first)
    for keys in classes[1:]:
        if sum((values[j][column] for j in keys), Fraction(0)) != mean * len(keys):
            return None
    return mean


def attention_row(
    q: list[tuple],
    ks: list[list[tuple]],
    vs: list[list[tuple]],
    scale: tuple | None,
    d: int,
    fmt: Format,
    bias: list[tuple] | None = None,
    softcap: float | None = None,
) -> list[Entry]:
    """Correctly rounded attention output of one query over its kept keys (at least one), every column: the
    module's exact outputs first, then the others at rising precision. bias: one exact value per key, added after
    the softcap; softcap: each score s becomes c tanh(s / c)."""
    raw = [libmp.mpf_sum([libmp.mpf_mul(a, b, 0) for a, b in zip(q, k)], 0) for k in ks]
    bias = bias or [libmp.fzero] * len(raw)
    labels = score_classes(raw, bias, scale, d, softcap)
    classes: dict = {}
    for j, label in enumerate(labels):
        classes.setdefault(label, []).append(j)
    values = [[_fraction(x) for x in row] for row in vs]
    ncol = len(vs[0])
    done: dict[int, Entry] = {}
    for c in range(ncol):
        exact = _rational_attention(list(classes.values()), values, c)
        if exact is not None:
            done[c] = _rational(exact, fmt)
    if len(done) == ncol:
        return [done[c] for c in range(ncol)]
    gaps = _Gaps(raw, bias, labels, scale, d, softcap)
    top_values, other_values = [values[j] for j in gaps.group], [values[j] for j in gaps.others]
    wp = fmt.precision + 32
    while True:
        ts, bounds = gaps.at(wp)
        if all(libmp.mpf_cmp(b, _SMALL) <= 0 for b in bounds):
            _decide_columns(ts, bounds, top_values, other_values, done, fmt, wp)
            if len(done) == ncol:
                return [done[c] for c in range(ncol)]
        wp = _refine(wp)


class _Gaps:
    """The class of the top score (`group`) and, at any precision, each other key's gap t_j = f_j - f_top with a
    bound on its error (`at`). The top is the largest score, or one within 2**-60 of it where found at 64 bits (a
    gap may then be slightly positive)."""

    def __init__(self, raw, bias, labels, scale, d: int, softcap):
        self.raw, self.bias, self.labels, self.scale, self.d = raw, bias, labels, scale, d
        self.cap = None if softcap is None else libmp.from_float(softcap)
        self.exact = all(isinstance(label, Fraction) for label in labels)  # f_j themselves: no cap, a rational c
        if self.exact:
            top = max(range(len(labels)), key=labels.__getitem__)
        elif len(set(bias)) == 1 and (scale is None or libmp.mpf_sign(scale) > 0):  # (cap(c raw) rises with raw)
            top = 0
            for j in range(1, len(raw)):
                if libmp.mpf_cmp(raw[j], raw[top]) > 0:
                    top = j
        else:
            first, _ = _spec_scores(list(zip(raw, bias)), scale, d, self.cap, 64)
            top = 0
            for j in range(1, len(first)):
                if libmp.mpf_cmp(first[j], first[top]) > 0:
                    top = j
        self.top = top
        self.group = [j for j, label in enumerate(labels) if label == labels[top]]
        self.others = [j for j, label in enumerate(labels) if label != labels[top]]

    def at(self, wp: int) -> tuple[list, list]:
        """(t_j, a bound on |t_j - exact gap|) for each of `others`, at precision wp."""
        if self.exact:
            found = [_to_mpf(self.labels[j] - self.labels[self.top], wp) for j in self.others]
            return [t for t, _ in found], [err for _, err in found]
        return self._capped(wp) if self.cap is not None else self._scaled(wp)

    def _differences(self, j):
        """(t_j - t_top, b_j - b_top), both exact."""
        top = self.top
        return libmp.mpf_sub(self.raw[j], self.raw[top], 0), libmp.mpf_sub(self.bias[j], self.bias[top], 0)

    def _scaled(self, wp: int):
        """No cap, c = 1/sqrt(d) irrational: t_j = c (t_j - t_top) + (b_j - b_top), c within 2**(-wp - 11)."""
        factor = libmp.mpf_div(libmp.fone, libmp.mpf_sqrt(libmp.from_int(self.d), wp + 12), wp + 12)
        ts, bounds = [], []
        for j in self.others:
            dt, db = self._differences(j)
            s = libmp.mpf_mul(dt, factor, wp + 12)  # within |s| 2**(-wp - 10)
            t = libmp.mpf_add(s, db, wp)
            ts.append(t)
            scaled_err = _up(libmp.mpf_abs(s), _pow2(-wp - 9))
            bounds.append(libmp.mpf_add(scaled_err, _up(libmp.mpf_abs(t), _pow2(1 - wp)), 30, _UP))
        return ts, bounds

    def _capped(self, wp: int):
        """With a cap: C tanh x_j - C tanh x_top = C sinh(x_j - x_top) / (cosh x_j cosh x_top), x = c t / C, formed at
        w = wp + 20 with relative error at most 2**(6 - w) (1 + |x_j - x_top| + |x_j| + |x_top|): c (1/sqrt(d)) and
        each x within 2**(2 - w) relative, which moves cosh x by |x tanh x| and sinh y by |y coth y| <= 1 + |y|
        times that; sinh, cosh within 4 ulp each; three roundings. Then the exact b_j - b_top is added (rounded at
        wp). Saturated scores keep their gap, however small."""
        w = wp + 20
        cap = self.cap
        c = self.scale
        if c is None:
            c = libmp.mpf_div(libmp.fone, libmp.mpf_sqrt(libmp.from_int(self.d), w), w)

        def x_of(t):
            return libmp.mpf_div(libmp.mpf_mul(c, t, w), cap, w)

        x_top = x_of(self.raw[self.top])
        cosh_top = libmp.mpf_cosh(x_top, w)
        ts, bounds = [], []
        for j in self.others:
            dt, db = self._differences(j)
            x, dx = x_of(self.raw[j]), x_of(dt)
            part = libmp.mpf_mul(cap, libmp.mpf_sinh(dx, w), w)
            part = libmp.mpf_div(libmp.mpf_div(part, libmp.mpf_cosh(x, w), w), cosh_top, w)
            size = _sum_up([libmp.fone, libmp.mpf_abs(dx), libmp.mpf_abs(x), libmp.mpf_abs(x_top)])
            t = libmp.mpf_add(part, db, wp)
            ts.append(t)
            part_err = _up(_up(libmp.mpf_abs(part), size), _pow2(6 - w))
            bounds.append(libmp.mpf_add(part_err, _up(libmp.mpf_abs(t), _pow2(1 - wp)), 30, _UP))
        return ts, bounds


def _expm1(t: tuple, wp: int) -> tuple:
    """e**t - 1 for |t| <= 1/2, within 2**(1 - wp) relative: e**t at the bits the subtraction cancels more. (For
    |t| < 2**-wp, t itself: e**t - 1 = t (1 + t/2 + ...) within 2**-wp.)"""
    if t == libmp.fzero:
        return libmp.fzero
    mag = t[2] + t[3]  # 2**(mag - 1) <= |t| < 2**mag
    if mag < -wp:
        return t
    return libmp.mpf_sub(libmp.mpf_exp(t, wp + 8 - mag), libmp.fone, wp)


def _decide_columns(ts, bounds, top_values, other_values, done: dict, fmt: Format, wp: int) -> None:
    """Round each column not yet in `done` that the bounds decide (values: each key's row of exact values). The top
    class has gap 0; each other key j gap t_j within bounds_j (<= 2**-20). With N the keys whose |t_j| <= 1/2 (the
    top class among them) and base their mean value: o = base + sum_j w_j (v_j - base) / (|N| + sum_j w_j) over the
    others, w_j = e**t_j - 1 in N, e**t_j outside (the top class's terms, and N's 1s, sum to 0 against base).

    Each w_j is within |w_j| 2**(2 - wp) (exp's 4 ulp; `_expm1`'s bound) plus drift_j = 1.01 e**t_j bounds_j (t_j's
    error moves e**t_j by e**t_j (e**bound - 1))."""
    near = [libmp.mpf_cmp(libmp.mpf_abs(t), _NEAR) <= 0 for t in ts]
    ws, drifts = [], []
    for t, bound, is_near in zip(ts, bounds, near):
        w = _expm1(t, wp) if is_near else libmp.mpf_exp(t, wp)
        ws.append(w)
        if bound != libmp.fzero:
            weight = libmp.mpf_add(libmp.fone, w, 30, _UP) if is_near else libmp.mpf_abs(w)  # about e**t
            drifts.append(_up(_up(weight, bound), _SAFE))
        else:
            drifts.append(libmp.fzero)
    count = len(top_values) + sum(near)
    total = libmp.mpf_add(libmp.from_int(count), libmp.mpf_sum(ws, wp), wp)
    magnitude = libmp.mpf_add(libmp.from_int(count), _sum_up([libmp.mpf_abs(w) for w in ws]), 30, _UP)
    # (the ws' own errors, the sum's and the add's roundings; the drifts)
    total_err = libmp.mpf_add(_sum_up(drifts), _up(magnitude, _pow2(3 - wp)), 30, _UP)
    low = libmp.mpf_sub(total, total_err, 30, libmp.round_down)
    if libmp.mpf_sign(low) <= 0:  # (not with every bound <= 2**-20: |N| + sum w >= |N| e**-1/2)
        return
    drifting = any(drift != libmp.fzero for drift in drifts)
    kept = [row for row, is_near in zip(other_values, near) if is_near]
    for c in range(len(top_values[0])):
        if c in done:
            continue
        base = sum((row[c] for row in top_values + kept), Fraction(0)) / count
        xs = []
        for row in other_values:
            x = row[c] - base
            xs.append(libmp.from_rational(x.numerator, x.denominator, wp))  # within |x| 2**-wp
        terms = [libmp.mpf_mul(w, x, 0) for w, x in zip(ws, xs)]
        num = libmp.mpf_sum(terms, wp)
        # each w's own error, x's conversion and the sum's rounding (within size 2**(2 - wp), 2**-wp, 2**-wp), and
        # the drifts times |x| (x's conversion in 1.01 - 1)
        num_err = _up(_sum_up([libmp.mpf_abs(term) for term in terms]), _pow2(3 - wp))
        if drifting:
            drift = _sum_up([_up(d, libmp.mpf_abs(x)) for d, x in zip(drifts, xs) if d != libmp.fzero])
            num_err = libmp.mpf_add(num_err, _up(drift, _SAFE), 30, _UP)
        corr = libmp.mpf_div(num, total, wp)
        # |num / total - exact| <= (num_err + |num| total_err / low) / low; the division rounds once
        spread = _up(_up(libmp.mpf_abs(num), total_err), low, libmp.mpf_div)
        err = _up(libmp.mpf_add(num_err, spread, 30, _UP), low, libmp.mpf_div)
        err = libmp.mpf_add(err, _up(libmp.mpf_abs(corr), _pow2(1 - wp)), 30, _UP)
        found = decide_sum(base, corr, err, 0, fmt)
        if found is not None:
            done[c] = found


def _spec_scores(keys: list, scale, d: int, cap, wp: int) -> tuple[list, list]:
    """The scores f = cap(c raw) + b of (raw, b) keys at precision wp, and each one's error bound E: every step is
    within a few ulps at wp (c = 1/sqrt(d) too), so 2**(8 - wp) (|c raw| + |b| + 2 cap) bounds it."""
    factor = scale if scale is not None else libmp.mpf_div(libmp.fone, libmp.mpf_sqrt(libmp.from_int(d), wp), wp)
    found, bounds = [], []
    for r, b in keys:
        s = libmp.mpf_mul(factor, r, wp)
        if cap is not None:
            s = libmp.mpf_mul(cap, libmp.mpf_tanh(libmp.mpf_div(s, cap, wp), wp), wp)
        found.append(libmp.mpf_add(s, b, wp))
        size = libmp.mpf_add(libmp.mpf_abs(libmp.mpf_mul(factor, r, 30)), libmp.mpf_abs(b), 30, _UP)
        if cap is not None:
            size = libmp.mpf_add(size, libmp.mpf_shift(cap, 1), 30, _UP)
        bounds.append(libmp.mpf_mul(size, _pow2(8 - wp), 30, _UP))
    return found, bounds


def attention_lse_row(
    q: list[tuple], ks: list[list[tuple]], scale: tuple | None, d: int, fmt: Format, bias=None, softcap=None
) -> Entry:
    """Correctly rounded log-sum-exp of one query's scores f_j = cap(c q.k_j) + b_j over its kept keys (at least
    one): f_top + log(|G| + sum over the others of e**(f_j - f_top)), each f_j within E_j as in
    `_attention_row_spec`. Rational only with one group of equal scores of one key and a rational f (a given scale
    or a perfect square d, no cap, or a zero score): rounded exactly (a Ziv loop never ends where that f lies halfway
    between two values of the dtype: the hunt found d = 1 in bfloat16)."""
    raw = [libmp.mpf_sum([libmp.mpf_mul(a, b, 0) for a, b in zip(q, k)], 0) for k in ks]
    bias = bias or [libmp.fzero] * len(raw)
    keys = list(zip(raw, bias))
    cap = None if softcap is None else libmp.from_float(softcap)
    c = _fraction(scale) if scale is not None else rational_scale(d)
    if len(keys) == 1 and (c is not None or raw[0] == libmp.fzero) and (cap is None or raw[0] == libmp.fzero):
        exact = _fraction(bias[0]) + (c * _fraction(raw[0]) if raw[0] != libmp.fzero else 0)
        return _rational(exact, fmt)

    def scores_at(wp):
        return _spec_scores(keys, scale, d, cap, wp)

    first, _ = scores_at(64)
    top = max(range(len(keys)), key=lambda j: libmp.to_float(first[j]))
    group = [j for j, key in enumerate(keys) if key == keys[top]]
    others = [j for j, key in enumerate(keys) if key != keys[top]]
    wp = fmt.precision + 32
    while True:
        f, bounds = scores_at(wp + 20)
        worst = max(bounds, key=lambda e: libmp.to_float(e))
        es = [libmp.mpf_exp(libmp.mpf_sub(f[j], f[top], wp + 10), wp + 10) for j in others]
        total = libmp.mpf_add(libmp.from_int(len(group)), libmp.mpf_sum(es, wp + 10), wp + 10)
        value = libmp.mpf_add(f[top], libmp.mpf_log(total, wp + 10), wp)
        # f_top within E_top; each term within 1.01 (E_j + E_top) + 2**(-wp) relative (exp, the difference), so the
        # log of the sum within that, and the log and the add round once each
        err = libmp.mpf_add(
            libmp.mpf_mul(libmp.from_int(4), worst, 30, _UP),
            libmp.mpf_mul(libmp.mpf_add(libmp.mpf_abs(value), libmp.from_int(4), 30, _UP), _pow2(1 - wp), 30, _UP),
            30,
            _UP,
        )
        found = decide(value, err, 0, fmt)
        if found is not None:
            return found, value, err
        wp = _refine(wp)
