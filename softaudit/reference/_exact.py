"""Tier C, the ground truth: mpmath at rising precision until the rounding of each result is decided (Ziv).

Works on one row at a time with mpmath's libmp functions, which take the precision as an argument, so no mpmath
context is ever changed. Inputs are exact libmp values. Each elementary function is assumed accurate to 4 ulp at
the working precision `wp` (mpmath computes with guard bits and then rounds); the bounds below carry that factor.
The results that can be rational, and so could sit exactly on a rounding boundary where refining never ends, are
found first and rounded exactly: softmax of a row whose kept entries are all equal is 1/k. Attention's rows are in
_exact_attention.py, on the decisions here.
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
