"""Vector-Jacobian products of the row kinds, correctly rounded: softmax_grad, log_softmax_grad, logsumexp_grad.

Rows arrive as 2-D float64 arrays x and g (g one value per row for logsumexp) with a mask of removed entries (-inf
or masked out). With p the softmax of the kept entries:

* softmax_grad:     dx_i = p_i (g_i - <g, p>)  = sum_k p_i p_k (g_i - g_k)
* log_softmax_grad: dx_i = g_i - p_i sum_k g_k
* logsumexp_grad:   dx_i = p_i g

Removed entries get exactly +0, and g there is never read. Tier A (float64, targets of at most 24 bits) computes each
element with a proven bound (docs/reference.md, "Gradients"), `decide_arrays` keeps what it can round, and tier C
(_grad_exact) takes the rest. softmax_grad centres g on one of its own kept values before anything else, which
makes every difference exact in structure: a constant g gives exactly 0 with a zero bound.

Each kind is a formula object (`SOFTMAX_GRAD`, `LOG_SOFTMAX_GRAD`, `LOGSUMEXP_GRAD`) holding what is its own: g's
shape, which rows are undefined, the outputs that need no arithmetic, each tier's terms from the forward's softmax,
the size bound behind `_far_below`, and tier C's terms; `round_rows` runs any of them.
"""

from __future__ import annotations

import math

import numpy as np
from mpmath import libmp

from . import _dd, _grad_exact, _rows
from ._dd import TINY, U
from ._engine import _Collector, fast_input, fast_target, row_blocks, tier_a_target
from ._exact import _fraction
from ._formats import Format, decide_arrays, exact_mpf, round_mpf
from ._grad_exact import Form
from ._rational import Fraction
from ._rows import Approx

_SECOND_ORDER = 1 + 2.0**-30  # every first-order relative term below is under 2**-40 (docs/reference.md)


def _floor(nonzero):
    """4 * 2**-1074 where a bound has a nonzero source: its products may underflow (a subnormal p times a small
    error is 0 in float64, and a zero bound would claim an exact result). Where every source is 0, nothing is added."""
    return np.where(nonzero, 4 * TINY, 0.0)


def _softmax_a(x, removed):
    """Tier A's softmax of the rows: p and its absolute error bound, 0 (exactly) on removed entries."""
    p = _rows.tier_a(_rows.SOFTMAX, x, removed)
    return np.where(removed, 0.0, p.hi), np.where(removed, 0.0, p.err)


def _known_sign(d, d_err):
    """The sign of softmax_grad's dx = p d where d's own bound proves it (p > 0 on kept entries), else 0: with it,
    an element whose p underflowed (|dx| far below any subnormal) rounds to a zero of that sign in the fast tiers
    instead of going to tier C."""
    return np.where(np.abs(d) > d_err, np.sign(d), 0.0)


def _underflowed(p, p_err, removed):
    """p's error bound, at least 2**-1074 where a kept p came out 0: its exact value is positive (below the smallest
    subnormal), and a zero bound would make p * sum g an exact 0 (log_softmax_grad's dx_i = g_i - p_i sum g)."""
    return np.where(~removed & (p == 0), np.maximum(p_err, TINY), p_err)


def _q_sources(q, q_err, p_err, total, total_err):
    """Where log_softmax_grad's q = p sum g has a nonzero source for its bound: q or its bound, or p's bound with the
    sum or the sum's bound (their product may underflow to 0, which would claim an exact q)."""
    return (q != 0) | (q_err != 0) | ((p_err != 0) & ((total != 0) | (total_err != 0))[:, None])


def _log_softmax_sign(g, total, total_err, removed):
    """The sign of log_softmax_grad's dx_i = -p_i sum g where g_i is 0 and the sum's sign is proven (p_i > 0 on kept
    entries), else 0: with it, an entry whose p underflowed rounds to a zero of that sign in the fast tiers."""
    proven = np.where(np.abs(total) > total_err, -np.sign(total), 0.0)[:, None]
    return np.where((g == 0) & ~removed, proven, 0.0)


def _far_below(formula, x, g, removed, fmt: Format) -> np.ndarray:
    """Where |dx| = p |d| is proven below half of fmt's smallest subnormal, so dx rounds to a zero of its sign.

    p_i <= e**t_i (the row's largest term is 1), t_i = x_i - m within u |t_i|; |d| is at most the formula's
    `size` (for softmax's VJP 2 max |g|, g_i - <g, p> with <g, p> a mean of g). The test is taken with a margin of e
    in the log, which covers np.log's and the products' rounding many times over. Where the bounds need it, the
    fast tiers' own err (absolute terms of 2**-1074) cannot make this decision for float64 targets."""
    kept = np.where(removed, -np.inf, x)
    t = kept - kept.max(axis=1, keepdims=True)
    size = formula.size(g, removed)
    with np.errstate(divide="ignore"):
        bound = t * (1 - U) + np.log(size) + 1.0  # ln of an upper bound of |dx|, with the margin
    return ~removed & (bound < (fmt.min_subnormal_exp - 1) * math.log(2))


def _centre(p, g, removed):
    """softmax_grad's g with removed entries at 0, and c, a kept g near <g, p> per row: g - c is exact in structure
    (0 where g equals c), and c cancels exactly from dx = p ((g - c) - <g - c, p>)."""
    g = np.where(removed, 0.0, g)
    guess = (p * g).sum(axis=1)
    return g, g[np.arange(len(g)), np.where(removed, np.inf, np.abs(g - guess[:, None])).argmin(axis=1)]


class _RowVjp:
    """What the row VJPs share: which rows are undefined, what needs no arithmetic, and the g tier C reads. A
    subclass gives `name`, `size` (for `_far_below`), the tiers' terms `tier_a` and `tier_b` from the forward's
    softmax p (0 at removed entries) within p_err, and tier C's `exact_row`."""

    name: str
    g_per_row = False  # True: one g per row (the forward reduced the row), else one per entry

    def undefined(self, x: np.ndarray, g: np.ndarray, removed: np.ndarray) -> np.ndarray:
        """Per row: a kept x that is NaN or +inf, or a g the result reads that is not finite."""
        with np.errstate(invalid="ignore"):
            return (((np.isnan(x) | (x == np.inf)) & ~removed).any(axis=1)) | self._bad_g(g, removed)

    def _bad_g(self, g, removed):
        return (~np.isfinite(g) & ~removed).any(axis=1)

    def prefill(self, out, g: np.ndarray, removed: np.ndarray, undefined: np.ndarray) -> None:
        """Fill what needs no arithmetic into `out` (an _engine._Collector): NaN at the kept entries of undefined
        rows (nothing depends on a removed entry, so its gradient is 0 in every row)."""
        out.fill(np.broadcast_to(undefined[:, None] & ~removed, removed.shape), np.nan)
        out.fill(removed, 0.0)

    def row_g(self, g_row, keep, removed_row):
        """The g tier C reads for one row: its kept entries', and the sum of g the result reads beyond them."""
        return g_row[keep], Fraction(0)


class SoftmaxGrad(_RowVjp):
    """dx_i = p_i (g_i - <g, p>) = sum_k p_i p_k (g_i - g_k): exactly +0 at removed entries, whose g is never read."""

    name = "softmax_grad"

    def size(self, g, removed):
        """An upper bound of |d| in dx = p d, per row (or entry), for `_far_below`."""
        return 2 * np.abs(np.where(removed, 0.0, g)).max(axis=1, keepdims=True)

    def tier_a(self, x, g, removed, p, p_err) -> Approx:
        # h = g - c with c a kept g near <g, p>; dx = p (h - r), r = sum p h (c cancels exactly).
        n = x.shape[1]
        g, centre = _centre(p, g, removed)
        h = np.where(removed, 0.0, g - centre[:, None])  # within u|h| of g - centre (0 when g equals the centre)
        ah = np.abs(h)
        gamma = _dd.gamma(_dd.depth(n) + 1)
        r = _dd.pairwise_sum(p * h)[0]
        weighted = _dd.pairwise_sum(p * ah)[0]
        p_part = _dd.pairwise_sum(p_err * ah)[0]
        # |r^ - sum p_k h_k| <= (gamma + u) sum (p^ + p_err) |h^| + sum p_err |h^| + 2**-1074 per nonzero product
        r_err = ((gamma + U) * (weighted + p_part) + p_part) * (1 + 2 * gamma) + (h != 0).sum(axis=1) * TINY
        d = h - r[:, None]
        dx = p * d
        d_err = U * ah + r_err[:, None] + U * np.abs(d)
        err = ((p + p_err) * d_err + p_err * np.abs(d) + U * np.abs(dx)) * _SECOND_ORDER
        err += _floor((d != 0) | (d_err != 0))
        return Approx(dx, None, err, _known_sign(d, d_err))

    def tier_b(self, x, g, removed, ph, pl, p_err) -> Approx:
        n, rel = x.shape[1], _dd.DD_OP_REL
        depth = _dd.depth(n, 2) + 1
        g, centre = _centre(ph, g, removed)
        hh, hl = _dd.two_sum(g, -centre[:, None])  # exact
        hh, hl = np.where(removed, 0.0, hh), np.where(removed, 0.0, hl)
        ah = np.abs(hh) * (1 + 2 * U)  # >= |h|
        mh, ml = _dd.mul(ph, pl, hh, hl)
        rh, rl = _dd.pairwise_sum(mh, ml)
        weighted = _dd.pairwise_sum((np.abs(ph) + p_err) * ah)[0] * (1 + 2 * _dd.gamma(_dd.depth(n)))
        p_part = _dd.pairwise_sum(p_err * ah)[0] * (1 + 2 * _dd.gamma(_dd.depth(n)))
        nonzero = (hh != 0).sum(axis=1)
        r_err = (depth + 1) * rel * weighted + p_part + nonzero * 4 * TINY
        dh, dl = _dd.add(hh, hl, -rh[:, None], -rl[:, None])
        xh, xl = _dd.mul(ph, pl, dh, dl)
        d_err = r_err[:, None] + 2 * rel * np.abs(dh)
        err = ((np.abs(ph) + p_err) * d_err + p_err * np.abs(dh) * (1 + 2 * U) + 2 * rel * np.abs(xh)) * _SECOND_ORDER
        err += _floor((dh != 0) | (d_err != 0))
        return Approx(xh, xl, err, _known_sign(dh, d_err))

    def exact_row(self, w: _grad_exact.Weights, gs, want: list[int], fmt: Format, g_rest) -> list:
        """Tier C's entries at the positions `want` of the kept entries: cov(onehot_i, g)."""
        unit = Fraction(1)
        gs = _fractions(gs)
        grouped = _grad_exact.group(w.keys, gs)
        forms = (Form(w, cov=({w.keys[i]: gs[i]} if gs[i] else {}, {w.keys[i]: unit}, grouped)) for i in want)
        return [_grad_exact.decide_terms([(unit, f)], _grad_exact.ONE, fmt) for f in forms]


class LogSoftmaxGrad(_RowVjp):
    """dx_i = g_i - p_i G with G = sum_k g_k over the whole row: the sum reads g at -inf logits too, and there
    p_i = 0 so dx_i = g_i (y_i = x_i - lse(x)), as autograd gives. A row of -inf only is undefined, as its forward."""

    name = "log_softmax_grad"

    def undefined(self, x, g, removed):
        return super().undefined(x, g, removed) | (removed.all(axis=1) & (x.shape[1] > 0))

    def _bad_g(self, g, removed):
        return (~np.isfinite(g)).any(axis=1)  # every g is read

    def prefill(self, out, g, removed, undefined) -> None:
        """NaN throughout an undefined row (its g is read everywhere); at a -inf logit of the others, dx_i = g_i:
        g rounded, no arithmetic."""
        out.fill(np.broadcast_to(undefined[:, None], removed.shape), np.nan)
        for r, c in zip(*np.nonzero(~undefined[:, None] & removed)):
            value = exact_mpf(g[r, c])
            out.put_exact((r, c), round_mpf(value, bool(np.signbit(g[r, c])), out.fmt), value, libmp.fzero)
            if out.detail:
                out.tier[r, c] = 0  # no arithmetic

    def size(self, g, removed):
        # where g_i is 0, dx_i = -p_i G and |G| <= sum |g| over the whole row; elsewhere dx_i is near g_i
        return np.where(g == 0, np.abs(g).sum(axis=1, keepdims=True) * (1 + g.shape[1] * U), np.inf)

    def tier_a(self, x, g, removed, p, p_err) -> Approx:
        n = x.shape[1]
        total = _dd.pairwise_sum(g)[0]
        size = _dd.pairwise_sum(np.abs(g))[0]
        total_err = _dd.gamma(_dd.depth(n)) * size * (1 + 2 * _dd.gamma(_dd.depth(n)))
        p_err = _underflowed(p, p_err, removed)
        q = p * total[:, None]
        q_err = p_err * np.abs(total)[:, None] + (p + p_err) * total_err[:, None] + U * np.abs(q)
        dx = g - q
        err = (q_err + U * np.abs(dx)) * _SECOND_ORDER + _floor(_q_sources(q, q_err, p_err, total, total_err))
        return Approx(dx, None, err, _log_softmax_sign(g, total, total_err, removed))

    def tier_b(self, x, g, removed, ph, pl, p_err) -> Approx:
        n, rel = x.shape[1], _dd.DD_OP_REL
        depth = _dd.depth(n, 2) + 1
        th, tl = _dd.pairwise_sum(g, np.zeros_like(g))
        t_err = depth * rel * _dd.pairwise_sum(np.abs(g))[0] * (1 + 2 * _dd.gamma(_dd.depth(n)))
        p_err = _underflowed(ph, p_err, removed)
        qh, ql = _dd.mul(ph, pl, th[:, None], tl[:, None])
        dh, dl = _dd.add(g, np.zeros_like(g), -qh, -ql)
        q_err = p_err * np.abs(th)[:, None] + (np.abs(ph) + p_err) * t_err[:, None] + 2 * rel * np.abs(qh)
        err = (q_err + 2 * rel * np.abs(dh)) * _SECOND_ORDER + 2 * _floor(_q_sources(qh, q_err, p_err, th, t_err))
        return Approx(dh, dl, err, _log_softmax_sign(g, th, t_err, removed))

    def row_g(self, g_row, keep, removed_row):
        return g_row[keep], sum(_fractions(g_row[removed_row]), Fraction(0))  # g at -inf logits

    def exact_row(self, w, gs, want, fmt, g_rest) -> list:
        """a_j = g_i - [j = i] G."""
        unit = Fraction(1)
        gs = _fractions(gs)
        total = sum(gs, g_rest)
        forms = (Form(w, mean=_grad_exact.combine(gs[i], w.counts, -total, {w.keys[i]: unit})) for i in want)
        return [_grad_exact.decide_terms([(unit, f)], _grad_exact.ONE, fmt) for f in forms]


class LogSumExpGrad(_RowVjp):
    """dx_i = p_i g, with one g per row: exactly +0 at removed entries."""

    name = "logsumexp_grad"
    g_per_row = True

    def _bad_g(self, g, removed):
        return ~np.isfinite(g) & (~removed).any(axis=1)

    def size(self, g, removed):
        return np.abs(g)[:, None]

    def tier_a(self, x, g, removed, p, p_err) -> Approx:
        dx = p * g[:, None]
        err = (p_err * np.abs(g)[:, None] + U * np.abs(dx)) * _SECOND_ORDER + _floor(g[:, None] != 0)
        return Approx(dx, None, err, np.sign(g)[:, None])

    def tier_b(self, x, g, removed, ph, pl, p_err) -> Approx:
        gb = np.broadcast_to(g[:, None], ph.shape)
        dh, dl = _dd.mul_d(ph, pl, gb)
        err = (p_err * np.abs(gb) + 2 * _dd.DD_OP_REL * np.abs(dh)) * _SECOND_ORDER + _floor(gb != 0)
        return Approx(dh, dl, err, np.sign(g)[:, None])

    def row_g(self, g_row, keep, removed_row):
        return g_row, Fraction(0)  # the row's one g

    def exact_row(self, w, g, want, fmt, g_rest) -> list:
        weight, unit = _fractions([g])[0], Fraction(1)
        return [
            _grad_exact.decide_terms([(weight, Form(w, mean={w.keys[i]: unit}))], _grad_exact.ONE, fmt) for i in want
        ]


SOFTMAX_GRAD, LOG_SOFTMAX_GRAD, LOGSUMEXP_GRAD = SoftmaxGrad(), LogSoftmaxGrad(), LogSumExpGrad()


def tier_a(formula, x: np.ndarray, g: np.ndarray, removed: np.ndarray) -> Approx:
    """float64, for targets of at most 24 bits; every row has a kept entry, no NaN or inf among kept x and g."""
    return formula.tier_a(x, g, removed, *_softmax_a(x, removed))


def tier_b(formula, x: np.ndarray, g: np.ndarray, removed: np.ndarray) -> Approx:
    """Double-double, for float64 targets and what tier A left: the same formulas, every step in double-double with
    relative error DD_OP_REL, on the forward's tier B softmax (docs/reference.md, "Gradients")."""
    fwd = _rows.tier_b(_rows.SOFTMAX, x, removed)
    ph, pl = np.where(removed, 0.0, fwd.hi), np.where(removed, 0.0, fwd.lo)
    p_err = np.where(removed, 0.0, fwd.err)
    return formula.tier_b(x, g, removed, ph, pl, p_err)


def round_rows(formula, x, g, removed, undefined, fmt: Format, method: str, detail: bool = True) -> _Collector:
    """Correctly rounded `formula` (a VJP above) of each 2-D row (g: (rows,) where formula.g_per_row, else x's
    shape)."""
    rows_total, n = x.shape
    out = _Collector((rows_total, n), fmt, detail)
    formula.prefill(out, g, removed, undefined)
    pending = ~undefined[:, None] & ~removed
    if method == "auto" and fast_target(fmt) and fast_input(x) and fast_input(g):
        tiers = ((1, tier_a), (2, tier_b)) if tier_a_target(fmt) else ((2, tier_b),)
        for tier, run in tiers:
            rows = np.flatnonzero(pending.any(axis=1))
            for index in row_blocks(rows, n):
                with np.errstate(all="ignore"):
                    xs, gs = x[index].astype(np.float64), g[index].astype(np.float64)
                    approx = run(formula, xs, gs, removed[index])
                    rounded, decided = decide_arrays(approx.hi, approx.lo, approx.err, approx.sign, fmt)
                    # values far below the format's smallest subnormal: zeros of their sign
                    zero = ~decided & (approx.sign != 0) & _far_below(formula, xs, gs, removed[index], fmt)
                    rounded, decided = np.where(zero, np.copysign(0.0, approx.sign), rounded), decided | zero
                decided &= pending[index]
                out.put_block(index, rounded, approx, decided, tier)
                pending[index] &= ~decided
    for r in np.flatnonzero(pending.any(axis=1)):
        keep = np.flatnonzero(~removed[r])
        cols = np.flatnonzero(pending[r])
        g_row, g_rest = formula.row_g(g[r], keep, removed[r])
        for col, entry in zip(
            cols, exact_row(formula, x[r, keep], g_row, list(np.searchsorted(keep, cols)), fmt, g_rest)
        ):
            out.put_exact((r, col), *entry)
    return out


def _fractions(values) -> list[Fraction]:
    return [_fraction(exact_mpf(v)) for v in values]


def exact_row(formula, x, g, want: list[int], fmt: Format, g_rest=0) -> list[_grad_exact.Entry]:
    """Tier C for the kept entries of one row, at the positions `want` of the kept entries; g_rest: the sum of g
    the formula reads beyond the kept entries (log_softmax_grad's over the row's -inf logits)."""
    xs = _fractions(x)
    top = max(xs)
    return formula.exact_row(_grad_exact.Weights([v - top for v in xs]), g, want, fmt, g_rest)
