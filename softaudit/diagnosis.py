"""Diagnosis: the cause of a failing or warning row, named only where a bug model reproduces the candidate's output.

A bug model (softaudit.candidates.bugs) is a kind's standard algorithm with one known mistake, beside the same
algorithm without it, its fix. On a row's cases (first that of its first NaN or inf, then that of its worst element;
judge._finding) each variant of each model of the kind is run, and a model is named where, on one case:

1. its output has the candidate's NaN and infinities, element for element, and its fix's has the exact result's
   (where that is defined: what an undefined row gives is the policy's rules');
2. where the candidate and the fix differ by an event (NaN, infinities, a leak onto masked entries, zeros where the
   exact result is not 0, which the model has exactly), the finite outputs agree within the row's fail line or a
   quarter of the candidate's error; else, for an error of at least 2 u of the conditioning scale, the model's
   output is within a quarter of the candidate's error of the candidate's output (both in units of the
   conditioning, as max_cond_err reads), and its fix within half of it of the exact result; or, for an error of
   any size, the model gives the candidate's bits exactly where its fix, closer to the exact result, does not;
3. a masked entry's output agrees with the candidate's to within 2**-(p / 2) of its size, so a leak is reproduced
   by a leak.

Several models may pass: the closest is named and the others listed, unless another is within a factor of 2 of
it, when the finding names each ("a or b"). Where none passes the row is "unexplained": its note describes the
error (a constant ratio to the exact value, NaN where the result is defined, ...) and it gets
no fix. The magnitude bands of softaudit/causes.py still describe the worst element; they no longer choose a fix.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import weakref

import numpy as np

from . import causes, kinds
from ._threads import one_thread
from .candidates.bugs import cause_of as cause_of
from .candidates.bugs import models
from .reference import Format

#: A model reproduces an error when its output is within this share of the error of the candidate's output.
REPRODUCES = 0.25
#: An error without events is reproduced only where it is at least this many u of the conditioning scale: below,
#: one rounding more or less (a sum in another order) is all that tells two algorithms apart.
NOTICEABLE = 2.0
#: Its fix does not have the error when the fix's output is within this share of the error of the exact result.
FIXED = 0.5
#: The cases of a row that are tried, at most, those that show the error most first (`worst_cases`).
CASES = 3
#: An output matching a neighbouring convention's exact result (Kind.conventions: a causal or window alignment, a
#: cap after the mask, ...), which the note names: that exact result is the reproduction.
OTHER_CONVENTION = "other_convention"
CONVENTION_FIX = (
    "implement the convention the candidate declares (or the default), or declare the one it implements "
    "(conventions=, docs/policy.md)"
)
#: The findings that are not a bug model's: the reruns measure them directly (softaudit/reproducibility.py).
MEASURED = ("nondeterministic", "batch_variant", "split_variant")


@dataclasses.dataclass(frozen=True)
class Finding:
    """What diagnosis found for a row: the finding's name (a model's, or "unexplained"), its fix (the model's;
    "" where unexplained), the sentence for the note, and the other models that reproduce the output too."""

    name: str
    fix: str = ""
    text: str = ""
    also: tuple[str, ...] = ()


UNEXPLAINED = "unexplained"
#: Models whose outputs are within this factor of the closest one's distance are tied: the finding names each.
TIED = 2.0
_EPS = 1e-9


def diagnose(kind: str, fmt: Format, pc, outputs: tuple, index: int, fail_line: float) -> Finding:
    """The finding for the candidate's `outputs` on the prepared case `pc` (the whole case: every output), judged
    on output `index`, for a row whose fail line is `fail_line` (in units of the conditioning). Where several
    models reproduce the output equally, the finding names them all ("a or b"): another case may tell them apart
    (`ambiguous`)."""
    entry = kinds.get(kind)
    basis = pc.output(index).basis
    y = np.asarray(outputs[index])
    mask, options = pc.problem  # (a declared convention's problem in the default's terms: the models compute it)
    inputs, rows = pc.inputs, None
    if _rows_apart(entry, options, y):  # (the models run on the rows that show the error, not on every row)
        inputs, mask, basis, y, rows = _worst_rows(inputs, mask, basis, y, fmt)
    exact = _exact(basis)
    error = _compare(y, exact, basis, fmt).distance
    error = 0.0 if math.isnan(error) else error
    args, kwargs = entry.call_arguments(inputs, mask)
    kwargs = {n: a for n, a in kwargs.items() if n not in entry.optional} | dict(options)  # (models read k and v)

    def output(fn):  # (a model's output on these inputs: the same for every candidate diagnosed on them)
        return _OUTPUTS.get(pc, (rows, fn, index), lambda: _call(fn, args, kwargs, index))

    found = []  # (distance, model, the labels of its variants that reproduce the output at that distance)
    fixes: dict = {}  # each fix's (output, against the exact result, against y), by function: variants share fixes
    with one_thread():  # (one BLAS thread, as candidates have: a product's last bits move with the thread count)
        for model in models(kind):
            best = (math.inf, [])
            for variant in model.variants:
                m = output(variant.buggy)
                if m is None or m.size != y.size:
                    continue  # (a mean may come as () or (1,): the audit reads its size)
                with_model = _compare(y, m, basis, fmt)
                if not _near(with_model, error, fail_line):
                    continue
                if variant.fixed not in fixes:
                    f = output(variant.fixed)
                    usable = f is not None and f.size == y.size
                    fixes[variant.fixed] = (
                        (f, _compare(f, exact, basis, fmt, defined_only=True), _compare(y, f, basis, fmt))
                        if usable
                        else None
                    )
                if fixes[variant.fixed] is None:
                    continue
                f, fixed, with_fix = fixes[variant.fixed]
                d = _reproduces(y, m, f, exact, error, basis, (with_model, fixed, with_fix), fail_line, model.events)
                if d is not None and d <= best[0]:
                    best = (d, [*best[1], variant.label] if d == best[0] else [variant.label])
            if best[1]:
                found.append((best[0], model, best[1]))
    if not found:
        why = describe(y, exact, basis)
        return Finding(UNEXPLAINED, "", f"{UNEXPLAINED} (no bug model reproduces the output): {why}")
    found.sort(key=lambda f: f[0])
    tied = [f for f in found if f[0] <= TIED * found[0][0] + _EPS]
    if len(tied) > 1:
        names = " or ".join(m.name for _, m, _ in tied)
        mistakes = ", or ".join(m.mistake for _, m, _ in tied)
        each = " / ".join(m.fix.replace("{wide}", causes.wider(fmt)) for _, m, _ in tied)
        return Finding(names, each, f"{names}: {mistakes} (each reproduces it)")
    d, model, labels = found[0]
    fix = model.fix.replace("{wide}", causes.wider(fmt))
    also = tuple(m.name for _, m, _ in found[1:])
    others = f", and {', '.join(also)} less closely" if also else ""
    text = f"{model.name}: {model.mistake} (a model of it, {' or '.join(labels)}, reproduces the output{others})"
    return Finding(model.name, fix, text, also)


#: The rows of a row-wise kind's case the models run on: those that show the error most (events first).
ROWS = 4


@dataclasses.dataclass(frozen=True)
class _Rows:
    """The part of a case's Basis the diagnosis reads, for some of its rows."""

    fmt: Format
    hi: np.ndarray
    lo: np.ndarray | None
    rounded: np.ndarray
    defined: np.ndarray
    finite_ref: np.ndarray | None = None
    inv_scale: np.ndarray | None = None


def _rows_apart(entry, options: dict, y: np.ndarray) -> bool:
    """Whether a case's rows can be diagnosed apart: a row-wise kind whose output is per row (not a mean or sum over
    the rows), with more rows than `ROWS`."""
    if not entry.row_wise or options.get("reduction", "none") != "none":
        return False
    rows = y.size if entry.reduces else y.size // max(y.shape[-1] if y.ndim else 1, 1)
    return rows > ROWS


def _worst_rows(inputs: dict, mask, basis, y: np.ndarray, fmt: Format):
    """The case cut to its `ROWS` rows that show the error most: those with an event (NaN or infinity where the exact
    result differs, a zero where it is not 0, probability on a masked entry) first, then by their largest error
    against the conditioning. Returns (inputs, mask, basis, y) of those rows and the rows' indices, a tuple."""
    n = 1 if y.ndim == 0 else y.shape[-1]
    reduces = y.ndim < np.ndim(inputs[next(iter(inputs))])  # (logsumexp: one output per row)
    width = 1 if reduces else n
    ys = np.asarray(y, np.float64).reshape(-1, width)
    exact = _exact(basis).reshape(-1, width)
    inv = np.zeros(ys.shape) if basis.inv_scale is None else np.asarray(basis.inv_scale, np.float64).reshape(ys.shape)
    compared = np.asarray(basis.finite_ref).reshape(ys.shape)
    with np.errstate(all="ignore"):
        events = (np.isnan(ys) != np.isnan(exact)) | (np.isinf(ys) & (ys != exact)) | ((ys == 0) & (exact != 0))
        events |= ~compared & np.isfinite(ys) & (ys != 0) & (exact == 0)
        error = np.where(compared & np.isfinite(ys), np.abs(ys - exact) * inv, 0.0).max(axis=1)
    order = np.lexsort((-error, ~events.any(axis=1)))[:ROWS]
    rows = np.sort(order)
    lead = ys.shape[0]
    x_shape = np.shape(inputs[next(iter(inputs))])
    cut_inputs = {name: _cut_rows(a, x_shape, rows) for name, a in inputs.items()}

    def part(a):
        return None if a is None else np.broadcast_to(np.asarray(a), np.shape(y)).reshape(lead, width)[rows]

    view = _Rows(fmt, part(basis.hi), part(basis.lo), part(basis.rounded), part(basis.defined))
    view = dataclasses.replace(view, finite_ref=part(basis.finite_ref), inv_scale=part(basis.inv_scale))
    out_shape = (len(rows),) if reduces else (len(rows), width)
    y_rows = np.asarray(y).reshape(lead, width)[rows].reshape(out_shape)
    return cut_inputs, _cut_rows(mask, x_shape, rows), view, y_rows, tuple(rows.tolist())


def _cut_rows(a, x_shape: tuple, rows: np.ndarray):
    """Some rows of an input: one of x's rank broadcast to x's shape and its leading axes flattened (the last axis
    kept), one with a value per row (logsumexp_grad's g) flattened; anything else (a scalar) kept whole."""
    if a is None:
        return None
    a = np.asarray(a)
    if a.ndim == len(x_shape):
        return np.broadcast_to(a, x_shape).reshape(-1, x_shape[-1])[rows]
    if a.shape == x_shape[:-1]:
        return a.reshape(-1)[rows]
    return a


def worst_cases(prepared: dict, outputs: dict, index: int) -> list[int]:
    """The cases of a family (prepared: by their index in it) in the order diagnosis tries them, `CASES` at most:
    those where the candidate's output shows an event (a NaN or infinity, also on a row whose result is undefined,
    a zero where the exact result is not 0, probability on a masked entry) first, then by their largest error
    against the conditioning."""
    ranked = []
    for case, ys in outputs.items():
        if case not in prepared:
            continue
        basis = prepared[case].output(index).basis
        y = np.asarray(ys[index], np.float64).reshape(-1)
        exact = _exact(basis).reshape(-1)
        compared = np.asarray(basis.finite_ref).reshape(-1)
        inv = np.zeros(y.shape) if basis.inv_scale is None else np.asarray(basis.inv_scale, np.float64).reshape(-1)
        with np.errstate(all="ignore"):
            event = (~np.isfinite(y) & (y != exact)) | ((y == 0) & (exact != 0))
            event |= ~compared & np.isfinite(y) & (y != 0) & (exact == 0)
            error = np.where(compared & np.isfinite(y), np.abs(y - exact) * inv, 0.0).max(initial=0.0)
        ranked.append((not event.any(), -error, case))
    return [case for _, _, case in sorted(ranked)[:CASES]]


def ambiguous(name: str) -> bool:
    """Whether a finding's name names several models that reproduce the output equally."""
    return " or " in name


@dataclasses.dataclass(frozen=True)
class _Compared:
    """Two outputs side by side: whether their NaN and infinities are at the same elements, and the largest
    distance of their finite compared elements in units of the conditioning (NaN where none is compared)."""

    same_events: bool
    distance: float
    masked_apart: bool


def _compare(a: np.ndarray, b: np.ndarray, basis, fmt: Format, defined_only: bool = False) -> _Compared:
    """a and b compared; defined_only: only where the exact result is defined (what a row with nothing to attend
    or a NaN input must give is the policy's, judged by its own rules)."""
    a, b = np.asarray(a, np.float64).reshape(-1), np.asarray(b, np.float64).reshape(-1)
    if defined_only:
        defined = np.broadcast_to(np.asarray(basis.defined), np.shape(basis.rounded)).reshape(-1)
        a, b = np.where(defined, a, 0.0), np.where(defined, b, 0.0)
    same = all(bool((test(a) == test(b)).all()) for test in (np.isnan, np.isposinf, np.isneginf))
    finite = np.isfinite(a) & np.isfinite(b)
    inv = np.zeros(a.shape) if basis.inv_scale is None else np.asarray(basis.inv_scale, np.float64).reshape(-1)
    compared = finite & (inv > 0)
    with np.errstate(all="ignore"):
        far = np.abs(a - b)[compared] * inv[compared]
        distance = float(far.max() * 2.0**fmt.precision) if far.size else math.nan
        rest = finite & ~compared
        size = np.maximum(np.maximum(np.abs(a), np.abs(b)), math.ldexp(1.0, max(fmt.emin, -1074)))
        apart = bool((np.abs(a - b)[rest] > size[rest] * 2.0 ** (-fmt.precision / 2)).any()) if rest.any() else False
    return _Compared(same, distance, apart)


def _exact(basis) -> np.ndarray:
    """The exact result where it is defined (hi + lo), the correctly rounded one's NaN and infinities elsewhere."""
    exact = np.asarray(basis.hi, np.float64) + (0.0 if basis.lo is None else np.asarray(basis.lo, np.float64))
    return np.where(np.isfinite(basis.rounded), exact, basis.rounded)


def _reproduces(y, m, f, exact, error: float, basis, compared: tuple, fail_line: float, events=True) -> float | None:
    """The distance of the buggy model's output m from the candidate's y where the model reproduces y and its fix
    f does not have y's error (None otherwise). compared: (y against m, f against the exact result where it is
    defined, y against f), `_compare`'s. The evidence is an event where y and f differ in their NaN and
    infinities, or on masked entries (a leak); else an error of at least NOTICEABLE."""
    with_model, fixed, with_fix = compared
    if not with_model.same_events or with_model.masked_apart:
        return None
    if not fixed.same_events or fixed.masked_apart:
        return None
    d = 0.0 if math.isnan(with_model.distance) else with_model.distance
    if not with_fix.same_events or with_fix.masked_apart or _zeros_apart(y, m, f, exact, basis):
        # (an event: its pattern is the evidence, for a model whose mistake an event names)
        return d if events and d <= max(fail_line, REPRODUCES * error) else None
    off = 0.0 if math.isnan(fixed.distance) else fixed.distance
    if d == 0 and off < error and _differ(y, f):  # (the model gives the kernel's bits where its fix does not)
        return d
    return d if error >= NOTICEABLE and d <= REPRODUCES * error and off <= FIXED * error else None


def _near(c: _Compared, error: float, fail_line: float) -> bool:
    """Whether a model's output, `c` against the candidate's, can reproduce it at all (its events, its leak, and
    the loosest distance `_reproduces` accepts): the fix is computed only for those."""
    d = 0.0 if math.isnan(c.distance) else c.distance
    return c.same_events and not c.masked_apart and d <= max(fail_line, REPRODUCES * error)


def _differ(a, b) -> bool:
    """Whether two outputs differ in some element's bits (NaN equal to NaN)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return bool((~((a == b) | (np.isnan(a) & np.isnan(b)))).any())


def _zeros_apart(y, m, f, exact, basis) -> bool:
    """Whether y's zeros where the exact result is not 0 are the evidence: the model has exactly those, its fix
    none of them (a log of a sum that rounds to 1, a flush, an underflowed intermediate)."""
    compared = np.asarray(basis.finite_ref).reshape(-1) & (np.asarray(exact).reshape(-1) != 0)
    zeros = [(np.asarray(a, np.float64).reshape(-1) == 0) & compared for a in (y, m, f)]
    return bool(zeros[0].any() and (zeros[0] == zeros[1]).all() and not (zeros[2] & zeros[0]).any())


class _Kept:
    """Model outputs kept between the rows diagnosed, least recently used first out past `limit` bytes: the
    candidates of a kind that warn on one case are diagnosed on the same inputs (the same rows of it), and a model's
    output depends on those alone. An output is kept by its case's id with a weak reference to the case: it does not
    keep the case alive, and a case that comes to have a dead one's id does not find its outputs."""

    def __init__(self, limit: int):
        self.limit, self.size, self.kept = limit, 0, collections.OrderedDict()

    def get(self, pc, key: tuple, compute):
        key = (id(pc), *key)
        if key in self.kept and self.kept[key][0]() is pc:
            self.kept.move_to_end(key)
            return self.kept[key][1]
        value = compute()
        self._drop(key)
        self.kept[key] = (weakref.ref(pc), value)
        self.size += _nbytes(value)
        while self.size > self.limit and len(self.kept) > 1:
            self._drop(next(iter(self.kept)))
        return value

    def _drop(self, key) -> None:
        if key in self.kept:
            self.size -= _nbytes(self.kept.pop(key)[1])


def _nbytes(value) -> int:
    return 0 if value is None else value.nbytes


_OUTPUTS = _Kept(64 << 20)


def _call(fn, args, kwargs, index: int) -> np.ndarray | None:
    """A model's output `index` on the case (None where the variant does not apply or cannot run it)."""
    try:
        with np.errstate(all="ignore"):
            out = fn(*args, **kwargs)
    except Exception:  # (Inapplicable; a model that cannot take an input, option or shape explains nothing there)
        return None
    out = out if isinstance(out, tuple) else (out,)
    return np.asarray(out[index]) if index < len(out) else None


#: A shape of the error (a ratio, an offset) is named where it holds on at least this share of the elements.
MOST = 0.9


def _share(alike: np.ndarray) -> str:
    return "every one of the" if alike.all() else f"{int(alike.sum())} of {alike.size}"


def describe(y: np.ndarray, exact: np.ndarray, basis) -> str:
    """The error in words, for an output no model reproduces: NaN or inf where the result is finite, a constant
    ratio or offset to the exact value, or where the largest error is."""
    y, exact = np.asarray(y, np.float64).reshape(-1), np.asarray(exact, np.float64).reshape(-1)
    defined = np.isfinite(exact)
    bad = defined & ~np.isfinite(y)
    if bad.any():
        what = "NaN" if np.isnan(y[bad]).any() else "inf"
        return f"{what} at {int(bad.sum())} of {int(defined.sum())} elements where the exact result is finite"
    normal = math.ldexp(1.0, max(basis.fmt.emin, -1074))  # (below, a result keeps fewer bits: no ratio holds)
    compared = defined & (np.abs(exact) >= normal) & np.isfinite(y)
    if not compared.any():
        return "nothing finite to compare"
    ratio = y[compared] / exact[compared]
    middle = float(np.median(ratio))
    alike = np.abs(ratio - middle) <= 1e-3 * abs(middle)
    if middle != 0 and abs(middle - 1) > 1e-2 and alike.mean() >= MOST:
        return f"the output is {middle:.4g}x the exact value on {_share(alike)} compared elements"
    offset = y[compared] - exact[compared]
    off = float(np.median(offset))
    alike = np.abs(offset - off) <= 1e-3 * abs(off)
    if off != 0 and compared.sum() > 1 and alike.mean() >= MOST:
        return f"the output is the exact value {off:+.4g} on {_share(alike)} compared elements"
    worst = int(np.argmax(np.abs(offset)))
    flat = int(np.flatnonzero(compared)[worst])
    wrong = int((np.abs(offset) > 1e-3 * np.abs(exact[compared])).sum())
    return (
        f"{wrong} of {int(compared.sum())} compared elements are more than 0.1% off (the worst, element {flat}: "
        f"{y[flat]:.6g} where the exact value is {exact[flat]:.6g})"
    )
