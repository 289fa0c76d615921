"""Error measures and event classes, each defined once (docs/metrics.md says what each one means).

Everything here compares a candidate's output y (already in the audited dtype) with the reference: the exact
value r (hi + lo, within the reference's bound) and its correct rounding R. Per-case `measure` returns a Tally;
tallies of one family merge into one row of the results table.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .reference import Format

FULLY_MASKED = ("zeros", "nan", "uniform", "other")  # what a candidate gives for a row with nothing kept


def ulp(r: np.ndarray, fmt: Format) -> np.ndarray:
    """ulp_D(r): the spacing of the format at |r|, with the subnormal spacing below the normal range (r = 0 too)."""
    mag = np.abs(np.asarray(r, dtype=np.float64))
    with np.errstate(all="ignore"):
        binade = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
        binade = np.where(mag > 0, binade, fmt.emin)
        return np.exp2(np.maximum(binade, fmt.emin) - (fmt.precision - 1))


@dataclasses.dataclass
class Tally:
    """Running totals for one candidate x dtype x family."""

    cases: int = 0
    elements: int = 0  # compared elements: defined rows, finite reference and output
    ulp_sum: float = 0.0
    max_ulp: float = 0.0
    correctly_rounded: int = 0
    ge2_ulp: int = 0
    max_rel_err: float = 0.0
    max_abs_err: float = 0.0
    nan: int = 0
    overflow: int = 0
    underflow: int = 0
    negative: int = 0
    mask_leak: int = 0
    sum_err: float = 0.0  # max |sum p - 1| in ulps of 1
    argmax_flips: int = 0
    undefined_rows: int = 0
    nan_not_propagated: int = 0  # rows with a NaN in a kept entry whose output is not all NaN
    fully_masked: dict = dataclasses.field(default_factory=dict)  # behaviour -> rows
    max_ulp_vsum: float = 0.0  # attention: error in ulps of sum_j p_j |v_j|
    max_normwise: float = 0.0  # attention: max over queries of ||y - r|| / ||r||
    worst: tuple | None = None  # (ulp error, case index, flat index of the element) of the worst element

    def merge(self, other: Tally) -> None:
        for field in ("cases", "elements", "ulp_sum", "correctly_rounded", "ge2_ulp", "nan", "overflow", "underflow",
                      "negative", "mask_leak", "argmax_flips", "undefined_rows", "nan_not_propagated"):
            setattr(self, field, getattr(self, field) + getattr(other, field))
        for field in ("max_ulp", "max_rel_err", "max_abs_err", "sum_err", "max_ulp_vsum", "max_normwise"):
            setattr(self, field, max(getattr(self, field), getattr(other, field)))
        for key, count in other.fully_masked.items():
            self.fully_masked[key] = self.fully_masked.get(key, 0) + count
        if other.worst is not None and (self.worst is None or other.worst[0] > self.worst[0]):
            self.worst = other.worst

    @property
    def mean_ulp(self) -> float:
        return self.ulp_sum / self.elements if self.elements else 0.0

    @property
    def fully_masked_behaviour(self) -> str:
        """What fully masked rows gave: one of FULLY_MASKED, "mixed", or "" where there were none."""
        seen = [k for k, v in self.fully_masked.items() if v]
        return "" if not seen else seen[0] if len(seen) == 1 else "mixed"


def _fully_masked_behaviour(y_rows: np.ndarray) -> list[str]:
    out = []
    for row in y_rows.reshape(len(y_rows), -1):
        if np.isnan(row).all():
            out.append("nan")
        elif (row == 0).all():
            out.append("zeros")
        elif row.size and np.isfinite(row).all() and np.ptp(row) == 0:
            out.append("uniform")
        else:
            out.append("other")
    return out


def measure(kind: str, fmt: Format, y, ref, *, case_index: int, undefined, nothing_kept=None, kept_nan_rows=None,
            masked=None, vsum=None) -> Tally:
    """Compare one case's output with its reference.

    y: the candidate's output in the audited dtype; ref: the reference Result for the same inputs. undefined:
    the rows left out of accuracy and events (a NaN or +inf logit, nothing kept). nothing_kept (masked kinds): rows
    or queries with nothing kept. kept_nan_rows: rows with a NaN among the kept inputs (their output must be NaN).
    masked: for masked_softmax, the masked entries (the output must be exactly 0 there). vsum: for attention,
    sum_j p_j |v_j| per output element.
    """
    t = Tally(cases=1)
    y = np.asarray(y).astype(np.float64)
    rounded = np.asarray(ref.value).astype(np.float64)
    r_hi, r_lo = ref.hi, ref.lo
    per_row = kind != "logsumexp"
    undefined = np.asarray(undefined)
    defined = ~np.broadcast_to(undefined[..., None], y.shape) if per_row else ~undefined
    t.undefined_rows = int(undefined.sum())
    finite_ref = np.isfinite(rounded) & defined
    t.nan = int((np.isnan(y) & defined & ~np.isnan(rounded)).sum())
    t.overflow = int((np.isinf(y) & finite_ref).sum())
    t.underflow = int(((y == 0) & (rounded != 0) & finite_ref).sum())
    if kind in ("softmax", "masked_softmax"):
        t.negative = int((y < 0).sum())
    compare = finite_ref & np.isfinite(y)
    if masked is not None:
        leak = masked & defined & (y != 0)
        t.mask_leak = int(leak.sum())
        compare &= ~masked
    with np.errstate(all="ignore"):
        diff = np.abs((y - r_hi) - r_lo)
        errors = np.where(compare, diff / ulp(r_hi + r_lo, fmt), 0.0)
        rel = np.where(compare & (r_hi != 0), diff / np.abs(r_hi + r_lo), 0.0)
    t.elements = int(compare.sum())
    if t.elements:
        t.ulp_sum = float(errors.sum())
        t.max_ulp = float(errors.max())
        t.correctly_rounded = int((compare & (y == rounded)).sum())
        t.ge2_ulp = int((errors >= 2).sum())
        t.max_rel_err = float(rel.max())
        t.max_abs_err = float(np.where(compare, diff, 0.0).max())
        t.worst = (t.max_ulp, case_index, int(np.argmax(errors)))
    elif (t.nan or t.overflow) and t.worst is None:
        bad = np.flatnonzero((np.isnan(y) | np.isinf(y)) & finite_ref)
        t.worst = (math.inf, case_index, int(bad[0])) if len(bad) else None
    if kind in ("softmax", "masked_softmax") and y.size:
        rows_ok = ~undefined & np.isfinite(y).all(axis=-1)
        with np.errstate(all="ignore"):
            sums = np.abs(np.where(np.isfinite(y), y, 0).sum(axis=-1) - 1) / 2.0 ** (1 - fmt.precision)
        t.sum_err = float(np.where(rows_ok, sums, 0).max(initial=0.0))
    if per_row and kind != "attention" and y.size and y.shape[-1]:
        rows_ok = ~undefined & np.isfinite(y).all(axis=-1)
        with np.errstate(invalid="ignore"):
            chosen = np.take_along_axis(rounded, np.argmax(np.where(np.isnan(y), -np.inf, y), axis=-1)[..., None], -1)[..., 0]
            best = np.where(np.isnan(rounded), -np.inf, rounded).max(axis=-1)
        t.argmax_flips = int((rows_ok & (chosen < best)).sum())
    if kept_nan_rows is not None and kept_nan_rows.any():
        rows_y = y if per_row else y[..., None]
        t.nan_not_propagated = int((kept_nan_rows & ~np.isnan(rows_y).all(axis=-1)).sum())
    if nothing_kept is not None and nothing_kept.any():
        for behaviour in _fully_masked_behaviour(y[nothing_kept]):
            t.fully_masked[behaviour] = t.fully_masked.get(behaviour, 0) + 1
    if kind == "attention" and t.elements:
        with np.errstate(all="ignore"):
            if vsum is not None:
                t.max_ulp_vsum = float(np.where(compare, diff / ulp(vsum, fmt), 0).max())
            num = np.sqrt((np.where(compare, diff, 0) ** 2).sum(axis=-1))
            den = np.sqrt((np.where(compare, r_hi + r_lo, 0) ** 2).sum(axis=-1))
            t.max_normwise = float(np.where(den > 0, num / np.where(den > 0, den, 1), 0).max(initial=0.0))
    return t
