"""Tier C, the ground truth: mpmath at rising precision until the rounding of each result is decided (Ziv).

Works on one row at a time with mpmath's libmp functions, which take the precision as an argument, so no mpmath
context is ever changed. Inputs are exact libmp values. Each elementary function is assumed accurate to 4 ulp at
the working precision `wp` (mpmath computes with guard bits and then rounds); the bounds below carry that factor.
The results that can be rational, and so could sit exactly on a rounding boundary where refining never ends, are
found first and rounded exactly: softmax of a row whose kept entries are all equal is 1/k; attention whose score
groups all have the same mean value is that mean (Lindemann-Weierstrass: otherwise the result is transcendental).
"""

from __future__ import annotations

import math

from mpmath import libmp

from ._formats import Format, round_fraction, round_mpf
from ._rational import Fraction

_ROUND_UP = libmp.round_up
_MAX_PREC = 1 << 17
Rounded = tuple[tuple, bool]  # a rounded magnitude and its sign
Entry = tuple[Rounded, tuple, tuple]  # the rounding, and the approximation (value, error bound) that decided it


class PrecisionExhausted(ArithmeticError):
    """Rounding stayed undecided up to _MAX_PREC bits (only reachable with adversarial cancellation)."""


def _pow2(e: int) -> tuple:
    return libmp.from_man_exp(1, e)


def _max(values: list[tuple]) -> tuple:
    top = values[0]
    for v in values[1:]:
        if libmp.mpf_cmp(v, top) > 0:
            top = v
    return top


def decide(value: tuple, err: tuple, sign: int, fmt: Format) -> Rounded | None:
    """The rounding of every number within err of value, or None when they do not all round alike.

    `sign` is the known sign of the exact result (+1, -1) or 0 when unknown; it decides the sign of a zero.
    """
    lo = libmp.mpf_sub(value, err, 0)
    hi = libmp.mpf_add(value, err, 0)
    if libmp.mpf_sign(lo) <= 0 <= libmp.mpf_sign(hi):
        if lo == hi == libmp.fzero:
            return libmp.fzero, False
        if sign == 0:
            return None
        widest = hi if libmp.mpf_cmp(hi, libmp.mpf_abs(lo)) >= 0 else libmp.mpf_abs(lo)
        rounded, _ = round_mpf(widest, False, fmt)
        return (libmp.fzero, sign < 0) if rounded == libmp.fzero else None
    r_lo = round_mpf(lo, False, fmt)
    r_hi = round_mpf(hi, False, fmt)
    return r_lo if r_lo == r_hi else None


def _spacing_exp(base: Fraction, fmt: Format) -> int:
    """The exponent of fmt's spacing at |base| (base != 0)."""
    num, den = abs(base.numerator), base.denominator
    binade = num.bit_length() - den.bit_length()
    if (num << max(0, -binade)) < (den << max(0, binade)):
        binade -= 1
    return max(binade, fmt.emin) - (fmt.precision - 1)


def _dyadic(value: Fraction) -> bool:
    """The denominator is a power of two."""
    return value.denominator & (value.denominator - 1) == 0


def _to_mpf(value: Fraction, prec: int) -> tuple[tuple, tuple]:
    """A rational as a libmp value at `prec` bits (exact when dyadic) and the bound of its rounding error."""
    dyadic = _dyadic(value)
    if dyadic:  # exact at any size, or a base within 2**-prec of a boundary could never be decided
        prec = max(prec, abs(value.numerator).bit_length())
    approx = libmp.from_rational(value.numerator, value.denominator, prec)
    exact = dyadic and approx[3] <= prec
    return approx, libmp.fzero if exact else libmp.mpf_abs(libmp.mpf_mul(approx, _pow2(1 - prec)))


def _off_grid_gap(base: Fraction, eighth: int) -> int:
    """g with 2**g at most the distance from base, off the quarter-spacing grid 2**(eighth + 1), to any rounding
    boundary (every boundary is on that grid).

    Dyadic base: both are multiples of 2**b, b the exponent of base's lowest bit, and they differ: at least 2**b.
    Otherwise base = n/d with d not a power of two: |n/d - k 2**q| >= 2**min(0, q) / d, a nonzero integer over d 2**-q.
    """
    num, den = base.numerator, base.denominator
    if _dyadic(base):
        return ((num & -num).bit_length() - 1) - (den.bit_length() - 1)
    return min(0, eighth + 1) - den.bit_length()


def decide_sum(base: Fraction, corr: tuple, err: tuple, sign: int, fmt: Format) -> Entry | None:
    """The rounding of base + c for every c within err of corr, base exact; sign is c's sign when base == 0.

    When base is a multiple of a quarter of fmt's spacing at base (a representable number, a rounding boundary,
    or between them on that grid) and |c| is below an eighth of the spacing, no rounding boundary other than base
    itself lies between base and base + c (the others are at least a quarter spacing away), so base + c rounds
    like base +- spacing/8: c may be e**-500000 and no precision is needed to see it. A base off that grid (a
    log-softmax t = x - m has the bits of both) can sit closer than |c| to a boundary. It is decided without
    forming c when |c| is below base's own distance to any boundary (`_off_grid_gap`), else from base -+ |c|
    as exact rationals, else by the general route, whose precision only has to resolve that distance.
    """
    if base == 0:
        found = decide(corr, err, sign, fmt)
        return None if found is None else (found, corr, err)
    eighth = _spacing_exp(base, fmt) - 3
    reach = libmp.mpf_add(libmp.mpf_abs(corr), err, 30, _ROUND_UP)  # |c| <= reach for every c
    on_grid = (base / Fraction(2) ** (eighth + 1)).denominator == 1  # a multiple of a quarter spacing
    if libmp.mpf_cmp(reach, _pow2(eighth)) < 0:
        if on_grid:
            step = Fraction(2) ** eighth
            below, above = round_fraction(base - step, fmt), round_fraction(base + step, fmt)
            if libmp.mpf_cmp(err, libmp.mpf_abs(corr)) < 0:
                found = above if libmp.mpf_sign(corr) > 0 else below
            else:
                found = below if below == above else None
        elif libmp.mpf_cmp(reach, _pow2(_off_grid_gap(base, eighth))) < 0:  # off the grid, and no boundary near
            found = round_fraction(base, fmt)
        else:  # off the grid: decided when no boundary lies within reach of base (reach is not tiny here)
            below, above = round_fraction(base - _fraction(reach), fmt), round_fraction(base + _fraction(reach), fmt)
            found = below if below == above else None
        if found is not None:
            approx, approx_err = _to_mpf(base, fmt.precision + 64)
            return found, approx, libmp.mpf_add(approx_err, reach, 30, _ROUND_UP)
        if on_grid:
            return None
    # A boundary within reach of an off-grid base is within base's own bits of it: exact base (when dyadic) + c.
    approx, approx_err = _to_mpf(base, fmt.precision + 64 + max(0, -eighth))
    value = libmp.mpf_add(approx, corr, 0)
    err = libmp.mpf_add(err, approx_err, 30, _ROUND_UP)
    found = decide(value, err, 0, fmt)
    return None if found is None else (found, value, err)


def _rational(value: Fraction, fmt: Format) -> Entry:
    approx = libmp.from_rational(value.numerator, value.denominator, 200)
    return round_fraction(value, fmt), approx, libmp.mpf_abs(libmp.mpf_mul(approx, _pow2(-199)))


def _refine(wp: int) -> int:
    wp *= 2
    if wp > _MAX_PREC:
        raise PrecisionExhausted(f"rounding undecided at {_MAX_PREC} bits")
    return wp


def softmax_row(kept: list[tuple], want: list[int], fmt: Format) -> list[Entry]:
    """Correctly rounded softmax of the kept entries of one row, at the positions `want` of `kept`."""
    top = _max(kept)
    ts = [libmp.mpf_sub(x, top, 0) for x in kept]
    if all(t == libmp.fzero for t in ts):
        share = _rational(Fraction(1, len(kept)), fmt)
        return [share for _ in want]
    done: dict[int, Entry] = {}
    wp = fmt.precision + 32
    while True:
        es = [libmp.mpf_exp(t, wp) for t in ts]
        total = libmp.mpf_sum(es, wp)
        rel = _pow2(5 - wp)  # 4 ulp (exp) + 4 ulp (sum of such terms) + 1 ulp (sum) + 1 ulp (division)
        for i in want:
            if i not in done:
                p = libmp.mpf_div(es[i], total, wp)
                err = libmp.mpf_mul(p, rel)
                found = decide(p, err, 1, fmt)
                if found is not None:
                    done[i] = found, p, err
        if len(done) == len(set(want)):
            return [done[i] for i in want]
        wp = _refine(wp)


def _log_sum(ts: list[tuple], wp: int) -> tuple[tuple, tuple]:
    """log(sum e**t) with the max t == 0, as log1p of the rest, and its error bound, at precision wp."""
    top = ts.index(libmp.fzero)
    rest = libmp.mpf_sum([libmp.mpf_exp(t, wp) for j, t in enumerate(ts) if j != top], wp)
    if rest == libmp.fzero:
        return libmp.fzero, libmp.fzero
    # log1p(s) with s' = s(1 + d) moves by at most |d| log1p(s), since s / (1 + s) <= log1p(s).
    if rest[2] + rest[3] < -2 * wp:  # s < 2**(-2 wp): log1p(s) = s(1 - s/2 + ...) is s within 2**(-2 wp)
        return rest, libmp.mpf_mul(rest, _pow2(4 - wp), 30, _ROUND_UP)
    log = libmp.mpf_log(libmp.mpf_add(libmp.fone, rest, 0), wp)
    return log, libmp.mpf_mul(log, _pow2(4 - wp), 30, _ROUND_UP)


def log_softmax_row(kept: list[tuple], want: list[int], fmt: Format) -> list[Entry]:
    """Correctly rounded log-softmax of the kept entries of one row, at the positions `want` of `kept`."""
    top = _max(kept)
    ts = [libmp.mpf_sub(x, top, 0) for x in kept]
    done: dict[int, Entry] = {}
    wp = fmt.precision + 32
    while True:
        log, log_err = _log_sum(ts, wp)
        for i in want:
            if i not in done:
                found = decide_sum(_fraction(ts[i]), libmp.mpf_neg(log), log_err, -1 if len(kept) > 1 else 0, fmt)
                if found is not None:
                    done[i] = found
        if len(done) == len(set(want)):
            return [done[i] for i in want]
        wp = _refine(wp)


def logsumexp_row(kept: list[tuple], fmt: Format) -> Entry:
    """Correctly rounded log-sum-exp of the kept entries of one row (at least one)."""
    top = _max(kept)
    ts = [libmp.mpf_sub(x, top, 0) for x in kept]
    wp = fmt.precision + 32
    while True:
        log, log_err = _log_sum(ts, wp)
        found = decide_sum(_fraction(top), log, log_err, 1 if len(kept) > 1 else 0, fmt)
        if found is not None:
            return found
        wp = _refine(wp)


def rational_scale(d: int) -> Fraction | None:
    """1/sqrt(d) as an exact rational where d is a perfect square (1, 4, 9, 16, 64, 256, ...), else None."""
    root = math.isqrt(d)
    return Fraction(1, root) if root * root == d else None


def _fraction(v: tuple) -> Fraction:
    sign, man, exp, _ = v
    value = Fraction(man) * (Fraction(2) ** exp)
    return -value if sign else value


def _rational_attention(scores: list[tuple], vs: list[list[tuple]], column: int) -> Fraction | None:
    """The exact output when it is rational: every group of equal scores has the same mean value."""
    groups: dict[tuple, list[Fraction]] = {}
    for score, row in zip(scores, vs):
        groups.setdefault(score, []).append(_fraction(row[column]))
    means = {sum(values, Fraction(0)) / len(values) for values in groups.values()}
    return means.pop() if len(means) == 1 else None


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
    """Correctly rounded attention output of one query over its kept keys (at least one), every column.

    With G the keys of the top score and base the mean of their values, o = base + sum over the others of
    e_j (v_j - base) / (|G| + sum e_j): an exact base and a correction that decide_sum can round however small.
    bias (one exact value per key, added after the softcap) and softcap (each score s becomes c tanh(s / c)) take
    `_attention_row_spec`.
    """
    scores = [libmp.mpf_sum([libmp.mpf_mul(a, b, 0) for a, b in zip(q, k)], 0) for k in ks]
    if bias is not None or softcap is not None:
        return _attention_row_spec(scores, vs, scale, d, fmt, bias, softcap)
    if scale is not None and libmp.mpf_sign(scale) <= 0:  # the groups are those of c * score: c s = (-c)(-s)
        scores = [libmp.fzero] * len(scores) if scale == libmp.fzero else [libmp.mpf_neg(s) for s in scores]
        scale = libmp.mpf_neg(scale)
    top = _max(scores)
    group = [j for j, s in enumerate(scores) if s == top]
    others = [j for j, s in enumerate(scores) if s != top]
    ncol = len(vs[0])
    bases = [sum((_fraction(vs[j][c]) for j in group), Fraction(0)) / len(group) for c in range(ncol)]
    done: dict[int, Entry] = {}
    for c in range(ncol):
        exact = _rational_attention(scores, vs, c)
        if exact is not None:
            done[c] = _rational(exact, fmt)
    gaps = [libmp.mpf_sub(scores[j], top, 0) for j in others]
    diffs = {c: [_fraction(vs[j][c]) - bases[c] for j in others] for c in range(ncol) if c not in done}
    wp = fmt.precision + 32
    while len(done) < ncol:
        factor = scale
        if factor is None:
            factor = libmp.mpf_div(libmp.fone, libmp.mpf_sqrt(libmp.from_int(d), wp + 12), wp + 12)
        ts = [libmp.mpf_mul(g, factor, wp) for g in gaps]
        # t has relative error <= 2**(1 - wp); e**t then <= 4 ulp + |t| 2**(1 - wp) (1.01). With |t| < 2**top_mag
        # (scores can pass float64's range, so this stays in mpmath): eta <= 2**(2 - wp) + 2**(top_mag + 2 - wp).
        top_mag = max((t[2] + t[3] for t in ts if t != libmp.fzero), default=-wp)
        if top_mag + 22 > wp:  # eta would exceed 2**-20
            wp = _refine(wp)
            continue
        eta = libmp.mpf_add(_pow2(2 - wp), _pow2(top_mag + 2 - wp), 30, _ROUND_UP)
        _decide_columns(ts, eta, len(group), bases, diffs, done, fmt, wp)
        if len(done) < ncol:
            wp = _refine(wp)
    return [done[c] for c in range(ncol)]


def _decide_columns(ts, eta, group: int, bases, diffs: dict, done: dict, fmt: Format, wp: int) -> None:
    """Round each column not yet in `done` that the bound decides: o_c = base_c + sum_j e**t_j (v_jc - base_c) /
    (group + sum_j e**t_j), every e**t_j within relative eta, the error 1.02 (2 eta + 3 * 2**-wp) of the terms'
    magnitude over the total (rounded up)."""
    es = [libmp.mpf_exp(t, wp) for t in ts]
    total = libmp.mpf_add(libmp.from_int(group), libmp.mpf_sum(es, wp), wp)
    bound = libmp.mpf_mul(
        libmp.mpf_add(libmp.mpf_shift(eta, 1), libmp.from_man_exp(3, -wp), 30, _ROUND_UP),
        libmp.from_float(1.02),
        30,
        _ROUND_UP,
    )
    for c, column in diffs.items():
        if c in done:
            continue
        terms = [libmp.mpf_mul(e, libmp.from_rational(x.numerator, x.denominator, wp), 0) for e, x in zip(es, column)]
        corr = libmp.mpf_div(libmp.mpf_sum(terms, 0), total, wp)
        size = libmp.mpf_sum(terms, 30, _ROUND_UP, absolute=True)
        err = libmp.mpf_mul(libmp.mpf_div(size, total, 30, _ROUND_UP), bound, 30, _ROUND_UP)
        found = decide_sum(bases[c], corr, err, 0, fmt)
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
        size = libmp.mpf_add(libmp.mpf_abs(libmp.mpf_mul(factor, r, 30)), libmp.mpf_abs(b), 30, _ROUND_UP)
        if cap is not None:
            size = libmp.mpf_add(size, libmp.mpf_shift(cap, 1), 30, _ROUND_UP)
        bounds.append(libmp.mpf_mul(size, _pow2(8 - wp), 30, _ROUND_UP))
    return found, bounds


def _attention_row_spec(
    raw: list[tuple], vs: list[list[tuple]], scale: tuple | None, d: int, fmt: Format, bias, softcap
) -> list[Entry]:
    """attention_row for scores f_j = cap(c raw_j) + b_j (cap: c tanh(s / c), or none). Keys with the same raw score
    and bias have the same f; G is the group of the largest f (found at 64 bits: any group would do, the largest
    keeps every e_j small). Each f_j is computed at wp + 20 bits within E_j = 2**(8 - wp - 20) (|c raw_j| + 2 cap +
    |b_j|), so t_j = f_j - f_top is within E_j + E_top and e**t_j within eta = 2**(2 - wp) + 1.01 (E_j + E_top)
    relative. Rational outputs: every kept key in one group (the mean of their values), or, with a rational scale
    and no softcap, every group's mean value equal over equal exact scores (_rational_attention)."""
    bias = bias or [libmp.fzero] * len(raw)
    keys = list(zip(raw, bias))
    ncol = len(vs[0])
    done: dict[int, Entry] = {}
    rational_scores = None
    if softcap is None and scale is not None:  # exact scores c raw + b: equal scores are found exactly
        rational_scores = [libmp.mpf_add(libmp.mpf_mul(scale, r, 0), b, 0) for r, b in keys]
    elif len(set(keys)) == 1:
        rational_scores = [libmp.fzero] * len(keys)
    if rational_scores is not None:
        for c in range(ncol):
            exact = _rational_attention(rational_scores, vs, c)
            if exact is not None:
                done[c] = _rational(exact, fmt)
    if len(done) == ncol:
        return [done[c] for c in range(ncol)]
    cap = None if softcap is None else libmp.from_float(softcap)

    def scores_at(wp):
        return _spec_scores(keys, scale, d, cap, wp)

    first, _ = scores_at(64)
    top = max(range(len(keys)), key=lambda j: libmp.to_float(first[j]))
    group = [j for j, key in enumerate(keys) if key == keys[top]]
    others = [j for j, key in enumerate(keys) if key != keys[top]]
    bases = [sum((_fraction(vs[j][c]) for j in group), Fraction(0)) / len(group) for c in range(ncol)]
    diffs = {c: [_fraction(vs[j][c]) - bases[c] for j in others] for c in range(ncol) if c not in done}
    wp = fmt.precision + 32
    while len(done) < ncol:
        f, bounds = scores_at(wp + 20)
        ts = [libmp.mpf_sub(f[j], f[top], wp) for j in others]
        worst = max(bounds, key=lambda e: libmp.to_float(e))
        spread = libmp.mpf_mul(libmp.mpf_shift(worst, 1), libmp.from_float(1.01), 30, _ROUND_UP)
        top_mag = max((t[2] + t[3] for t in ts if t != libmp.fzero), default=-wp)
        eta = libmp.mpf_add(libmp.mpf_add(_pow2(2 - wp), _pow2(top_mag + 2 - wp), 30, _ROUND_UP), spread, 30, _ROUND_UP)
        if top_mag + 22 > wp or libmp.mpf_cmp(eta, _pow2(-20)) > 0:
            wp = _refine(wp)
            continue
        _decide_columns(ts, eta, len(group), bases, diffs, done, fmt, wp)
        if len(done) < ncol:
            wp = _refine(wp)
    return [done[c] for c in range(ncol)]


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
            libmp.mpf_mul(libmp.from_int(4), worst, 30, _ROUND_UP),
            libmp.mpf_mul(
                libmp.mpf_add(libmp.mpf_abs(value), libmp.from_int(4), 30, _ROUND_UP), _pow2(1 - wp), 30, _ROUND_UP
            ),
            30,
            _ROUND_UP,
        )
        found = decide(value, err, 0, fmt)
        if found is not None:
            return found, value, err
        wp = _refine(wp)
