"""Matrix products A @ B to about twice float64's precision, from float64 BLAS products that are exact.

The Ozaki scheme (Ozaki, Ogita, Oishi & Rump 2012, "Error-free transformations of matrix multiplication by using
fast routines of matrix multiplication"): each row of A (each column of B) is cut into slices whose elements are
integer multiples of one power of two with at most beta bits, beta = floor((53 - ceil(log2 n)) / 2) for the inner
dimension n. A product of two slices is then a sum of n integers below 2**(2 beta) in one unit, so every partial
sum is a float64 integer multiple of that unit: BLAS computes it exactly, in any order, with or without FMA (as long
as the unit is at least 2**-1074; where it is not, each product may lose 2**-1074, which the bound counts). The
exact slice products are summed into a double-double with two_sum, keeping every rounding error (`ExactSum`), and
what the slices leave out of A and B is bounded with |A| and |B|. Only IEEE basic operations and BLAS products of
exact integers are used, so the result and its bound are the same on every CPU.

When the slices hold A and B whole (inputs of 24 bits with a modest exponent spread per row) and the double-double
holds the sum, the bound is exactly 0: the product is certified exact, which lets the attention gradient decide
exact zeros (equal values, constant upstream gradients) without mpmath.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import _dd
from ._dd import TINY


def beta(n: int) -> int:
    """Bits per slice for an inner dimension n: n integers below 2**(2 beta) sum below 2**53."""
    return (53 - max(1, math.ceil(math.log2(max(n, 1))))) // 2


@dataclasses.dataclass
class Sliced:
    """Rows of an operand (summed over its last axis of length n) cut into exact slices."""

    slices: list[np.ndarray]  # each (m, n); the operand is sum(slices) + rest, exactly
    rest: np.ndarray  # (m, n) an upper bound of |the rest|, 0 where the slices hold the operand whole
    size: np.ndarray  # (m, n) an upper bound of |the operand|
    unit: np.ndarray  # (m,) the exponent of the smallest slice unit used in each row


def slice_rows(parts: list[np.ndarray], count: int) -> Sliced:
    """Cut sum(parts) (each (m, n), finite, below 2**900) into at most `count` slices per part, fewer where the
    part's remainder is already 0. A double-double operand is two parts (hi, lo)."""
    m, n = parts[0].shape
    b = beta(n)
    slices, rest, size = [], np.zeros((m, n)), np.zeros((m, n))
    unit = np.full(m, 2000, dtype=np.int64)
    for part in parts:
        exponent = np.frexp(np.abs(part).max(axis=1, initial=0.0))[1].astype(np.int64)  # |row| < 2**exponent
        left = part
        for s in range(count):
            if not left.any():
                break
            step = exponent - (s + 1) * b  # this slice's unit is 2**step
            usable = step >= -1022  # the extraction below needs a normal unit
            sigma = np.where(usable, np.ldexp(0.75, np.maximum(step + 53, -1021)), 0.0)[:, None]
            piece = np.where(usable[:, None], (left + sigma) - sigma, 0.0)  # left rounded to a multiple of 2**step
            slices.append(piece)
            left = left - piece  # exact
            unit = np.where(usable & (piece != 0).any(axis=1), np.minimum(unit, step), unit)
        rest += np.abs(left)
        size += np.abs(part)
    grow = 1 + 2 * _dd.gamma(len(parts))
    return Sliced(slices, rest * grow, size * grow, unit)


class ExactSum:
    """A running sum of float64 arrays kept as hi + lo + r, with every rounding error of the additions in r:
    value = hi + lo + r exactly and |r| <= bound. bound is 0 while the sum is exactly hi + lo."""

    def __init__(self, shape):
        self.hi = np.zeros(shape)
        self.lo = np.zeros(shape)
        self.lost = np.zeros(shape)  # sum of |errors of the lo additions|, as computed
        self.count = 0

    def add(self, term: np.ndarray) -> None:
        self.hi, e = _dd.two_sum(self.hi, term)
        self.lo, f = _dd.two_sum(self.lo, e)
        self.lost += np.abs(f)
        self.count += 1

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(hi, lo, err): a normalised double-double and the bound of what it leaves out."""
        hi, lo = _dd.two_sum(self.hi, self.lo)
        return hi, lo, self.lost * (1 + 2 * _dd.gamma(self.count + 1))


def spread(err: np.ndarray, b_abs: np.ndarray) -> np.ndarray:
    """An upper bound of err @ b_abs (non-negative 2-D arrays): float64 rounding (gamma_n per entry) and products
    that underflow (2**-1074 each, where some err_ij b_jk has both factors nonzero) counted. inf in err gives inf
    on its whole row (never NaN from inf * 0)."""
    n = err.shape[-1]
    finite = np.isfinite(err)
    both = err.any(axis=-1)[:, None] & b_abs.any(axis=0)[None, :]  # a product err_ij b_jk that may underflow
    out = (np.where(finite, err, 0.0) @ b_abs) * (1 + 2 * _dd.gamma(n)) + n * TINY * both
    infinite = ~finite.all(axis=-1)
    if infinite.any():
        out[infinite] = np.inf
    return out


def product(a: Sliced, b: Sliced, total: ExactSum | None = None) -> np.ndarray:
    """Add a_operand @ b_operand.T ((m, n) by (p, n)) into `total` (a new one when None) and return the bound of
    its error beyond the sum's own: the slices' products are exact, what the slices left out is bounded."""
    n = a.slices[0].shape[1] if a.slices else a.rest.shape[1]
    total = total if total is not None else ExactSum((a.rest.shape[0], b.rest.shape[0]))
    for x in a.slices:
        for y in b.slices:
            total.add(x @ y.T)
    err = np.zeros(total.hi.shape)
    if a.rest.any() or b.rest.any():  # |A B - A' B'| <= |A - A'| |B| + |A'| |B - B'|, |A'| <= |A| + |A - A'|
        err += spread(a.rest, b.size.T) + spread(a.size + a.rest, b.rest.T)
    underflow = (a.unit[:, None] + b.unit[None, :]) < -1074  # a slice product's unit below 2**-1074
    if underflow.any():
        err += underflow * (len(a.slices) * len(b.slices) * n * TINY)
    return err
