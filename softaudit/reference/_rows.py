"""The row kinds (softmax, log-softmax, log-sum-exp; masked softmax is softmax with entries removed).

Rows arrive as a 2-D float64 array (one row per line, every row defined: at least one kept entry, no NaN or +inf
among the kept ones) and a mask of removed entries. Each tier returns an approximation hi + lo with an absolute
error bound; `decide_arrays` keeps what it can round and the rest goes down a tier. The bounds are derived in
docs/reference.md. With m the row's max at its first position `top`, every tier sums
rest = sum of e**(x_j - m) over the kept j != top, so s = 1 + rest and log s = log1p(rest) keep their relative
accuracy when one entry dominates (Blanchard, Higham & Higham 2021).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import _dd
from ._dd import TINY, U

#: Assumed relative error bounds of numpy's float64 exp and log1p (64 ulp; glibc and numpy's SIMD code are
#: within 4 ulp, and tests/reference/test_dd.py checks this machine). Only tier A relies on them.
LIBM_EXP_REL = 2.0**-46
LIBM_LOG1P_REL = 2.0**-46
_SECOND_ORDER = 1 + 2.0**-30  # covers the products of (1 + d) factors, every d below 2**-40

KINDS = ("softmax", "log_softmax", "logsumexp")


@dataclasses.dataclass
class Approx:
    """hi + lo approximates the exact result within err; sign is its known sign (0: unknown). below: None, or where
    the exact result is known to be nonzero and below 2**-1075 in magnitude (too small for hi, lo and err to
    say): it rounds to the zero of its sign in every format."""

    hi: np.ndarray
    lo: np.ndarray
    err: np.ndarray
    sign: np.ndarray | float
    below: np.ndarray | None = None


def _row_max(x, removed):
    """x with removed entries at -inf, each row's max and its first position, row indices and kept counts."""
    xk = np.where(removed, -np.inf, x) if removed.any() else x
    top = xk.argmax(axis=1)
    rows = np.arange(len(x))
    kept = x.shape[1] - np.count_nonzero(removed, axis=1) if xk is not x else np.full(len(x), x.shape[1])
    return xk, xk[rows, top], top, rows, kept


def _with_log(kind, m, kept, th, tl, log_h, log_l, log_err) -> Approx:
    """log_softmax = t - log s and logsumexp = m + log s, in double-double, from log s within log_err.

    Removed entries come out as garbage: the engine fills them (with -inf) and never reads them from a tier.
    """
    if kind == "logsumexp":
        h, lo = _dd.add(m, np.zeros_like(m), log_h, log_l)
        return Approx(h, lo, log_err + np.abs(h) * _dd.DD_OP_REL, 0.0)
    h, lo = _dd.add(th, tl, -log_h[:, None], -log_l[:, None])
    err = log_err[:, None] + np.abs(h) * _dd.DD_OP_REL
    return Approx(h, lo, err, np.where(kept > 1, -1.0, 0.0)[:, None])


def tier_a(kind: str, x: np.ndarray, removed: np.ndarray) -> Approx:
    """float64 with numpy's exp and log1p: for targets of at most 24 bits."""
    xk, m, top, rows, kept = _row_max(x, removed)
    with np.errstate(over="ignore", invalid="ignore"):
        t = xk - m[:, None]  # -inf where removed or where x - m overflows: e = 0 there, right to 2**-1074
    e = np.exp(t)
    # One relative bound per row: fl(x - m) is within u|t| of x - m, and every e_j with t_j >= -746 is within
    # rel of e**(x_j - m); below -746 both are under 2**-1075, which the 2**-1074 per entry covers.
    rel = LIBM_EXP_REL + U * np.minimum(-t.min(axis=1), 746.0)
    e[rows, top] = 0.0
    rest = _dd.pairwise_sum(e)[0]
    gamma = _dd.gamma(_dd.depth(x.shape[1]))
    # exp underflowing below 2**-1022 loses its relative accuracy but not 2**-1074 absolute.
    rest_err = (rel + gamma) * rest * _SECOND_ORDER + np.maximum(kept - 1, 0) * TINY
    if kind == "softmax":
        e[rows, top] = 1.0
        s = 1.0 + rest  # within u s of the exact 1 + rest
        p = np.divide(e, s[:, None], out=e)
        err = p * ((rel + rest_err / s + 2 * U) * _SECOND_ORDER)[:, None]
        err += TINY
        return Approx(p, None, err, 1.0)
    log = np.log1p(rest)
    log_err = (LIBM_LOG1P_REL * log + rest_err / (1 + rest - rest_err)) * _SECOND_ORDER
    th, tl = (None, None) if kind == "logsumexp" else _dd.two_sum(np.where(removed, m[:, None], x), -m[:, None])
    return _with_log(kind, m, kept, th, tl, log, np.zeros_like(log), log_err)


def tier_b_fast(kind: str, x: np.ndarray, removed: np.ndarray) -> Approx:
    """Tier B's first pass: tier B's formulas with exp_fast (EXP_FAST_REL) and the extraction sum. It decides
    all but about one float64 result in 2**22; tier_b (exp_dd) takes the rows it leaves."""
    _, m, top, rows, kept = _row_max(x, removed)
    some_removed = removed.any()
    th, tl = _dd.two_sum(np.where(removed, m[:, None], x) if some_removed else x, -m[:, None])
    eh, el = _dd.exp_fast(th, tl)  # th <= 0: every term is at most 1, as extract_sum asks
    if some_removed:
        np.copyto(eh, 0.0, where=removed)  # (a masked assignment is several times slower)
        np.copyto(el, 0.0, where=removed)
    eh[rows, top] = 0.0
    el[rows, top] = 0.0
    rest_h, rest_l, sum_err = _dd.extract_sum(eh, el)
    rest_err = (_dd.EXP_FAST_REL * rest_h + sum_err) * _SECOND_ORDER + np.maximum(kept - 1, 0) * 2 * TINY
    if kind == "softmax":
        eh[rows, top] = 1.0
        sh, sl = _dd.add_d(rest_h, rest_l, 1.0)
        inv_h, inv_l = _dd.div(np.ones_like(sh), np.zeros_like(sh), sh, sl)
        p_rel = (_dd.EXP_FAST_REL + rest_err / sh + 2 * _dd.DD_OP_REL + _dd.MUL_SHORT_REL) * _SECOND_ORDER
        return Approx(*_times_rows(eh, el, *_dd.short_factor(inv_h, inv_l), p_rel), 1.0)
    log_h, log_l = _dd.log1p_dd(rest_h, rest_l)
    log_err = (_dd.LOG1P_DD_REL * log_h + rest_err / (1 + rest_h - rest_err)) * _SECOND_ORDER
    return _with_log(kind, m, kept, th, tl, log_h, log_l, log_err)


#: Rows at least this long are multiplied one at a time by their row's values as Python floats: numpy
#: broadcasting a column costs about as much as the arithmetic (measured: 2x for a (4, 4096) block).
_ROW_BY_ROW = 512


def _times_rows(eh, el, b26, delta, rel):
    """p = (eh + el) (b26 + delta) per row (mul_short) and its bound p rel + 5 * 2**-1074 (exp_fast's two and
    mul_short's three)."""
    if eh.shape[1] < _ROW_BY_ROW:
        ph, pl = _dd.mul_short(eh, el, b26[:, None], delta[:, None])
        err = ph * rel[:, None]
    else:
        ph, pl, err = np.empty_like(eh), np.empty_like(eh), np.empty_like(eh)
        for i in range(len(eh)):
            _dd.mul_short(eh[i], el[i], float(b26[i]), float(delta[i]), out=(ph[i], pl[i]))
            np.multiply(ph[i], float(rel[i]), out=err[i])
    err += 5 * TINY
    return ph, pl, err


def tier_b(kind: str, x: np.ndarray, removed: np.ndarray) -> Approx:
    """Double-double with exp_dd and log1p_dd: for float64 targets and what tier A leaves undecided."""
    _, m, top, rows, kept = _row_max(x, removed)
    with np.errstate(over="ignore", invalid="ignore"):
        th, tl = _dd.two_sum(np.where(removed, m[:, None], x), -m[:, None])
        finite = np.isfinite(th)  # x - m overflows only where e**(x - m) is 0 to any precision
        eh, el = _dd.exp_dd(np.where(finite, th, _dd.EXP_ARG_MIN), np.where(finite, tl, 0.0))
    drop = removed | ~finite
    drop[rows, top] = True
    eh[drop] = 0.0
    el[drop] = 0.0
    rest_h, rest_l = _dd.pairwise_sum(eh, el, one_sign=True)
    rel = _dd.EXP_DD_REL + (_dd.depth(x.shape[1], 2) + 1) * _dd.DD_OP_REL
    rest_err = rel * rest_h * _SECOND_ORDER + np.maximum(kept - 1, 0) * 2 * TINY
    if kind == "softmax":
        eh[rows, top] = 1.0
        sh, sl = _dd.add_d(rest_h, rest_l, 1.0)
        inv_h, inv_l = _dd.div(np.ones_like(sh), np.zeros_like(sh), sh, sl)  # once per row, then multiply
        ph, pl = _dd.mul(eh, el, inv_h[:, None], inv_l[:, None])
        p_rel = _dd.EXP_DD_REL + (rest_err / sh + 3 * _dd.DD_OP_REL)[:, None]
        return Approx(ph, pl, np.abs(ph) * p_rel * _SECOND_ORDER + 2 * TINY, 1.0)
    log_h, log_l = _dd.log1p_dd(rest_h, rest_l)
    log_err = (_dd.LOG1P_DD_REL * log_h + rest_err / (1 + rest_h - rest_err)) * _SECOND_ORDER
    return _with_log(kind, m, kept, th, tl, log_h, log_l, log_err)
