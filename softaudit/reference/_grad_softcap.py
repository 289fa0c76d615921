"""Tier C of attention's backward under a tanh softcap: every element evaluated directly at rising precision (Ziv).

With raw scores s_ij = c q_i.k_j, capped scores f_ij = cap tanh(s_ij / cap) + b_ij, P = softmax(f) over the kept
keys, dP = g v^T, D_i = sum_j P_ij dP_ij and sigma_ij = sech(s_ij / cap)**2 (the cap's derivative):
dS = sigma P (dP - D), dq = c dS K, dk = c dS^T Q, dv = P^T g.

The forms of `_grad_exact` need rational coefficients over exponentials of rational (or `Biased`) exponents; sigma
is transcendental, so here each batch entry's P and dS are computed at precision wp with a proven bound per
element, and each output is the exact sum of exact products of those values with the inputs (the only error is
dS's or P's, times the inputs), decided when its interval rounds one way, else wp doubles.

Exact zeros are found in exact arithmetic, grouping keys G by their (raw score t = q.k, bias) pair (one f, one
sigma, one e**f per group) and writing S = sum e (n_H keys in H, sums over the group):
* dq_ia S**2 = sum over ordered pairs (G, H) of sigma_G e_G e_H X_GH, X_GH = A_G n_H - K_G P_H, with
  A_G = sum k_ja dP_j, K_G = sum k_ja, P_H = sum dP_l. sigma_G = sigma_H exactly iff |t_G| = |t_H|, so dq_ia is 0
  when every X_GG is 0 and, for every other pair, X_GH + X_HG is 0 (one sigma) or both are (two).
* dS_ij = 0 when n_H dP_j = P_H for every group H (S (dP_j - D_i) = sum_H e_H (n_H dP_j - P_H)); dk_ja is 0 when
  the queries with the same row (t, b and dP over their keys, b and dP up to a constant) sum q_ia to 0, or their
  dS_ij is 0; dv_ja is 0 when the queries with the same weights (t and b up to a constant) sum g_ia to 0.
These are sufficient. Anything else is presumed nonzero (Schanuel's conjecture would make it so; with the
exponents and sigma transcendental, Lindemann-Weierstrass no longer decides it), and an element whose interval
still holds 0 at CAP_BITS bits is given +0: only a cancellation this module does not recognise can get there.
Where every score an element depends on is c t = 0 (sigma = 1, the cap leaves the score), the problem is the
uncapped one and the caller sends those elements to the forms (`plain`), which decide rational values exactly.
docs/reference.md, "The softcap's backward".
"""

from __future__ import annotations

import functools

import numpy as np
from mpmath import libmp

from ._exact import _pow2, _refine, decide
from ._exact_attention import _spec_scores
from ._formats import Format, exact_mpf
from ._grad_exact import _ZERO_ENTRY as _ZERO

_UP = libmp.round_up
_SAFE = libmp.from_float(1.01)
#: Precision past which an element whose interval still holds 0 is given +0 (presumed nonzero, and smaller than
#: 2**-CAP_BITS times the terms it sums: no format has a zero's sign to lose there but through such cancellation).
CAP_BITS = 4096
#: Rows with more key groups than this skip the quadratic pair certificate of dq (presumed nonzero).
PAIRS_MAX = 512


def _mul(a, b):
    return libmp.mpf_mul(a, b, 30, _UP)


def _add(a, b):
    return libmp.mpf_add(a, b, 30, _UP)


def _sum_up(values):
    return libmp.mpf_sum(values, 30, _UP)


def _abs(a):
    return libmp.mpf_abs(a)


class _Entry:
    """One batch entry's exact inputs (libmp values) and key groups; `at(wp)` gives P and dS within bounds."""

    def __init__(self, q, k, v, g, keep, scale, cap, skip, bias, derivative=True):
        # (an undefined query's, or an unattended key's, NaN or infinity: nothing asked for reads it)
        q, k, v, g = (np.where(np.isfinite(a), a, 0.0) for a in (q, k, v, g))
        lq, d = q.shape
        self.d, self.scale, self.cap, self.derivative = d, scale, libmp.from_float(cap), derivative
        self.lq, self._q, self._k, self._g = lq, q, k, g
        self.ints = (_inputs(k), _inputs(q), _inputs(g))
        (k_int, ek), (q_int, eq), (g_int, eg) = self.ints
        v_int, ev = _inputs(v)
        scores, values = q_int.dot(k_int.T), g_int.dot(v_int.T)  # exact: q.k and dP = g.v
        self.rows = {}
        for i in range(lq):
            cols = [j for j in range(k.shape[0]) if keep[i, j]]
            if skip[i] or not cols:
                continue
            t = [libmp.from_man_exp(int(scores[i, j]), eq + ek) for j in cols]
            b = [libmp.fzero if bias is None else exact_mpf(bias[i, j]) for j in cols]
            dp = [libmp.from_man_exp(int(values[i, j]), eg + ev) for j in cols]
            self.rows[i] = (cols, t, b, dp)
        #: per key, the queries that attend it and its place in their rows
        self.attending: dict = {}
        for i, (cols, *_) in self.rows.items():
            for at, j in enumerate(cols):
                self.attending.setdefault(j, []).append((i, at))
        self._at = {}

    # q, k and g as lists of exact libmp values: only the exact-zero certificates read them, and only where an
    # element's interval holds 0
    @functools.cached_property
    def Q(self) -> list:
        return _exact_values(self._q)

    @functools.cached_property
    def K(self) -> list:
        return _exact_values(self._k)

    @functools.cached_property
    def G(self) -> list:
        return _exact_values(self._g)

    def flat(self, i) -> bool:
        """Whether every kept score of query i is c t = 0 (the cap changes nothing)."""
        return self.scale == 0.0 or all(t == libmp.fzero for t in self.rows[i][1])

    def at(self, wp: int) -> dict:
        """{query: (cols, P, P's bound, dS, dS's bound)} at precision wp, every bound absolute."""
        if wp not in self._at:
            self._at = {wp: {i: self._row(*row, wp) for i, row in self.rows.items()}}
        return self._at[wp]

    def _row(self, cols, t, b, dp, wp):
        w = wp + 20
        f, bounds = _spec_scores(
            list(zip(t, b)), None if self.scale is None else libmp.from_float(self.scale), self.d, self.cap, w
        )
        top = max(range(len(f)), key=lambda j: libmp.to_float(f[j]))
        e, eta = [], []
        for fj, ej in zip(f, bounds):
            gap = libmp.mpf_sub(fj, f[top], w)
            e.append(libmp.mpf_exp(gap, w))
            # e**gap within 2**(2 - w) (exp) and |gap| 2**(1 - w) (the subtraction); fj and f_top within their E
            own = _add(_pow2(2 - w), _mul(_abs(gap), _pow2(1 - w)))
            eta.append(_add(own, _mul(_add(ej, bounds[top]), libmp.from_float(1.01))))
        total = libmp.mpf_sum(e, w)
        total_rel = _add(libmp.mpf_div(_sum_up([_mul(x, y) for x, y in zip(e, eta)]), total, 30, _UP), _pow2(1 - w))
        p, p_err = [], []
        for ej, etaj in zip(e, eta):
            pj = libmp.mpf_div(ej, total, w)
            p.append(pj)
            rel = _mul(_add(_add(etaj, total_rel), _pow2(1 - w)), libmp.from_float(1.02))
            p_err.append(_mul(pj, rel))
        d_value = libmp.mpf_sum([libmp.mpf_mul(pj, x) for pj, x in zip(p, dp)], w)
        d_err = _add(_sum_up([_mul(e_, _abs(x)) for e_, x in zip(p_err, dp)]), _mul(_abs(d_value), _pow2(1 - w)))
        sigma, sigma_rel = self._sigma(t, w)
        ds, ds_err = [], []
        for pj, ej, x, sj, sr in zip(p, p_err, dp, sigma, sigma_rel):
            h = libmp.mpf_sub(x, d_value)  # exact
            fj = libmp.mpf_mul(pj, h, w)
            # P h within p_err |h| + (P + p_err) D's bound, then rounded; times sigma within sigma_rel, rounded
            f_err = _add(_add(_mul(ej, _abs(h)), _mul(_add(pj, ej), d_err)), _mul(_abs(fj), _pow2(1 - w)))
            v = libmp.mpf_mul(sj, fj, w)
            err = _mul(_add(_mul(_mul(sj, _abs(fj)), sr), _mul(_mul(sj, _add(libmp.fone, sr)), f_err)), _SAFE)
            ds.append(v)
            ds_err.append(_add(err, _mul(_abs(v), _pow2(1 - w))))
        return cols, p, p_err, ds, ds_err

    def _sigma(self, t, w):
        """sech(c t / cap)**2 per key and its relative bound: x = c t / cap within 2**(4 - w) |x| (c = 1/sqrt(d)
        rounded too), which moves sigma by 2 |tanh x| |dx| relative, and cosh, its square and the reciprocal round
        within 2**(3 - w): 2**(5 - w) (1 + |x|) covers both. 1, exactly, for the backward that drops the cap's
        derivative (`derivative` False: the convention check's neighbour)."""
        if not self.derivative:
            return [libmp.fone] * len(t), [libmp.fzero] * len(t)
        if self.scale is None:
            c = libmp.mpf_div(libmp.fone, libmp.mpf_sqrt(libmp.from_int(self.d), w), w)
        else:
            c = libmp.from_float(self.scale)
        sigma, rel = [], []
        for tj in t:
            x = libmp.mpf_div(libmp.mpf_mul(c, tj, w), self.cap, w)
            cosh, _ = libmp.mpf_cosh_sinh(x, w)
            sigma.append(libmp.mpf_div(libmp.fone, libmp.mpf_mul(cosh, cosh, w), w))
            rel.append(_mul(_add(libmp.fone, _abs(x)), _pow2(5 - w)))
        return sigma, rel

    def factor(self, wp: int):
        """c at wp bits, and its relative bound."""
        if self.scale is None:
            return libmp.mpf_div(libmp.fone, libmp.mpf_sqrt(libmp.from_int(self.d), wp + 10), wp + 10), _pow2(-wp - 8)
        return libmp.from_float(self.scale), libmp.fzero


def _groups(cols, t, b, dp):
    """Keys of one row grouped by (t, b): {(t, b): [n, sum dP, [columns]]}."""
    found: dict = {}
    for j, tj, bj, x in zip(cols, t, b, dp):
        entry = found.setdefault((tj, bj), [0, libmp.fzero, []])
        entry[0] += 1
        entry[1] = libmp.mpf_add(entry[1], x)
        entry[2].append((j, x))
    return found


def _dq_zero(row, K, a, derivative=True) -> bool:
    """Whether dq_ia is exactly 0 by the pair certificate (module docstring); without the derivative every sigma
    is 1, one class."""
    cols, t, b, dp = row
    if all(x == dp[0] for x in dp) or all(K[j][a] == libmp.fzero for j in cols):
        return True
    groups = list(_groups(cols, t, b, dp).items())
    if len(groups) > PAIRS_MAX:
        return False
    parts = []
    for (tg, _), (n, total, members) in groups:
        a_g = libmp.mpf_sum([libmp.mpf_mul(K[j][a], x) for j, x in members])
        k_g = libmp.mpf_sum([K[j][a] for j, _ in members])
        parts.append((_abs(tg) if derivative else libmp.fone, n, total, a_g, k_g))

    def x(g, h):
        return libmp.mpf_sub(libmp.mpf_mul(g[3], libmp.from_int(h[1])), libmp.mpf_mul(g[4], h[2]))

    for u, g in enumerate(parts):
        if x(g, g) != libmp.fzero:
            return False
        for h in parts[u + 1 :]:
            if g[0] == h[0]:
                if libmp.mpf_add(x(g, h), x(h, g)) != libmp.fzero:
                    return False
            elif x(g, h) != libmp.fzero or x(h, g) != libmp.fzero:
                return False
    return True


def _ds_zero(row, j) -> bool:
    """Whether dS_ij is exactly 0: n_H dP_j = P_H for every key group H of the row."""
    cols, t, b, dp = row
    x = dp[cols.index(j)]
    return all(libmp.mpf_mul(libmp.from_int(n), x) == total for n, total, _ in _groups(cols, t, b, dp).values())


def _shifted(values):
    """values less their first (a row's bias or dP up to a constant)."""
    return tuple(libmp.mpf_sub(x, values[0]) for x in values)


def _sums_zero(entry: _Entry, j, a, weights, with_dp: bool) -> bool:
    """Whether sum over queries attending j of weights[i][a] times one shared factor per row signature is 0: every
    signature's weights sum to 0, or (with_dp, the factor dS_ij) the signature's dS_ij is 0."""
    sums: dict = {}
    for i, _ in entry.attending.get(j, ()):
        row = entry.rows[i]
        cols, t, b, dp = row
        sig = (tuple(cols), j, tuple(t), _shifted(b)) + ((_shifted(dp),) if with_dp else ())
        if sig not in sums:
            sums[sig] = [libmp.fzero, row]
        sums[sig][0] = libmp.mpf_add(sums[sig][0], weights[i][a])
    return all(s == libmp.fzero or (with_dp and _ds_zero(row, j)) for s, row in sums.values())


def exact_batch(q, k, v, g, keep, scale, cap, fmt: Format, want, skip, bias=None, plain=None, derivative=True):
    """Tier C for one batch entry under the cap: want = (dq mask, dk mask, dv mask); yields (which, index, Entry).
    Elements whose every score is c t = 0 go to plain(want) (the uncapped forms), which yields the same way.
    derivative False: the gradient without the cap's derivative (sigma = 1)."""
    entry = _Entry(q, k, v, g, keep, scale, cap, skip, bias, derivative)
    want = [w.copy() for w in want]
    flat = {i: entry.flat(i) for i in entry.rows}
    to_plain = [w.copy() for w in want]
    to_plain[0][[i for i in range(len(q)) if not flat.get(i, True)]] = False
    for w in to_plain[1:]:
        for j, queries in entry.attending.items():
            if not all(flat[i] for i, _ in queries):
                w[j] = False
    if plain is not None and any(w.any() for w in to_plain):
        yield from plain(to_plain)
        for w, p in zip(want, to_plain):
            w &= ~p
    pending = {(which, int(i), int(a)) for which, w in enumerate(want) for i, a in zip(*w.nonzero())}
    # no kept key (or an undefined query): dq 0; keys no query attends: dk, dv 0
    for which, i, a in list(pending):
        if (which == 0 and i not in entry.rows) or (which > 0 and i not in entry.attending):
            pending.discard((which, i, a))
            yield which, (i, a), _ZERO
    certified = set()
    wp = fmt.precision + 32
    while pending:
        sums = _Sums(entry, entry.at(wp), k.shape[0])
        c, c_rel = entry.factor(wp)
        for which, i, a in sorted(pending):
            value, err = sums.value(which, i, a, c, c_rel, wp)
            found = _rounding(value, err, wp, fmt)
            if found is None and (which, i, a) not in certified and _holds_zero(value, err):
                certified.add((which, i, a))
                if _zero(entry, which, i, a):
                    pending.discard((which, i, a))
                    yield which, (i, a), _ZERO
                continue
            if found is not None:
                pending.discard((which, i, a))
                yield which, (i, a), (found, value, err)
        if pending:
            wp = _refine(wp)


def _holds_zero(value, err) -> bool:
    return libmp.mpf_cmp(_abs(value), err) <= 0


def _rounding(value, err, wp: int, fmt: Format):
    """The rounding of every number within err of value, or None; at CAP_BITS bits and past, the midpoint's
    rounding where the interval excludes 0, else +0 (the value presumed nonzero and below what it sums by then)."""
    found = decide(value, err, 0, fmt)
    if found is not None or wp < CAP_BITS:
        return found
    return (libmp.fzero, False) if _holds_zero(value, err) else decide(value, libmp.fzero, 0, fmt)


def _zero(entry: _Entry, which, i, a) -> bool:
    if which == 0:
        return _dq_zero(entry.rows[i], entry.K, a, entry.derivative)
    if which == 1:
        return _sums_zero(entry, i, a, entry.Q, with_dp=True)
    return _sums_zero(entry, i, a, entry.G, with_dp=False)


def _ints(values: dict, shape: tuple):
    """{(r, j): libmp value} as (an object array of Python ints M, E) with each value M[r, j] 2**E exactly (0 where
    absent): the exact sums below are then integer matrix products."""
    out = np.zeros(shape, object)
    live = [(at, x) for at, x in values.items() if x[1]]
    if not live:
        return out, 0
    low = min(x[2] for _, x in live)
    for at, (sign, man, exp, _) in live:
        out[at] = (-1 if sign else 1) * (int(man) << (exp - low))
    return out, low


def _exact_values(a: np.ndarray) -> list:
    return [[exact_mpf(x) for x in row] for row in a]


def _inputs(a: np.ndarray) -> tuple:
    """An exact float64 array as `_ints` gives it."""
    return _ints({at: exact_mpf(x) for at, x in np.ndenumerate(a)}, a.shape)


class _Sums:
    """Every output of one batch entry at one precision, exact sums over the exact products of P and dS (as held at
    wp) with the inputs: dq = dS K, dk = dS^T Q, dv = P^T G (before c), and the same products of their bounds with
    |K|, |Q|, |G|; read per element by `value`."""

    def __init__(self, entry: _Entry, rows: dict, lk: int):
        lq = entry.lq
        parts = {name: {} for name in ("p", "p_err", "ds", "ds_err")}
        for i, (cols, p, p_err, ds, ds_err) in rows.items():
            for name, values in zip(parts, (p, p_err, ds, ds_err)):
                parts[name].update(((i, j), x) for j, x in zip(cols, values))
        p, p_err, ds, ds_err = (_ints(parts[name], (lq, lk)) for name in parts)
        (k, ek), (q, eq), (g, eg) = entry.ints
        self.sums = [
            ((ds[0].dot(k), ds[1] + ek), (ds_err[0].dot(abs(k)), ds_err[1] + ek)),
            ((ds[0].T.dot(q), ds[1] + eq), (ds_err[0].T.dot(abs(q)), ds_err[1] + eq)),
            ((p[0].T.dot(g), p[1] + eg), (p_err[0].T.dot(abs(g)), p_err[1] + eg)),
        ]

    def value(self, which, i, a, c, c_rel, wp):
        """(value, bound) of one output element at wp: the exact sum, its bound (the values' bounds times |input|),
        then times c (rounded, within c_rel) for dq and dk, and rounded to wp."""
        (total, e_total), (bound, e_bound) = self.sums[which]
        total = libmp.from_man_exp(int(total[i, a]), e_total)
        err = libmp.from_man_exp(int(bound[i, a]), e_bound)
        if which == 2:
            value = libmp.mpf_add(total, libmp.fzero, wp)
            return value, _add(err, _mul(_abs(value), _pow2(1 - wp)))
        value = libmp.mpf_mul(c, total, wp)
        err = _mul(_mul(_abs(c), err), _SAFE)
        return value, _add(_add(err, _mul(_abs(value), c_rel)), _mul(_abs(value), _pow2(1 - wp)))


def sink_entry(entries: list, scale, cap, fmt: Format):
    """The correct rounding of a sink's gradient dz = sum over the queries of its batch entries of dS_i,z, the sink
    the last key of each (k = 0: its score is its logit z, uncapped, and sigma = 1 there), entries as
    (q, k, v, g, keep, skip, bias); P from the capped scores. An exact 0 where every query's dS_i,z is
    (`_ds_zero`: D_i = 0), else presumed nonzero as the other outputs are."""
    found = [_Entry(q, k, v, g, keep, scale, cap, skip, bias) for q, k, v, g, keep, skip, bias in entries]
    sink = entries[0][1].shape[0] - 1
    rows_of = [[(i, row[0].index(sink)) for i, row in e.rows.items() if sink in row[0]] for e in found]
    if all(_ds_zero(e.rows[i], sink) for e, rows in zip(found, rows_of) for i, _ in rows):
        return _ZERO
    wp = fmt.precision + 32
    while True:
        terms, bounds = [], []
        for e, rows in zip(found, rows_of):
            at = e.at(wp)
            for i, place in rows:
                terms.append(at[i][3][place])
                bounds.append(at[i][4][place])
        value = libmp.mpf_sum(terms, wp)
        err = _add(_sum_up(bounds), _mul(_abs(value), _pow2(1 - wp)))
        rounded = _rounding(value, err, wp, fmt)
        if rounded is not None:
            return rounded, value, err
        wp = _refine(wp)
