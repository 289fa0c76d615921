"""The row kinds (softmax, log-softmax, log-sum-exp; masked softmax is softmax with entries removed), one formula
object each (`SOFTMAX`, `LOG_SOFTMAX`, `LOGSUMEXP`): the tiers and the engine (_engine.py) form what every row kind
shares and ask the formula for the rest (the output's shape, its value at removed entries, how each tier finishes
from the row's sums, tier C's row function), so adding a row kind is one class here and one line in the table of
reference/__init__.py.

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

from . import _dd, _exact
from ._dd import TINY, U
from ._formats import Format

#: Assumed relative error bounds of numpy's float64 exp and log1p (64 ulp; glibc and numpy's SIMD code are
#: within 4 ulp, and tests/reference/test_dd.py checks this machine). Only tier A relies on them.
LIBM_EXP_REL = 2.0**-46
LIBM_LOG1P_REL = 2.0**-46
_SECOND_ORDER = 1 + 2.0**-30  # covers the products of (1 + d) factors, every d below 2**-40


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


@dataclasses.dataclass
class Block:
    """A block of rows as every tier forms it, handed to the formula's finishing step: x and its removed entries,
    each row's max m at its first position top, the row indices, each row's count of kept entries, and shifted,
    where the tier formed it: x - m exactly as a double-double (th, tl), removed entries at 0."""

    x: np.ndarray
    removed: np.ndarray
    m: np.ndarray
    top: np.ndarray
    rows: np.ndarray
    kept: np.ndarray
    shifted: tuple | None = None

    def t(self) -> tuple:
        """x - m exactly (two_sum): the tier's, or formed now (tier A's log-softmax alone needs it)."""
        if self.shifted is None:
            self.shifted = _dd.two_sum(np.where(self.removed, self.m[:, None], self.x), -self.m[:, None])
        return self.shifted


def _row_max(x, removed):
    """x with removed entries at -inf, each row's max and its first position, row indices and kept counts."""
    xk = np.where(removed, -np.inf, x) if removed.any() else x
    top = xk.argmax(axis=1)
    rows = np.arange(len(x))
    kept = x.shape[1] - np.count_nonzero(removed, axis=1) if xk is not x else np.full(len(x), x.shape[1])
    return xk, xk[rows, top], top, rows, kept


def tier_a(formula, x: np.ndarray, removed: np.ndarray) -> Approx:
    """float64 with numpy's exp and log1p: for targets of at most 24 bits. `formula`: one of `FORMULAS` below (or
    its name), as for every tier."""
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
    return formula.finish_a(Block(x, removed, m, top, rows, kept), e, rel, rest, rest_err)


def tier_b_fast(formula, x: np.ndarray, removed: np.ndarray) -> Approx:
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
    block = Block(x, removed, m, top, rows, kept, (th, tl))
    return formula.finish_b_fast(block, eh, el, rest_h, rest_l, rest_err)


#: Rows at least this long are multiplied one at a time by their row's values as Python floats: numpy
#: broadcasting a column costs about as much as the arithmetic.
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


def tier_b(formula, x: np.ndarray, removed: np.ndarray) -> Approx:
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
    block = Block(x, removed, m, top, rows, kept, (th, tl))
    return formula.finish_b(block, eh, el, rest_h, rest_l, rest_err)


class _Formula:
    """A row formula: the output's shape, which rows are undefined, what needs no arithmetic, and tier C's call, as
    the kinds with one output per entry (softmax, log-softmax) have them. A subclass gives `name`, `at_removed` (the
    value of a removed entry), `exact_row` (_exact's row function) and the tiers' finishing steps, `finish_a`,
    `finish_b_fast` and `finish_b`, each from its tier's e_j = e**(x_j - m) (e_top left 0) and rest = the sum of
    the kept e_j but e_top, within rest_err."""

    name: str
    at_removed: float
    reduces = False  # True: one output per row (the row's axis is reduced), else one per entry

    def undefined(self, x: np.ndarray, removed: np.ndarray) -> np.ndarray:
        """Per row: a NaN or +inf among the kept entries, or no kept entry."""
        none = np.zeros(len(x), dtype=bool)
        with np.errstate(invalid="ignore"):  # the masks only where a +inf is there at all (rarely)
            pos_inf = ((x == np.inf) & ~removed).any(axis=1) if (x == np.inf).any() else none
        return _nan_rows(x, removed) | pos_inf | (removed.all(axis=1) & (x.shape[1] > 0))

    def prefill(self, out, x: np.ndarray, removed: np.ndarray, undefined: np.ndarray) -> np.ndarray:
        """Fill what needs no arithmetic into `out` (an _engine._Collector): NaN on undefined rows, `at_removed` at
        the removed entries of the others. Returns the mask of the outputs left to compute."""
        shape = removed.shape
        out.fill(np.broadcast_to(undefined[:, None], shape), np.nan)
        todo = ~undefined & ~removed.all(axis=1)
        out.fill(todo[:, None] & removed, self.at_removed)
        return todo[:, None] & ~removed

    def exact(self, kept: list, keep: np.ndarray, pending: np.ndarray, fmt: Format):
        """Tier C on one row: (where in the row's output, entry) for each pending output; kept holds the exact
        values of the kept entries, at the row's positions keep."""
        cols = np.flatnonzero(pending)
        entries = self.exact_row(kept, list(np.searchsorted(keep, cols)), fmt)
        return [((col,), entry) for col, entry in zip(cols, entries)]


class Softmax(_Formula):
    """p_i = e_i / s with s = 1 + rest; 0 at removed entries, and positive."""

    name = "softmax"
    at_removed = 0.0
    exact_row = staticmethod(_exact.softmax_row)

    def finish_a(self, block, e, rel, rest, rest_err) -> Approx:
        e[block.rows, block.top] = 1.0
        s = 1.0 + rest  # within u s of the exact 1 + rest
        p = np.divide(e, s[:, None], out=e)
        err = p * ((rel + rest_err / s + 2 * U) * _SECOND_ORDER)[:, None]
        err += TINY
        return Approx(p, None, err, 1.0)

    def finish_b_fast(self, block, eh, el, rest_h, rest_l, rest_err) -> Approx:
        eh[block.rows, block.top] = 1.0
        sh, sl = _dd.add_d(rest_h, rest_l, 1.0)
        inv_h, inv_l = _dd.div(np.ones_like(sh), np.zeros_like(sh), sh, sl)
        p_rel = (_dd.EXP_FAST_REL + rest_err / sh + 2 * _dd.DD_OP_REL + _dd.MUL_SHORT_REL) * _SECOND_ORDER
        return Approx(*_times_rows(eh, el, *_dd.short_factor(inv_h, inv_l), p_rel), 1.0)

    def finish_b(self, block, eh, el, rest_h, rest_l, rest_err) -> Approx:
        eh[block.rows, block.top] = 1.0
        sh, sl = _dd.add_d(rest_h, rest_l, 1.0)
        inv_h, inv_l = _dd.div(np.ones_like(sh), np.zeros_like(sh), sh, sl)  # once per row, then multiply
        ph, pl = _dd.mul(eh, el, inv_h[:, None], inv_l[:, None])
        p_rel = _dd.EXP_DD_REL + (rest_err / sh + 3 * _dd.DD_OP_REL)[:, None]
        return Approx(ph, pl, np.abs(ph) * p_rel * _SECOND_ORDER + 2 * TINY, 1.0)


class _FromLog(_Formula):
    """The kinds that finish from log s = log1p(rest) (log1p_dd in tier B): `with_log` takes it from there."""

    def finish_a(self, block, e, rel, rest, rest_err) -> Approx:
        log = np.log1p(rest)
        log_err = (LIBM_LOG1P_REL * log + rest_err / (1 + rest - rest_err)) * _SECOND_ORDER
        return self.with_log(block, log, np.zeros_like(log), log_err)

    def finish_b(self, block, eh, el, rest_h, rest_l, rest_err) -> Approx:
        log_h, log_l = _dd.log1p_dd(rest_h, rest_l)
        log_err = (_dd.LOG1P_DD_REL * log_h + rest_err / (1 + rest_h - rest_err)) * _SECOND_ORDER
        return self.with_log(block, log_h, log_l, log_err)

    finish_b_fast = finish_b  # (the first pass differs from tier B in its exp and its sum only)


class LogSoftmax(_FromLog):
    """t_i - log s with t_i = x_i - m; -inf at removed entries, and negative but in a row of one kept entry."""

    name = "log_softmax"
    at_removed = -np.inf
    exact_row = staticmethod(_exact.log_softmax_row)

    def with_log(self, block, log_h, log_l, log_err) -> Approx:
        """t - log s in double-double, from log s within log_err. Removed entries come out as garbage: the engine
        fills them (with -inf) and never reads them from a tier."""
        th, tl = block.t()
        h, lo = _dd.add(th, tl, -log_h[:, None], -log_l[:, None])
        err = log_err[:, None] + np.abs(h) * _dd.DD_OP_REL
        return Approx(h, lo, err, np.where(block.kept > 1, -1.0, 0.0)[:, None])


class LogSumExp(_FromLog):
    """m + log s, one value per row: -inf for a row with nothing kept, +inf with a kept +inf, NaN with a kept NaN."""

    name = "logsumexp"
    reduces = True

    def undefined(self, x: np.ndarray, removed: np.ndarray) -> np.ndarray:
        """Per row: a NaN among the kept entries (a +inf gives +inf, nothing kept -inf)."""
        return _nan_rows(x, removed)

    def prefill(self, out, x: np.ndarray, removed: np.ndarray, undefined: np.ndarray) -> np.ndarray:
        has_pos_inf = (~removed & (x == np.inf)).any(axis=1)
        empty = removed.all(axis=1)
        out.fill(undefined, np.nan)
        out.fill(~undefined & has_pos_inf, np.inf)
        out.fill(~undefined & ~has_pos_inf & empty, -np.inf)
        return ~undefined & ~has_pos_inf & ~empty

    def exact(self, kept: list, keep: np.ndarray, pending: np.ndarray, fmt: Format):
        return [((), _exact.logsumexp_row(kept, fmt))]

    def with_log(self, block, log_h, log_l, log_err) -> Approx:
        """m + log s in double-double, from log s within log_err."""
        h, lo = _dd.add(block.m, np.zeros_like(block.m), log_h, log_l)
        return Approx(h, lo, log_err + np.abs(h) * _dd.DD_OP_REL, 0.0)


SOFTMAX, LOG_SOFTMAX, LOGSUMEXP = Softmax(), LogSoftmax(), LogSumExp()
FORMULAS = (SOFTMAX, LOG_SOFTMAX, LOGSUMEXP)


def _nan_rows(x: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """Per row: a NaN among the kept entries."""
    if not np.isnan(x).any():  # the mask only where a NaN is there at all (rarely)
        return np.zeros(len(x), dtype=bool)
    return (np.isnan(x) & ~removed).any(axis=1)
