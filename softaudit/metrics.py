"""Error measures and event classes, each defined once (docs/metrics.md says what each one means).

Everything here compares a candidate's output y (already in the audited dtype) with the reference: the exact
value r (hi + lo, within the reference's bound) and its correct rounding R. Per-case `measure` returns a Tally;
tallies of one family merge into one row of the results table.

(Longer than the house's 400 lines: every measure is defined once here, and they share the Basis they read and the Tally
they fill; docs/metrics.md follows the same order.)
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from . import kinds
from .reference import Format

FULLY_MASKED = ("zeros", "nan", "uniform", "other")  # what a candidate gives for a row with nothing kept


def ulp(r: np.ndarray, fmt: Format) -> np.ndarray:
    """ulp_D(r): the spacing of the format at |r|, with the subnormal spacing below the normal range (r = 0 too).

    Read from the exponent bits of r as a float64 (a subnormal or zero reads below every format's emin).
    """
    biased = np.ascontiguousarray(r, dtype=np.float64).view(np.int64) >> 52
    biased &= 0x7FF  # the biased exponent: binade + 1023
    np.maximum(biased, fmt.emin + 1023, out=biased)
    biased -= fmt.precision - 1  # the ulp's biased exponent (in place throughout: one array, no temporaries)
    if fmt.min_subnormal_exp < -1022:  # below float64's normal range (float64 itself, longdouble)
        return np.ldexp(1.0, biased - 1023)
    biased <<= 52
    return biased.view(np.float64)


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
    wrong_inf: int = 0  # not the exact result's infinity where it is one (-inf as a finite value, or +inf)
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
    max_cond_err: float = 0.0  # max |y - r| / (u max(scale, smallest normal)): error against the conditioning
    #: max |y - r| / (u max(scale + T, smallest normal)), T the standard algorithms' rounding budget (budget.line):
    #: the error against what rounding the inputs and a standard algorithm's intermediates can cost at most
    max_bound_err: float = 0.0
    #: max |y - r| / (u L), L the element's fail line (`fail_line`; policy.py): an accuracy defect past 1 (NaN where
    #: measured without a line)
    max_line_err: float = math.nan
    worst_line: float = math.nan  # L / scale at the worst element: the fail line there against the conditioning
    flushed: int = 0  # 0 where the correctly rounded result is a subnormal at least two spacings from 0
    subnormal_kept: int = 0  # a subnormal where the correctly rounded result is one: the arithmetic keeps them
    invariants: dict = dataclasses.field(default_factory=dict)  # invariant -> violations (softaudit/invariants.py)
    #: (cond error, case index, flat index, output there, common) of the worst element; common: the share of its
    #: error that one error common to its row explains (`_common_share`), None where the kind has no such measure
    worst: tuple | None = None
    event_at: tuple | None = None  # (case index, flat index) of the first NaN or inf where the result is finite

    def merge(self, other: Tally) -> None:
        for field in (
            "cases",
            "elements",
            "ulp_sum",
            "correctly_rounded",
            "ge2_ulp",
            "nan",
            "overflow",
            "wrong_inf",
            "underflow",
            "negative",
            "mask_leak",
            "argmax_flips",
            "undefined_rows",
            "nan_not_propagated",
            "flushed",
            "subnormal_kept",
        ):
            setattr(self, field, getattr(self, field) + getattr(other, field))
        for field in (
            "max_ulp",
            "max_rel_err",
            "max_abs_err",
            "sum_err",
            "max_ulp_vsum",
            "max_normwise",
            "max_cond_err",
            "max_bound_err",
        ):
            setattr(self, field, max(getattr(self, field), getattr(other, field)))
        self.max_line_err = float(np.fmax(self.max_line_err, other.max_line_err))
        for key, count in other.fully_masked.items():
            self.fully_masked[key] = self.fully_masked.get(key, 0) + count
        for key, count in other.invariants.items():
            self.invariants[key] = self.invariants.get(key, 0) + count
        if other.worst is not None and (self.worst is None or other.worst[0] > self.worst[0]):
            self.worst, self.worst_line = other.worst, other.worst_line
        self.event_at = self.event_at or other.event_at

    @property
    def mean_ulp(self) -> float:
        return self.ulp_sum / self.elements if self.elements else 0.0

    @property
    def invariants_broken(self) -> str:
        """The invariants with violations, as "name count; ..." (empty when none)."""
        return "; ".join(f"{k} {v}" for k, v in self.invariants.items() if v)

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


@dataclasses.dataclass
class Basis:
    """What one case's measures need from the reference, computed once and shared by every candidate."""

    kind: str
    fmt: Format
    rounded: np.ndarray  # R, float64
    hi: np.ndarray
    lo: np.ndarray | None  # None where every lo is 0 (tier A's approximations are single floats)
    defined: np.ndarray  # per element: its row is defined
    finite_ref: np.ndarray  # defined and R finite (and, for masked_softmax, a kept entry): the compared elements
    nonzero_ref: np.ndarray  # compared and R != 0 (0 there is an underflow)
    ulp: np.ndarray | None  # ulp_D(r), kept only where inv_ulp is None
    inv_ulp: np.ndarray | None  # 1 / ulp_D(r), exact (a power of two); None where it would overflow (float64)
    rel_per_ulp: np.ndarray  # ulp_D(r) / |r|, 0 where r is 0 or not finite: relative error = ULP error x this
    far_below: tuple[np.ndarray, np.ndarray]  # flat indices and |r| where ulp_D(r) / |r| overflows (r < 2**-1000 ulp)
    undefined: np.ndarray  # per row
    best: np.ndarray | None  # per row: the largest R (argmax flips)
    nothing_kept: np.ndarray | None = None
    kept_nan_rows: np.ndarray | None = None
    masked: np.ndarray | None = None
    ulp_vsum: np.ndarray | None = None
    inv_scale: np.ndarray | None = None  # 1 / max(scale, smallest normal) where compared, else 0 (times 2**p: 1 / u)
    #: 1 / max(scale + T, smallest normal) where compared, else 0: T the rounding budget of the standard algorithms
    #: (softaudit/budget.py, `line`); inv_reorder the same with dT, T less its pairwise sums' share (None: T = 0)
    inv_bound: np.ndarray | None = None
    inv_reorder: np.ndarray | None = None
    subnormal: np.ndarray | None = None  # R is a nonzero subnormal (None where no R is)
    #: None, or (flat indices, (r - hi) x 2**1074 there): the corrections a float64 lo cannot hold (|hi| < 2**-969,
    #: reference Result.fine); `_accuracy` measures these elements from them
    fine: tuple[np.ndarray, np.ndarray] | None = None

    @functools.cached_property
    def everything_compared(self) -> bool:
        """Every element is compared: with a finite output too, `measure` takes its short route."""
        return bool(self.finite_ref.all())


def smallest_normal(fmt: Format) -> float:
    """2**emin as a float64 (for formats below float64's range, float64's: its inverse must stay finite)."""
    return math.ldexp(1.0, max(fmt.emin, -1022))


def basis(
    kind: str,
    fmt: Format,
    ref,
    *,
    undefined,
    scale,
    nothing_kept=None,
    kept_nan_rows=None,
    masked=None,
    vsum=None,
    budget=None,
    reorder=None,
):
    """The reference side of one case's measures.

    ref: the reference Result. undefined: the rows left out of accuracy and events (a NaN or +inf logit, nothing
    kept). scale: the conditioning scale of each output (softaudit/conditioning.py). nothing_kept (masked kinds):
    rows or queries with nothing kept. kept_nan_rows: rows with a NaN among the kept inputs (their output must be
    NaN). masked: for masked_softmax, the masked entries (the output must be exactly 0 there). vsum: for
    attention, sum_j p_j |v_j| per output element. budget: the rounding budget T of each output of the standard
    algorithms (softaudit/budget.py, `line`), reorder dT, what their sums in another standard order cost beyond
    pairwise ones (None: 0).
    """
    k = kinds.get(kind)
    rounded = np.asarray(ref.value).astype(np.float64)
    undefined = np.asarray(undefined)
    # (undefined per row, or per element where it has the output's shape: merge_attention's lse)
    per_element = k.reduces or undefined.shape == rounded.shape
    defined = ~undefined if per_element else ~np.broadcast_to(undefined[..., None], rounded.shape)
    lo = ref.lo if ref.lo.any() else None
    r = ref.hi if lo is None else ref.hi + lo
    finite_ref = np.isfinite(rounded) & defined
    if masked is not None:
        finite_ref = finite_ref & ~masked
    fine = _fine(ref)
    ulp_r = _exact_ulp(r, ref.hi, lo, fine, fmt)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        rel_per_ulp = np.divide(ulp_r, np.abs(r), out=np.zeros(r.shape), where=finite_ref & (r != 0))
    far = np.flatnonzero(np.isinf(rel_per_ulp))  # (rare) their relative error is computed by division
    rel_per_ulp.flat[far] = 0.0
    # Multiplying by 1/ulp is exact and much faster than dividing; only float64's 2**-1074 has no finite inverse.
    inv_ulp = 1.0 / ulp_r if fmt.min_subnormal_exp >= -1022 else None
    best = None
    if "argmax_flips" in k.measures and rounded.shape[-1]:
        best = rounded.max(axis=-1)
        nan_rows = np.isnan(best)  # (max is NaN where a row has one: those rows again, NaN left out)
        if nan_rows.any():
            best[nan_rows] = np.where(np.isnan(rounded[nan_rows]), -np.inf, rounded[nan_rows]).max(axis=-1)
    ulp_vsum = None if vsum is None else ulp(vsum, fmt)
    ulp_kept = ulp_r if inv_ulp is None else None
    normal = smallest_normal(fmt)
    with np.errstate(invalid="ignore"):  # (1 / (u max(scale, 2**emin)) would overflow float64 for float64 itself)
        floored = np.maximum(np.nan_to_num(np.asarray(scale, dtype=np.float64)), normal)
        inv_scale = np.divide(1.0, floored, out=np.zeros(rounded.shape), where=finite_ref)
        inv_bound, inv_reorder = (_inverse(floored, t, normal, finite_ref) for t in (budget, reorder))
        subnormal = finite_ref & (np.abs(rounded) < normal) & (rounded != 0)
    return Basis(
        kind,
        fmt,
        rounded,
        ref.hi,
        lo,
        defined,
        finite_ref,
        finite_ref & (rounded != 0),
        ulp_kept,
        inv_ulp,
        rel_per_ulp,
        (far, np.abs(r.flat[far])),
        undefined,
        best,
        nothing_kept,
        kept_nan_rows,
        masked,
        ulp_vsum,
        inv_scale,
        inv_bound,
        inv_reorder,
        subnormal if subnormal.any() else None,
        fine,
    )


def _inverse(floored: np.ndarray, budget, normal: float, compared: np.ndarray) -> np.ndarray | None:
    """1 / max(scale + budget, normal) where compared, else 0 (None: no budget). A budget a formula could not form
    (NaN) is no bound: infinite, and the proven line is no line there."""
    if budget is None:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        bounded = np.maximum(floored + np.nan_to_num(np.asarray(budget, dtype=np.float64), nan=np.inf), normal)
        return np.divide(1.0, bounded, out=np.zeros(floored.shape), where=compared)


def _fine(ref) -> tuple[np.ndarray, np.ndarray] | None:
    """The reference's scaled corrections (Result.fine) where nonzero, as (flat indices, values): few, kept sparse."""
    if ref.fine is None:
        return None
    at = np.flatnonzero(ref.fine)
    return (at, np.ascontiguousarray(ref.fine.reshape(-1)[at])) if len(at) else None


def _exact_ulp(r: np.ndarray, hi: np.ndarray, lo: np.ndarray | None, fine, fmt: Format) -> np.ndarray:
    """ulp_D of the exact value hi + lo (+ fine's corrections), from its binade, not the float64 sum r's: where r is a
    power of two and the exact value lies just below it (0.5 - 2**-62 sums to 0.5), the ulp is the binade below's."""
    spacing = ulp(r, fmt)
    if lo is None and fine is None:
        return spacing
    with np.errstate(invalid="ignore"):
        below = np.zeros(r.shape, bool) if lo is None else np.sign((hi - r) + lo) * np.sign(r) < 0  # (exact residual)
        if fine is not None:
            at, correction = fine
            below.flat[at] = np.sign(np.ldexp(hi.flat[at] - r.flat[at], 1074) + correction) * np.sign(r.flat[at]) < 0
    if below.any():
        at = np.flatnonzero(below)
        spacing.flat[at] = ulp(np.nextafter(r.flat[at], 0.0), fmt)
    return spacing


def measure(b: Basis, y, *, case_index: int, line: tuple[float, float] | None = None) -> Tally:
    """Compare one case's output y (in the audited dtype) with its reference. line: (F, factor), what the element's
    fail line is drawn from (`fail_line`; None: max_line_err stays NaN, and F None: the proven line alone).

    Most outputs are finite where every element is compared; those skip the event masks (one short route, the
    same numbers: tests/test_metrics.py checks the two routes agree).
    """
    t = Tally(cases=1, undefined_rows=int(b.undefined.sum()))
    y = np.asarray(y)
    kind = kinds.get(b.kind)
    per_row = not kind.reduces
    if b.everything_compared and np.isfinite(y).all():
        # y stays in its dtype (comparisons in it are exact; sums are taken in float64), which saves a float64 copy
        nan_y, finite_y, compare = None, None, None  # no NaN, no infinity, every element compared
        zeros = y == 0
        t.underflow = int(np.count_nonzero(zeros & b.nonzero_ref)) if zeros.any() else 0
    else:
        y = y.astype(np.float64)
        nan_y = np.isnan(y)
        finite_y = np.isfinite(y)
        t.nan = int(np.count_nonzero(nan_y & b.defined & ~np.isnan(b.rounded)))
        t.overflow = int(np.count_nonzero(~finite_y & ~nan_y & b.finite_ref))
        inf_ref = b.defined & np.isinf(b.rounded)  # (log 0 = -inf: an empty lse, a loss on a -inf target)
        if inf_ref.any():
            t.wrong_inf = int(np.count_nonzero(inf_ref & ~nan_y & (y != b.rounded)))
        t.underflow = int(np.count_nonzero((y == 0) & b.nonzero_ref))
        compare = b.finite_ref & finite_y
        if t.nan or t.overflow:
            t.event_at = (case_index, int(np.flatnonzero(~finite_y & b.defined & ~np.isnan(b.rounded))[0]))
    if "negative" in kind.measures:
        t.negative = int(np.count_nonzero(y < 0))
    if b.masked is not None:
        t.mask_leak = int(np.count_nonzero(b.masked & b.defined & (y != 0)))
    diff = _accuracy(t, b, y, compare, case_index, line)
    if t.worst is not None and math.isfinite(t.worst[0]) and "argmax_flips" in kind.measures:
        t.worst = (*t.worst[:4], _common_share(kind, b, y, t.worst[2]))
    if not t.elements and (t.nan or t.overflow):
        bad = np.flatnonzero(~finite_y & b.finite_ref)
        t.worst = (math.inf, case_index, int(bad[0]), float(y.flat[bad[0]]), None) if len(bad) else None
    if "argmax_flips" in kind.measures and y.size and y.shape[-1]:  # (sum_err comes with it: the probability kinds)
        rows_ok = _rows_ok(b, finite_y)
        if "sum_err" in kind.measures:
            sums = np.abs(_finite_row_sums(y, finite_y) - 1) / 2.0 ** (1 - b.fmt.precision)
            t.sum_err = float(np.where(rows_ok, sums, 0).max(initial=0.0))
        chosen = np.argmax(y if nan_y is None else np.where(nan_y, -np.inf, y), axis=-1)
        chosen = np.take_along_axis(b.rounded, chosen[..., None], -1)[..., 0]
        t.argmax_flips = int(np.count_nonzero(rows_ok & (chosen < b.best)))
    if "sum_zero" in kind.measures and y.size and y.shape[-1]:  # softmax's VJP: sum_i dx_i = 0 exactly
        # u sum_i scale_i: at least u sum |r_i|, and not 0 where r is (a scale past float64's largest, whose
        # 1 / inv_scale overflows: inf, and the row's sum reads 0 against it)
        with np.errstate(divide="ignore", over="ignore"):
            size = np.where(b.inv_scale > 0, 1 / b.inv_scale, 0.0).sum(axis=-1) * 2.0**-b.fmt.precision
        sums = np.abs(_finite_row_sums(y, finite_y))
        with np.errstate(all="ignore"):
            ratio = np.where(size > 0, sums / np.where(size > 0, size, 1), np.where(sums > 0, np.inf, 0.0))
        t.sum_err = float(np.where(_rows_ok(b, finite_y), ratio, 0).max(initial=0.0))
    if b.kept_nan_rows is not None and b.kept_nan_rows.any():  # (such rows are undefined: not the short route)
        rows_nan = nan_y.all(axis=-1) if per_row else nan_y
        t.nan_not_propagated = int((b.kept_nan_rows & ~rows_nan).sum())
    if b.nothing_kept is not None and b.nothing_kept.any():
        for behaviour in _fully_masked_behaviour(y[b.nothing_kept]):
            t.fully_masked[behaviour] = t.fully_masked.get(behaviour, 0) + 1
    if "max_normwise" in kind.measures and t.elements:
        if b.ulp_vsum is not None:
            t.max_ulp_vsum = float((diff / b.ulp_vsum).max())
        r = b.hi if b.lo is None else b.hi + b.lo
        with np.errstate(all="ignore"):
            num = np.sqrt((diff**2).sum(axis=-1))
            den = np.sqrt((r**2 if compare is None else np.where(compare, r, 0) ** 2).sum(axis=-1))
            t.max_normwise = float(np.where(den > 0, num / np.where(den > 0, den, 1), 0).max(initial=0.0))
    return t


def _common_share(kind, b: Basis, y: np.ndarray, flat: int) -> float:
    """How much of the worst element's error one error common to its row explains, 0 to 1: a sum's error moves
    every output of a softmax row by one factor (y_i / r_i - 1 the same) and of a log-softmax row by one shift
    (y_i - r_i the same), while an approximate exp or a wrong term moves each output its own way. The common error
    is the median over the row's compared entries (normal results only, for the factor)."""
    n = y.shape[-1]
    row = slice(flat - flat % n, flat - flat % n + n)
    r = b.hi.reshape(-1)[row] + (0.0 if b.lo is None else b.lo.reshape(-1)[row])
    out = y.reshape(-1)[row].astype(np.float64)
    with np.errstate(all="ignore"):
        if kind.logarithmic:
            error, ok = out - r, np.isfinite(out) & b.finite_ref.reshape(-1)[row]
        else:
            error = out / r - 1
            ok = np.isfinite(error) & (np.abs(r) >= smallest_normal(b.fmt)) & b.finite_ref.reshape(-1)[row]
    own = float(error[flat % n]) if ok[flat % n] else math.nan
    if not ok.any() or not own or math.isnan(own):
        return math.nan
    return max(0.0, 1.0 - abs(own - float(np.median(error[ok]))) / abs(own))


def _rows_ok(b: Basis, finite_y) -> np.ndarray:
    """The defined rows whose outputs are all finite (finite_y None: every output is)."""
    return ~b.undefined if finite_y is None else ~b.undefined & finite_y.all(axis=-1)


def _finite_row_sums(y, finite_y) -> np.ndarray:
    """Each row's sum of its finite outputs, in float64."""
    return (y if finite_y is None else np.where(finite_y, y, 0)).sum(axis=-1, dtype=np.float64)


#: Elements per step of `_accuracy`: float64 temporaries just under 128 KiB stay in cache and in malloc's heap. Arrays
#: at or above its mmap threshold (128 KiB until a large free raises it) are mapped afresh and page-faulted on every
#: use, which costs more than the arithmetic (2**14 elements, exactly 128 KiB, is already past it).
CHUNK = (1 << 14) - 512


def fail_line(inv_scale, inv_bound, inv_reorder, line: tuple[float | None, float]):
    """1 / L at each element, L the element's fail line: an error past u L is an accuracy defect (docs/policy.md,
    "The fail line"). line (F, factor): with F None, L = factor (scale + T), T the standard algorithms' proven
    rounding budget; with F, the line measured on them (policy.fail_above, in units of the scale), L = max(min(F
    scale, factor (scale + T)), factor (scale + dT)), dT T's share from summing in another standard order."""
    measured, factor = line
    if measured is None:
        return inv_bound / factor
    return np.minimum(np.maximum(inv_scale / measured, inv_bound / factor), inv_reorder / factor)


def _accuracy(
    t: Tally, b: Basis, y: np.ndarray, compare: np.ndarray | None, case_index: int, line=None
) -> np.ndarray | None:
    """The error measures over the compared elements (compare None: all of them), a chunk at a time. For a kind
    with normwise measures (attention) returns |y - r| at every element (0 where not compared)."""
    flat = {
        name: None if a is None else a.reshape(-1)
        for name, a in (
            ("y", y),
            ("hi", b.hi),
            ("lo", b.lo),
            ("rounded", b.rounded),
            ("compare", compare),
            ("ulp", b.ulp),
            ("inv_ulp", b.inv_ulp),
            ("rel_per_ulp", b.rel_per_ulp),
            ("inv_scale", b.inv_scale),
            ("inv_bound", b.inv_scale if b.inv_bound is None else b.inv_bound),
            ("inv_reorder", b.inv_scale if b.inv_reorder is None else b.inv_reorder),
            ("subnormal", b.subnormal),
        )
    }
    whole = np.zeros(y.size) if "max_normwise" in kinds.get(b.kind).measures else None
    fine = _near(b.fine, flat)
    best, cond_best, worst, ulp_sum, same, ge2, rel, largest, flushed = -1.0, -1.0, 0, 0.0, 0, 0, 0.0, 0.0, 0
    bound_best, line_best = 0.0, 0.0
    kept = 0
    two_spacings = math.ldexp(2.0, b.fmt.min_subnormal_exp)
    normal = smallest_normal(b.fmt)
    per_u = math.ldexp(1.0, b.fmt.precision)  # 1 / u
    for start in range(0, y.size, CHUNK):
        f = {name: None if a is None else a[start : start + CHUNK] for name, a in flat.items()}
        with np.errstate(all="ignore"):
            y64 = f["y"].astype(np.float64, copy=False)
            diff = y64 - f["hi"]
            if f["lo"] is not None:
                diff -= f["lo"]
            np.abs(diff, out=diff)
            if f["compare"] is not None:
                diff[~f["compare"]] = 0.0
            if fine is not None:  # measured from their scaled corrections after the loop
                diff[_in_chunk(fine[0], start)] = 0.0
            errors = diff / f["ulp"] if f["inv_ulp"] is None else diff * f["inv_ulp"]  # exact either way
            cond = diff * f["inv_scale"]
            cond *= per_u
            bound = diff * f["inv_bound"]  # (0 where not compared: inv_bound is)
            past = None if line is None else diff * fail_line(f["inv_scale"], f["inv_bound"], f["inv_reorder"], line)
            if f["compare"] is not None:
                cond[~f["compare"]] = -1.0  # (the worst element is a compared one)
            if f["subnormal"] is not None:  # a subnormal result given as 0 is judged as a flush, not as accuracy
                zero = f["subnormal"] & (y64 == 0)
                if zero.any():
                    cond[zero] = 0.0
                    bound[zero] = 0.0
                    if past is not None:
                        past[zero] = 0.0
                    flushed += int(np.count_nonzero(zero & (np.abs(f["rounded"]) >= two_spacings)))
                kept += int(np.count_nonzero(f["subnormal"] & (y64 != 0) & (np.abs(y64) < normal)))
            top = float(cond.max())  # (argmax and the count of >= 2 ulps only where they can change a total)
            if top > cond_best:
                cond_best, worst = top, start + int(np.argmax(cond))
            bound_best = max(bound_best, float(bound.max()) * per_u)
            if past is not None:
                line_best = max(line_best, float(past.max()) * per_u)
            top = float(errors.max())
            best = max(best, top)
            if top >= 2:
                ge2 += int(np.count_nonzero(errors >= 2))
            ulp_sum += float(errors.sum())
            equal = y64 == f["rounded"]
            same += int(np.count_nonzero(equal if f["compare"] is None else equal & f["compare"]))
            scaled = errors * f["rel_per_ulp"]
            top = scaled.max()  # NaN where an infinite ULP error meets r = 0 (inf * 0): fmax, slower, skips those
            rel = max(rel, float(top if top == top else np.fmax.reduce(scaled)))
            largest = max(largest, float(diff.max()))
        if whole is not None:
            whole[start : start + CHUNK] = diff
    t.elements = y.size if compare is None else int(np.count_nonzero(compare))
    if t.elements:
        t.ulp_sum, t.max_ulp, t.correctly_rounded, t.ge2_ulp, t.max_abs_err = ulp_sum, best, same, ge2, largest
        t.max_cond_err, t.flushed, t.subnormal_kept = cond_best, flushed, kept
        t.max_bound_err = bound_best
        if line is not None:
            t.max_line_err = line_best
        far, size = b.far_below  # where ulp / |r| overflows: the relative error by division
        if len(far):
            lo = 0.0 if b.lo is None else flat["lo"][far]
            far_diff = np.abs((flat["y"][far].astype(np.float64) - flat["hi"][far]) - lo)
            with np.errstate(over="ignore"):  # (an error of 1 against an r of 1e-300 is a relative error of inf)
                relative = np.where(True if compare is None else flat["compare"][far], far_diff, 0.0) / size
            rel = max(rel, float(relative.max()))
        t.max_rel_err = rel
        if fine is not None:
            worst = _fine_accuracy(t, b, fine, flat, whole, worst, line)
        t.worst = (t.max_cond_err, case_index, worst, float(flat["y"][worst]), None)
        if line is not None:
            inverse = fail_line(*(flat[n][worst : worst + 1] for n in ("inv_scale", "inv_bound", "inv_reorder")), line)
            t.worst_line = float(flat["inv_scale"][worst] / inverse[0]) if inverse[0] > 0 else math.inf
    return None if whole is None else whole.reshape(y.shape)


def _near(fine, flat: dict):
    """The elements of b.fine whose output lies within 2**-960 of hi (None: none): elsewhere |y - hi| is so much
    larger than the correction (below 2**-1022) that the float64 difference measures it, and y - hi scaled by
    2**1074 would overflow (a float16 output next to an exact result below float64's range)."""
    if fine is None:
        return None
    at, correction = fine
    with np.errstate(invalid="ignore"):
        near = np.abs(flat["y"][at].astype(np.float64) - flat["hi"][at]) <= 2.0**-960
    return (at[near], correction[near]) if near.any() else None


def _in_chunk(at: np.ndarray, start: int) -> np.ndarray:
    """The indices among (sorted) `at` that fall in the chunk beginning at start, relative to it."""
    lo, hi = np.searchsorted(at, (start, start + CHUNK))
    return at[lo:hi] - start


def _fine_accuracy(t: Tally, b: Basis, fine: tuple, flat: dict, whole: np.ndarray | None, worst: int, line=None) -> int:
    """Fold into t the elements whose correction only b.fine holds (|hi| < 2**-969, float64 targets): y - hi is exact
    there (both on the 2**-1074 grid, close), so the error in units of 2**-1074 is |(y - hi) 2**1074 - fine| to a
    rounding, and every measure follows from it. Returns the worst element's flat index: one of them, or `worst` (the
    loop's)."""
    at, correction = fine
    y = flat["y"][at].astype(np.float64)
    keep = np.isfinite(y) if flat["compare"] is None else flat["compare"][at]
    at, correction, y = at[keep], correction[keep], y[keep]
    if not len(at):
        return worst
    units = np.abs(np.ldexp(y - flat["hi"][at], 1074) - correction)  # |y - r| / 2**-1074
    spacing = flat["ulp"][at] if flat["inv_ulp"] is None else 1 / flat["inv_ulp"][at]  # ulp_D(r)
    errors = units * (2.0**-1074 / spacing)  # (a power of two: exact)
    t.ulp_sum += float(errors.sum())
    t.max_ulp = max(t.max_ulp, float(errors.max()))
    t.ge2_ulp += int(np.count_nonzero(errors >= 2))
    with np.errstate(divide="ignore"):  # |y - r| / |r|, both in units of 2**-1074 (r is not 0 where fine is)
        t.max_rel_err = max(t.max_rel_err, float((units / np.abs(np.ldexp(flat["hi"][at], 1074) + correction)).max()))
    absolute = errors * spacing
    t.max_abs_err = max(t.max_abs_err, float(absolute.max()))
    cond = errors * (spacing * flat["inv_scale"][at]) * math.ldexp(1.0, b.fmt.precision)
    bound = errors * (spacing * flat["inv_bound"][at]) * math.ldexp(1.0, b.fmt.precision)
    inverse = (flat["inv_scale"][at], flat["inv_bound"][at], flat["inv_reorder"][at])
    past = bound if line is None else errors * spacing * fail_line(*inverse, line) * math.ldexp(1.0, b.fmt.precision)
    if flat["subnormal"] is not None:  # a subnormal result given as 0 is judged as a flush (as in the loop)
        for measured in (cond, bound, past):
            measured[flat["subnormal"][at] & (y == 0)] = 0.0
    t.max_bound_err = max(t.max_bound_err, float(bound.max()))
    if line is not None:
        t.max_line_err = max(t.max_line_err, float(past.max()))
    top = int(np.argmax(cond))
    if whole is not None:
        whole[at] = absolute
    if cond[top] > t.max_cond_err:
        t.max_cond_err = float(cond[top])
        return int(at[top])
    return worst
