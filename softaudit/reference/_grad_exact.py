"""Tier C of the gradients: exact forms of softmax weights, rounded at rising precision (Ziv), exact zeros found first.

Every gradient element is a sum of terms w * F, w an exact rational weight and F one of two forms of a row of
softmax weights p_j = e**(c t_j) / s over kept entries with exact rational keys t_j <= 0 (max 0):

* mean(a) = sum_j p_j a_j                          (logsumexp_grad, log_softmax_grad, dV)
* cov(a, b) = sum_j p_j a_j (b_j - sum_l p_l b_l)  (softmax_grad, dS, dQ, dK)

with exact rational a, b. A form is N / s**k (k = 1, 2), N a sum of exponentials with rational coefficients. Keeping
only the top key group (t = 0, n0 entries) gives the rational base N0 / n0**k; the rest is the correction
corr = M / (n0**k s**k), M = n0**k N - N0 s**k, a sum over keys < 0 that is formed with its coefficients grouped by
exponent, exactly, so that it keeps its relative accuracy however small it is (e**-500000 next to a base on a
rounding boundary is decided by its sign, as the forward's `decide_sum` does).

Exactness (Lindemann-Weierstrass: e**a for distinct algebraic a are linearly independent over the algebraic numbers):
a form is zero iff every grouped coefficient of N is zero, and rational iff every grouped coefficient of M is zero.
Both are decided in rational arithmetic before or during refinement, so the loop ends on exact zeros and on rational
values sitting on rounding boundaries. Otherwise the value is irrational and refining decides it.
"""

from __future__ import annotations

import dataclasses

from mpmath import libmp

from ._exact import Entry, _rational, _refine, decide, decide_sum, rational_scale
from ._formats import Format
from ._rational import Fraction

_UP = libmp.round_up
#: Expanding a dense cov form costs (number of key groups)**2 rational operations: below this it is done at once,
#: above it only when refinement passes _EXPAND_AT bits (the value is then within 2**-_EXPAND_AT of a boundary).
_CHEAP = 1 << 14
_EXPAND_AT = 600


def _mpf(x: Fraction, prec: int = 0) -> tuple:
    """A rational as a libmp value: exact when dyadic (prec 0 is only for dyadic values)."""
    if prec == 0:
        return libmp.from_man_exp(x.numerator, -(x.denominator.bit_length() - 1))
    return libmp.from_rational(x.numerator, x.denominator, prec)


def _dyadic(x: Fraction) -> bool:
    return x.denominator & (x.denominator - 1) == 0


@dataclasses.dataclass(frozen=True)
class Biased:
    """A key whose exponent is c t + b: a score c q.k plus a bias b, c = 1/sqrt(d) irrational (d not a square), t and
    b exact rationals. Two keys have one exponent only when both parts agree (c is irrational), so grouping by
    (t, b) is grouping by exponent and Lindemann-Weierstrass decides zeros as for plain keys. Keys add as exponents
    do; they compare by the exact value of c t + b (`d` is the same for every key of a row)."""

    t: Fraction
    b: Fraction
    d: int = dataclasses.field(compare=False)

    def __add__(self, other: Biased) -> Biased:
        return Biased(self.t + other.t, self.b + other.b, self.d)

    def __sub__(self, other: Biased) -> Biased:
        return Biased(self.t - other.t, self.b - other.b, self.d)

    def __bool__(self) -> bool:
        return bool(self.t or self.b)

    def __lt__(self, other: Biased) -> bool:
        """c t1 + b1 < c t2 + b2, decided exactly: the sign of x / sqrt(d) + y (x, y the differences) is theirs where
        they agree, else the sign of the larger of x**2 / d and y**2 (never equal: sqrt(d) is irrational)."""
        x, y = other.t - self.t, other.b - self.b
        if x >= 0 and y >= 0:
            return bool(x or y)
        if x <= 0 and y <= 0:
            return False
        return (x * x / self.d > y * y) == (x > 0)

    def __gt__(self, other: Biased) -> bool:
        return other < self


class Scale:
    """A positive real c multiplying exponents or results: rational (a given scale, 1 for rows) or 1/sqrt(d)."""

    def __init__(self, rational: Fraction | None = None, d: int | None = None):
        if rational is None:
            rational = rational_scale(d)
        self.rational = rational
        self.d = d

    def times(self, key, wp: int) -> tuple[tuple, int | None]:
        """The exponent of a key at precision wp: c * key (a Fraction), or c t + b (a `Biased` key); and None where
        it is exact, else m with its error below 2**(m + 1 - wp) (m the magnitude of the inexact product)."""
        bias = None
        if isinstance(key, Biased):
            key, bias = key.t, key.b
        if self.rational is not None:
            value = self.rational * key + (bias or 0)
            if _dyadic(value):
                return _mpf(value), None
            product = _mpf(value, wp)
        else:
            c = libmp.mpf_div(libmp.fone, libmp.mpf_sqrt(libmp.from_int(self.d), wp + 12), wp + 12)
            product = libmp.mpf_mul(c, _mpf(key), wp)
            if bias is not None:  # b is dyadic: added exactly, so the error stays the product's
                value = libmp.mpf_add(product, _mpf(bias), 0)
                return value, (product[2] + product[3] if product != libmp.fzero else None)
        return product, (product[2] + product[3] if product != libmp.fzero else -wp)

    def value(self, wp: int) -> tuple:
        if self.rational is not None:
            return _mpf(self.rational) if _dyadic(self.rational) else _mpf(self.rational, wp)
        return libmp.mpf_div(libmp.fone, libmp.mpf_sqrt(libmp.from_int(self.d), wp + 12), wp)


ONE = Scale(Fraction(1))


def group(keys: list[Fraction], values: list[Fraction]) -> dict[Fraction, Fraction]:
    """sum_j values_j e**(c keys_j) as {key: coefficient}, zero coefficients dropped."""
    out: dict[Fraction, Fraction] = {}
    for k, v in zip(keys, values):
        if v:
            out[k] = out.get(k, 0) + v
    return {k: v for k, v in out.items() if v}


def _times(p: dict, q: dict) -> dict:
    out: dict[Fraction, Fraction] = {}
    for k1, v1 in p.items():
        for k2, v2 in q.items():
            out[k1 + k2] = out.get(k1 + k2, 0) + v1 * v2
    return out


def combine(a: Fraction, p: dict, b: Fraction, q: dict) -> dict:
    """a p + b q, zero coefficients dropped."""
    out = {k: a * v for k, v in p.items()}
    for k, v in q.items():
        out[k] = out.get(k, 0) + b * v
    return {k: v for k, v in out.items() if v}


class Weights:
    """The softmax weights of one row: exact keys t_j <= 0 with max 0, exponents c t_j (c > 0)."""

    def __init__(self, keys: list[Fraction], scale: Scale = ONE):
        self.keys = keys
        self.scale = scale
        self.zero = keys[0] - keys[0]  # the top key's (keys are exponents less the largest)
        self.counts = group(keys, [Fraction(1)] * len(keys))  # s as {key: count}
        self.n0 = self.counts[self.zero]
        self._exps: dict[int, tuple[dict, tuple]] = {}

    def exps(self, wp: int, keys=None) -> tuple[dict, tuple] | None:
        """{key: e**(c key)} at wp for the row's keys (or the given ones) and eta, a bound of their relative
        error; None when eta would exceed 2**-20 (refine)."""
        if keys is None and wp in self._exps:
            return self._exps[wp]
        keys = self.counts if keys is None else keys
        out, top_mag, inexact = {}, -wp, False
        for key in keys:
            t, mag = self.scale.times(key, wp)
            if mag is not None:
                inexact = True
                top_mag = max(top_mag, mag)
            out[key] = t
        # mpmath's exp is within 4 ulp; an inexact exponent (error below 2**(m + 1 - wp)) adds 2**(m + 1 - wp) 1.01.
        if inexact and top_mag + 22 > wp:
            return None
        eta = libmp.from_man_exp(1, 2 - wp)
        if inexact:
            eta = libmp.mpf_add(eta, libmp.from_man_exp(3, top_mag + 1 - wp), 30, _UP)
        result = {key: libmp.mpf_exp(t, wp) for key, t in out.items()}, eta
        if keys is self.counts:
            self._exps[wp] = result
        return result


def _evaluate(poly: dict, exps: dict, eta: tuple, wp: int) -> tuple[tuple, tuple]:
    """sum coef e**(c key) and a bound of its error: eta on each exponential and 2**(1 - wp) for the sum."""
    terms = [libmp.mpf_mul(_mpf(v), exps[k], 0) for k, v in poly.items()]
    size = libmp.mpf_sum(terms, 30, _UP, absolute=True)
    value = libmp.mpf_sum(terms, wp)
    rel = libmp.mpf_add(libmp.mpf_mul(eta, libmp.from_float(1.01), 30, _UP), libmp.from_man_exp(1, 1 - wp), 30, _UP)
    return value, libmp.mpf_mul(size, rel, 30, _UP)


class Form:
    """mean(a) or cov(a, b) over a row's weights, from sums grouped by key (`group`): mean takes
    N = sum e a, cov the three sums Sab = sum e a b, Sa = sum e a, Sb = sum e b (N = Sab s - Sa Sb)."""

    def __init__(self, w: Weights, mean: dict | None = None, cov: tuple[dict, dict, dict] | None = None):
        self.w = w
        self.k = 1 if cov is None else 2
        self.numerator = mean  # for cov: expanded on demand
        self._n_parts = cov
        n0 = Fraction(w.n0)
        self.d0 = n0**self.k
        self.n0_value = self._top(self.k)
        self.base = self.n0_value / self.d0
        self.correction: dict | None = None  # M, once expanded
        self.rho2 = Fraction(0)
        cost = (
            0 if cov is None else len(self._n_parts[0]) * len(w.counts) + len(self._n_parts[1]) * len(self._n_parts[2])
        )
        if cost <= _CHEAP:
            self.expand()

    def _top(self, k) -> Fraction:
        zero = self.w.zero
        if k == 1:
            return self.numerator.get(zero, Fraction(0))
        sab, sa, sb = self._n_parts
        return sab.get(zero, 0) * self.w.n0 - sa.get(zero, 0) * sb.get(zero, 0)

    def expand(self, full: bool = False):
        """The correction numerator M = n0**k N - N0 s**k with its coefficients grouped by exponent.

        For cov, s**2 = n0**2 + 2 n0 rho + rho**2 (rho: the keys below 0): the part linear in rho is grouped at once,
        and -N0 rho**2 (one sign, so it keeps its relative accuracy) is left to evaluate as a square unless `full`
        (len(rho)**2 operations), which only refinement past _EXPAND_AT bits asks for: it is needed only where a
        grouped coefficient cancels one of rho**2 exactly.
        """
        if self.correction is None:
            if self.numerator is None:
                sab, sa, sb = self._n_parts
                self.numerator = combine(Fraction(1), _times(sab, self.w.counts), Fraction(-1), _times(sa, sb))
            n0, top = self.w.n0, self.n0_value
            rho = {k: v for k, v in self.w.counts.items() if k}
            s_part = combine(
                Fraction(n0**self.k), {self.w.zero: Fraction(1)}, Fraction(self.k * n0 ** (self.k - 1)), rho
            )
            self.correction = combine(self.d0, self.numerator, -top, s_part)
            self.correction.pop(self.w.zero, None)  # cancels exactly
            self.rho2 = -top if self.k == 2 and rho else Fraction(0)
        if full and self.rho2:
            rho = {k: v for k, v in self.w.counts.items() if k}
            self.correction = combine(Fraction(1), self.correction, self.rho2, _times(rho, rho))
            self.rho2 = Fraction(0)

    def exact(self) -> bool:
        """Expanded, and the correction is exactly 0: the value is the rational base."""
        return self.correction == {} and not self.rho2

    def is_zero(self) -> bool:
        """The exact value is 0: every grouped coefficient of N is 0 (Lindemann-Weierstrass)."""
        if self.n0_value:
            return False
        if self.numerator is None and self._second_coefficient():
            return False  # a certificate without expanding: see _second_coefficient
        self.expand()
        return not self.numerator

    def _second_coefficient(self) -> Fraction:
        """The coefficient of N at the second-largest key t1 (only the pairs (0, t1) and (t1, 0) sum to it)."""
        keys = sorted(self.w.counts, reverse=True)
        if len(keys) < 2:
            return Fraction(0)
        t1, zero = keys[1], self.w.zero
        sab, sa, sb = self._n_parts
        n = self.w.counts
        return (
            sab.get(zero, 0) * n[t1]
            + sab.get(t1, 0) * n[zero]
            - sa.get(zero, 0) * sb.get(t1, 0)
            - sa.get(t1, 0) * sb.get(zero, 0)
        )

    def corr(self, wp: int) -> tuple[tuple, tuple] | None:
        """The value minus base at wp, with an error bound; None to refine."""
        found = self.w.exps(wp)
        if found is None:
            return None
        exps, eta = found
        s, s_err = _evaluate(self.w.counts, exps, eta, wp)
        if self.correction is not None:
            if self.exact():
                return libmp.fzero, libmp.fzero
            inside = all(k in exps for k in self.correction)
            m_exps = (exps, eta) if inside else self.w.exps(wp, self.correction)
            if m_exps is None:
                return None
            m, m_err = _evaluate(self.correction, *m_exps, wp)
            if self.rho2:  # + rho2 rho**2, rho within rel of itself: 2.01 rel relative
                rho, rho_err = _evaluate({k: v for k, v in self.w.counts.items() if k}, exps, eta, wp)
                square = libmp.mpf_mul(_mpf(self.rho2), libmp.mpf_mul(rho, rho, wp), wp)
                rel = libmp.mpf_add(libmp.mpf_div(rho_err, rho, 30, _UP), libmp.from_man_exp(1, 2 - wp), 30, _UP)
                m = libmp.mpf_add(m, square, wp)
                m_err = libmp.mpf_add(
                    m_err,
                    libmp.mpf_mul(libmp.mpf_abs(square), libmp.mpf_mul(rel, libmp.from_float(2.02), 30, _UP), 30, _UP),
                    30,
                    _UP,
                )
                m_err = libmp.mpf_add(
                    m_err, libmp.mpf_mul(libmp.mpf_abs(m), libmp.from_man_exp(1, 1 - wp), 30, _UP), 30, _UP
                )
            den = libmp.mpf_mul(_mpf(self.d0), libmp.mpf_pow_int(s, self.k, wp), wp)
            rel_den = libmp.mpf_add(
                libmp.mpf_mul(libmp.from_int(self.k), libmp.mpf_div(s_err, s, 30, _UP), 30, _UP),
                libmp.from_man_exp(1, 2 - wp),
                30,
                _UP,
            )
            value = libmp.mpf_div(m, den, wp)
        else:  # cov not yet expanded: N = Sab s - Sa Sb directly, minus the base
            sab, sa, sb = (_evaluate(p, exps, eta, wp) for p in self._n_parts)
            m = libmp.mpf_sub(libmp.mpf_mul(sab[0], s, wp), libmp.mpf_mul(sa[0], sb[0], wp), wp)
            sizes = [_evaluate({k: abs(v) for k, v in p.items()}, exps, eta, wp)[0] for p in self._n_parts]
            # |Sx - Sx^| <= eta' |Sx|_abs for each sum, so |N - N^| <= 2.01 eta' (|Sab| s + |Sa| |Sb|) + roundings.
            rel = libmp.mpf_add(libmp.mpf_div(s_err, s, 30, _UP), libmp.from_man_exp(1, 3 - wp), 30, _UP)
            big = libmp.mpf_add(
                libmp.mpf_mul(sizes[0], s, 30, _UP), libmp.mpf_mul(sizes[1], sizes[2], 30, _UP), 30, _UP
            )
            m_err = libmp.mpf_mul(libmp.mpf_mul(big, rel, 30, _UP), libmp.from_float(2.02), 30, _UP)
            den = libmp.mpf_mul(s, s, wp)
            rel_den = libmp.mpf_add(
                libmp.mpf_mul(libmp.from_int(2), libmp.mpf_div(s_err, s, 30, _UP), 30, _UP),
                libmp.from_man_exp(1, 2 - wp),
                30,
                _UP,
            )
            value = libmp.mpf_sub(libmp.mpf_div(m, den, wp), _mpf(self.base, wp), wp)
            base_err = libmp.mpf_mul(_mpf(abs(self.base), wp), libmp.from_man_exp(1, 1 - wp), 30, _UP)
            m_err = libmp.mpf_add(
                m_err, libmp.mpf_mul(libmp.mpf_abs(m), libmp.from_man_exp(1, 1 - wp), 30, _UP), 30, _UP
            )
        # (m +- m_err) / (den (1 +- rel_den)): error <= (m_err + |m| rel_den) / den * 1.01, plus the division's rounding
        err = libmp.mpf_add(m_err, libmp.mpf_mul(libmp.mpf_abs(m), rel_den, 30, _UP), 30, _UP)
        err = libmp.mpf_mul(libmp.mpf_div(err, den, 30, _UP), libmp.from_float(1.01), 30, _UP)
        err = libmp.mpf_add(err, libmp.mpf_mul(libmp.mpf_abs(value), libmp.from_man_exp(1, 2 - wp), 30, _UP), 30, _UP)
        if self.correction is None:
            err = libmp.mpf_add(err, base_err, 30, _UP)
        return value, err


_ZERO_ENTRY = ((libmp.fzero, False), libmp.fzero, libmp.fzero)


def decide_terms(terms: list[tuple[Fraction, Form]], factor: Scale, fmt: Format) -> Entry:
    """The correct rounding of factor * sum w F over terms (w, F).

    Exact zeros first (every term's weight or form is 0): +0. Then refinement; a form whose base may sit on a
    boundary is expanded once refinement passes _EXPAND_AT bits, so that its correction is exact in structure.
    """
    terms = [(w, f) for w, f in terms if w and not f.is_zero()]
    if not terms:
        return _ZERO_ENTRY
    base = sum((w * f.base for w, f in terms), Fraction(0))
    wp = fmt.precision + 32
    while True:
        if wp > _EXPAND_AT:
            for _, f in terms:
                f.expand(full=True)
        # every form exact: the value is the rational base (times c); an irrational c times a nonzero rational
        # (base != 0 here: a zero form was dropped) goes on to plain refinement
        if all(f.correction is not None and f.exact() for _, f in terms) and factor.rational is not None:
            return _rational(factor.rational * base, fmt)
        parts = [f.corr(wp) for _, f in terms]
        if any(p is None for p in parts):
            wp = _refine(wp)
            continue
        corr = libmp.mpf_sum([libmp.mpf_mul(_mpf(w), v, 0) for (w, _), (v, _) in zip(terms, parts)], wp)
        err = libmp.mpf_sum([libmp.mpf_mul(_mpf(abs(w)), e, 30, _UP) for (w, _), (_, e) in zip(terms, parts)], 30, _UP)
        err = libmp.mpf_add(err, libmp.mpf_mul(libmp.mpf_abs(corr), libmp.from_man_exp(1, 1 - wp), 30, _UP), 30, _UP)
        if factor.rational is not None:
            c = factor.rational
            cc = _mpf(c) if _dyadic(c) else _mpf(c, wp + 8)
            scaled = libmp.mpf_mul(cc, corr, wp)
            # c as rounded (2**(-wp - 7)) and the product rounded (2**-wp): 2**(1 - wp) |c corr| covers both
            bound = libmp.mpf_add(
                libmp.mpf_mul(libmp.mpf_abs(cc), err, 30, _UP),
                libmp.mpf_mul(libmp.mpf_abs(scaled), libmp.from_man_exp(1, 1 - wp), 30, _UP),
                30,
                _UP,
            )
            found = decide_sum(c * base, scaled, libmp.mpf_mul(bound, libmp.from_float(1.01), 30, _UP), 0, fmt)
        else:
            total = libmp.mpf_add(_mpf(base, wp + 8), corr, wp + 8)
            c = factor.value(wp + 8)
            value = libmp.mpf_mul(c, total, wp)
            # c within 2**(-wp - 7), base within 2**(-wp - 7), products and sum rounded: 2**(3 - wp) |value| covers them
            bound = libmp.mpf_add(
                libmp.mpf_mul(c, err, 30, _UP),
                libmp.mpf_mul(libmp.mpf_abs(value), libmp.from_man_exp(1, 3 - wp), 30, _UP),
                30,
                _UP,
            )
            found = decide(value, bound, 0, fmt)
            found = None if found is None else (found, value, bound)
        if found is not None:
            return found
        wp = _refine(wp)
