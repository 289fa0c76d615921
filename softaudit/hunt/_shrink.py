"""Moving a failure that Hypothesis shrank to the boundary that matters.

Hypothesis shrinks the drawn recipe toward simple draws, which leaves an input that fails but need not sit where the
failure begins: a logit of 12 overflows float16's exp as 11.09 does, and a batch can keep rows the failure does not
need. Starting from the shrunk input, and keeping the failure (`fails`: the same first reason), this
0. drops each keyword the failure does not need (a softcap, a window, label smoothing: back to the default);
1. drops what the failure does not need, along each axis in turn (batch entries, rows or queries, keys, columns,
   splits),
   halves first, then smaller blocks, down to single entries: a sum over the whole array keeps two rows, a NaN on a
   fully masked row keeps that one row;
2. sets to 0 every element the failure does not need (whole arrays first, then halves, down to single elements);
3. moves each remaining element toward 0, the largest first, by bisection over the dtype's values in order: it ends
   at a value that fails next to one (one step nearer 0) that passes, the threshold of the failure; for an overflow,
   the smallest logit whose exp overflows in the candidate.
Every trial is one judged call of the candidate, so the whole is bounded by a deadline; what it has reached by then
is kept. The mask is left as it is (step 1 drops its rows and keys with the inputs').
"""

from __future__ import annotations

import re
import time

import numpy as np

from .. import kinds
from . import _bits

#: The axes of each input's trailing dimensions; leading ones are batch axes, matched from the right (a row kind's
#: rows are its batch axis: a cross-entropy target has one per row). merge_attention's inputs lead with the splits.
_ROW_AXES = {"x": ("n",), "logits": ("n",), "target": (), "g": ("n",), "mask": ("n",)}
_ATTENTION_AXES = {
    "q": ("lq", "d"),
    "k": ("lk", "d"),
    "v": ("lk", "dv"),
    "g": ("lq", "dv"),
    "mask": ("lq", "lk"),
    "bias": ("lq", "lk"),
    "sinks": (),
    "alibi_slopes": (),
    "outputs": ("lq", "dv"),
    "lses": ("lq",),
}
#: linear_cross_entropy's: rows of x (and their targets and g), hidden units, classes (the weight's rows, the bias).
_LINEAR_AXES = {"x": ("rows", "h"), "weight": ("v", "h"), "target": ("rows",), "g": ("rows",), "bias": ("v",)}
_LEADING = {"outputs": ("splits",), "lses": ("splits",)}
#: The most elements whose threshold is bisected (the largest first): each costs up to 64 judged calls.
MAX_BISECTED = 16


def signature(reason: str) -> str:
    """A reason's first finding (a row's note lists them split by "; ", the verdict's own first) with its numbers
    taken out: what stays the same while an input moves along its failure, whatever else it starts to show."""
    return re.sub(r"\d[\d.e+-]*", "#", reason.split("; ")[0])


def fails_as(first: str, judged, policy):
    """The test that an input fails as the one found did, whose first reason was `first`: judged(inputs, mask,
    options) gives a failing verdict whose first reason is `first`, numbers aside. An input the judge cannot judge (a
    skip, a comparison that raises) does not."""
    want = signature(first)

    def fails(inputs: dict, mask, options: dict) -> bool:
        try:
            verdict, reasons = judged(inputs, mask, options)[:2]
        except Exception:
            return False
        return policy.failed([verdict]) and bool(reasons) and signature(reasons[0]) == want

    return fails


def to_boundary(kind: str, inputs: dict, mask, options: dict, fails, deadline: float) -> tuple:
    """(inputs, mask, options) moved to the boundary of the failure `fails(inputs, mask, options)` tests, by
    `deadline` (a time.monotonic() value) at the latest."""
    options = dict(options)
    for name in list(options):
        fewer = {n: v for n, v in options.items() if n != name}
        if time.monotonic() < deadline and fails(inputs, mask, fewer):
            options = fewer
    arrays = dict(inputs) | ({} if mask is None else {"mask": np.asarray(mask)})
    labels = _labels(kind, arrays)

    def still(trial: dict) -> bool:
        values = {n: a for n, a in trial.items() if n != "mask"}
        return time.monotonic() < deadline and fails(values, trial.get("mask"), options)

    for label in dict.fromkeys(label for names in labels.values() for label in names):
        arrays = _drop(arrays, labels, label, still)
    arrays, labels = _squeeze(kind, arrays, labels, still)
    values = [n for n in arrays if n != "mask"]
    for name in values:
        arrays = _zero(arrays, name, still)
    for name, index in _largest(arrays, values)[:MAX_BISECTED]:
        arrays = _bisect(arrays, name, index, still)
    return {n: arrays[n] for n in values}, arrays.get("mask"), options


def _labels(kind: str, arrays: dict) -> dict[str, tuple[str, ...]]:
    """Each array's axes by name: trailing ones from the kind (x: n; q: lq, d; ...), leading ones batch0 (the
    innermost), batch1, ... after merge's splits. A row kind's g with one value per row (or one in all: a
    cross-entropy mean's) has no n."""
    entry = kinds.get(kind)
    trailing = _ROW_AXES if entry.row_wise else _LINEAR_AXES if "weight" in entry.inputs else _ATTENTION_AXES
    reduced = entry.reduction[0]
    out = {}
    for name, a in arrays.items():
        core, first = trailing[name], _LEADING.get(name, ())
        if entry.row_wise and name == "g" and a.ndim < arrays[reduced].ndim:
            core = ()
        lead = tuple(f"batch{i}" for i in reversed(range(max(0, a.ndim - len(core) - len(first)))))
        out[name] = (first + lead + core)[len(first + lead + core) - a.ndim :]
    return out


def _size(arrays: dict, labels: dict, label: str) -> int:
    return max(a.shape[labels[n].index(label)] for n, a in arrays.items() if label in labels[n])


def _without(arrays: dict, labels: dict, label: str, block: slice) -> dict:
    """The arrays with entries `block` of axis `label` taken out (an array broadcast along that axis is kept)."""
    size = _size(arrays, labels, label)
    out = {}
    for name, a in arrays.items():
        axis = labels[name].index(label) if label in labels[name] else None
        broadcast = axis is not None and a.shape[axis] == 1 and size > 1
        out[name] = a if axis is None or broadcast else np.delete(a, block, axis=axis)
    return out


def _drop(arrays: dict, labels: dict, label: str, still) -> dict:
    """Blocks of axis `label` dropped while the failure stays: halves, then quarters, ..., then single entries."""
    block = _size(arrays, labels, label) // 2
    while block >= 1:
        start = 0
        while start < _size(arrays, labels, label) and block < _size(arrays, labels, label):
            trial = _without(arrays, labels, label, slice(start, start + block))
            if still(trial):
                arrays = trial  # (the entries after the block slid into its place: try them at the same start)
            else:
                start += block
        block //= 2
    return arrays


def _squeeze(kind: str, arrays: dict, labels: dict, still) -> tuple[dict, dict]:
    """Attention's batch axes of size 1 taken out, if the failure stays (a row kind's x stays rows x n)."""
    if kinds.get(kind).row_wise:
        return arrays, labels
    every = dict.fromkeys(lb for names in labels.values() for lb in names)
    single = [lb for lb in every if lb.startswith("batch") and _size(arrays, labels, lb) == 1]
    axes = {n: tuple(labels[n].index(lb) for lb in single if lb in labels[n]) for n in arrays}
    squeezed = {n: np.squeeze(a, axis=axes[n]) for n, a in arrays.items()}
    if not single or not still(squeezed):
        return arrays, labels
    return squeezed, {n: tuple(lb for lb in names if lb not in single) for n, names in labels.items()}


def _zero(arrays: dict, name: str, still) -> dict:
    """Elements of one array set to 0 while the failure stays: the whole array, then halves, ..., then single
    elements."""
    block = arrays[name].size
    while block >= 1:
        for start in range(0, arrays[name].size, block):
            flat = arrays[name].reshape(-1)
            if not np.any(flat[start : start + block] != 0):
                continue
            trial = flat.copy()
            trial[start : start + block] = 0
            candidate = arrays | {name: trial.reshape(arrays[name].shape)}
            if still(candidate):
                arrays = candidate
        block //= 2
    return arrays


def _largest(arrays: dict, names: list[str]) -> list[tuple[str, int]]:
    """The nonzero, non-NaN elements that can be bisected, as (array, flat index), the largest magnitude first."""
    found = []
    for name in names:
        a = arrays[name]
        if not _bits.ordered(a.dtype):
            continue
        flat = a.reshape(-1).astype(np.float64)
        found += [(-abs(flat[i]), name, int(i)) for i in np.flatnonzero((flat != 0) & ~np.isnan(flat))]
    return [(name, i) for _, name, i in sorted(found)]


def _bisect(arrays: dict, name: str, index: int, still) -> dict:
    """One element moved toward 0 by bisection over the dtype's values: it ends failing, one value from passing."""
    a = arrays[name]
    value = a.reshape(-1)[index]
    negative = bool(value < 0)
    passes, fails = 0, _bits.key(value, a.dtype)  # (0 passes: the zero step would have kept it)

    def at(k: int) -> dict:
        flat = a.reshape(-1).copy()
        flat[index] = _bits.with_key(k, negative, a.dtype)
        return arrays | {name: flat.reshape(a.shape)}

    start = fails
    while fails - passes > 1:
        middle = (passes + fails) // 2
        if still(at(middle)):
            fails = middle
        else:
            passes = middle
    return arrays if fails == start else at(fails)
