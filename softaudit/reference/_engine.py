"""Round-or-refine: run the fastest tier that applies, and send only the undecided elements down a tier.

Tier A (float64) serves targets of at most 24 bits, tier B (double-double) targets up to float64 and what A left,
tier C (mpmath, _exact.py) everything else. A `Result` keeps, beside the rounded values, the approximation the
deciding tier had (hi + lo within err of the exact value), which the audit uses for error measures finer than an ulp.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from mpmath import libmp

from . import _exact, _rows
from ._formats import FINE_BELOW, FINE_SCALE, Format, decide_arrays, exact_mpf, mpf_to_numpy

TIER_NAMES = ("exact", "A", "B", "C")  # per element: which tier decided it ("exact": no arithmetic needed)


@dataclasses.dataclass
class Result:
    """Correctly rounded results with the approximation behind them."""

    value: np.ndarray  # the exact result correctly rounded to the target (mpf objects for dtype=None)
    hi: np.ndarray  # float64: hi + lo approximates the exact result within err (NaN where undefined)
    lo: np.ndarray
    err: np.ndarray
    tier: np.ndarray  # int8 index into TIER_NAMES
    undefined: np.ndarray  # bool per row (per query for attention)
    #: None, or (r - hi) x 2**1074 where |hi| < FINE_BELOW (0 elsewhere): lo as a float64 loses bits below about
    #: 2**-969 and is 0 below 2**-1075, this scaled correction does not (ULP measures at the bottom need it).
    fine: np.ndarray | None = None


def fast_input(arr: np.ndarray) -> bool:
    """True when every element converts to float64 exactly (every float dtype but an 80- or 128-bit longdouble)."""
    return arr.dtype.itemsize <= 8


def fast_target(fmt: Format) -> bool:
    return fmt.dtype is not None and fmt.precision <= 53 and fmt.emin >= -1022 and np.isfinite(fmt.max_float)


def tier_a_target(fmt: Format) -> bool:
    """Tier A (float64) serves targets of at most 24 bits whose values all fit a float32 (the torch tier carries
    its results back in one)."""
    return fmt.precision <= 24 and fmt.emin >= -149


class _Collector:
    """Gathers rounded values from every tier into the target dtype (fast targets) or libmp pairs (the others)."""

    def __init__(self, shape, fmt: Format, detail: bool = True):
        """With detail False only the rounded values are kept (hi, lo, err and tier are then size-0 arrays)."""
        self.fmt = fmt
        self.fast = fast_target(fmt)
        # Fast targets hold results in the target dtype itself: every stored value is exactly representable.
        self.values = np.full(shape, np.nan, dtype=fmt.dtype) if self.fast else np.full(shape, None, dtype=object)
        kept = shape if detail else (0,) * len(shape)
        self.detail = detail
        self.hi = np.full(kept, np.nan)
        self.lo = np.zeros(kept)
        self.err = np.zeros(kept)
        self.tier = np.zeros(kept, dtype=np.int8)
        self.fine = None  # made on the first result below FINE_BELOW (most audits have none)

    def put_block(self, index, rounded, approx, decided, tier: int):
        """Store a tier's decided results; `index` picks a block of leading axes, the arrays are that block."""
        if not self.fast:
            rounded = _cells([(exact_mpf(v), bool(np.signbit(v))) for v in rounded.ravel()]).reshape(rounded.shape)
        sources = [(self.values, rounded)]
        if self.detail:
            sources += [(self.hi, approx.hi), (self.err, approx.err), (self.tier, tier)]
            if approx.lo is not None:
                sources.append((self.lo, approx.lo))
        every = decided.all()
        for target, source in sources:
            if every:
                target[index] = source
            elif isinstance(index, slice):
                np.copyto(target[index], source, where=decided, casting="unsafe")
            else:
                target[index] = np.where(decided, source, target[index])

    def put_all(self, rounded, approx, tier):
        """Store a tier's results for every output at once (rounded in the target dtype, tier 0 where undecided):
        for a tier run on all of them, much faster than put_block's masked copy. The values it did not decide
        are placeholders that later tiers overwrite, and undefined outputs must be filled again."""
        self.values[...] = rounded
        if self.detail:
            self.hi[...], self.err[...], self.tier[...] = approx.hi, approx.err, tier
            self.lo[...] = 0.0 if approx.lo is None else approx.lo

    def put_exact(self, index, rounded: _exact.Rounded, value: tuple, err: tuple):
        mpf, negative = rounded
        if self.fast:
            self.values[index] = -libmp.to_float(mpf) if negative else libmp.to_float(mpf)
        else:
            self.values[index] = _cells([rounded])[0]
        if not self.detail:
            return
        hi = libmp.to_float(value)
        self.hi[index] = hi
        correction = libmp.mpf_sub(value, libmp.from_float(hi), 60) if np.isfinite(hi) else libmp.fzero
        self.lo[index] = libmp.to_float(correction)
        if abs(hi) < FINE_BELOW and correction != libmp.fzero:  # lo has lost bits here: keep it scaled too
            if self.fine is None:
                self.fine = np.zeros(self.hi.shape)
            self.fine[index] = libmp.to_float(libmp.mpf_shift(correction, FINE_SCALE))
        self.err[index] = libmp.to_float(err, rnd=libmp.round_up)
        self.tier[index] = 3

    def fill(self, where: np.ndarray, value: float):
        """Where (a mask of the output's shape) the result needs no arithmetic: NaN, 0, -inf or +inf."""
        if not where.any():
            return
        if self.fast:
            self.values[where] = value
        else:
            self.values[where] = _cells([(exact_mpf(value), bool(np.signbit(value)))] * int(where.sum()))
        if self.detail:
            self.hi[where] = value

    def array(self) -> np.ndarray:
        if self.fast:
            return self.values
        flat = self.values.ravel()
        return mpf_to_numpy(list(flat), self.fmt, self.values.shape)


def _cells(items: list) -> np.ndarray:
    """A 1-D object array holding each item (a tuple) as one element."""
    cells = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        cells[i] = item
    return cells


def round_rows(formula, x, removed, undefined, fmt: Format, method: str, detail: bool = True) -> _Collector:
    """Correctly rounded `formula` (a row formula of _rows.py) of each row of the 2-D x (entries where `removed` is
    True left out)."""
    rows_total, n = x.shape
    out = _Collector((rows_total,) if formula.reduces else (rows_total, n), fmt, detail)
    pending = formula.prefill(out, x, removed, undefined)
    if method == "auto" and fast_target(fmt) and fast_input(x):
        fast_b = ((2, _rows.tier_b_fast), (2, _rows.tier_b))
        tiers = ((1, _rows.tier_a), *fast_b) if tier_a_target(fmt) else fast_b
        for tier, run in tiers:
            rows = np.flatnonzero(_rows_pending(pending))
            for index in row_blocks(rows, n):
                with np.errstate(all="ignore"):
                    approx = run(formula, _float64(x[index]), removed[index])
                    rounded, decided = decide_arrays(approx.hi, approx.lo, approx.err, approx.sign, fmt)
                decided &= pending[index]
                out.put_block(index, rounded, approx, decided, tier)
                pending[index] &= ~decided
    _tier_c_rows(formula, x, removed, pending, out)
    return out


#: Elements per block of the fast tiers: small enough that temporaries stay in cache (and below malloc's mmap
#: threshold, whose map-and-unmap per array costs more than the arithmetic).
BLOCK = 1 << 14


def row_blocks(rows: np.ndarray, width: int, block: int = BLOCK):
    """Blocks of `rows` of about `block` elements each, as slices where the rows are consecutive."""
    size = max(1, block // max(width, 1))
    for start in range(0, len(rows), size):
        chunk = rows[start : start + size]
        contiguous = chunk[-1] - chunk[0] + 1 == len(chunk)
        yield slice(int(chunk[0]), int(chunk[-1]) + 1) if contiguous else chunk


def _float64(x: np.ndarray) -> np.ndarray:
    """x as float64, without a copy where it is one already (the tiers never write into their input)."""
    return x if x.dtype == np.float64 else x.astype(np.float64)


def _rows_pending(pending: np.ndarray) -> np.ndarray:
    """Per row, whether any of its results is still pending (pending: one per row, or rows x n; reshape(rows, -1)
    cannot say the shape of no rows)."""
    return pending if pending.ndim == 1 else pending.any(axis=tuple(range(1, pending.ndim)))


def _tier_c_rows(formula, x, removed, pending, out: _Collector):
    for r in np.flatnonzero(_rows_pending(pending)):
        keep = np.flatnonzero(~removed[r])
        kept = [exact_mpf(v) for v in x[r, keep]]
        for at, (rounded, value, err) in formula.exact(kept, keep, pending[r], out.fmt):
            out.put_exact((r, *at), rounded, value, err)
