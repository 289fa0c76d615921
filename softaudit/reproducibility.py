"""Reproducibility, measured beside accuracy: whether a candidate gives the same bits when the same call is made
again (run to run), and whatever batch an input is part of (batch invariance). docs/metrics.md defines the columns.

A case's batch items are the rows of a row kind (x's leading axes, flattened) and the (batch, head) entries of
attention (the axes before the last two of q, k, v, g and the mask, flattened; a 2-D case is one item; where k and
v are shared by query heads or batch entries, their gradients sum over them and nothing is rerun). After the
candidate's own call come: the same call again; the first item alone (batch size 1); every item moved
to a new place in a batch of 2 R + 2 (R items), among random batch-mates drawn like the case's values and padding
(zeros, with nothing kept where the case has a mask); and, for the attention forward, the last query alone (a
decode step after a prefill). An output of these calls has moved where it differs from the candidate's own call
by more than the two runs of that call differ anywhere on the case (in ulps): a candidate whose outputs wobble by
an ulp from run to run is nondeterministic, and batch-variant only past that wobble.

Outputs are compared as values (0 and -0 are equal, as are two NaNs); a move is measured in ulps of the dtype at
the larger of the two values.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import NamedTuple

import numpy as np

from . import kinds
from .invariants import _differ, round_to

#: Cases whose inputs hold more elements than this are not rerun (each rerun is another call, the embedding batch
#: twice the case): rows of 4,096 and the attention families' sizes already show a batch heuristic.
MAX_ELEMENTS = 1 << 16
#: The first this many cases of a family are rerun: each costs three or four more calls, which would double the
#: main job's time if every case were rerun, and a batch heuristic shows on any case.
CASES = 2

#: What `--require` can ask for (softaudit.settings.REQUIREMENTS), and the rule each turns a difference into.
RULES = {"deterministic": "nondeterministic", "batch-invariant": "batch_variant", "split-invariant": "split_variant"}
#: The keywords by which an attention candidate says how it splits the keys, and the values it is called with
#: beside its own choice (those that split the case's keys at all: num_splits up to the keys, blocks below them).
SPLITS = {"num_splits": (1, 2, 3, 4, 8), "block_size": (16, 32, 64, 128)}


@dataclasses.dataclass
class Moved:
    """One output's differences over a family: outputs compared and moved run to run and between batches, the
    largest move in ulps, and the batch sizes compared (the item counts of the calls)."""

    repeat_checked: int = 0
    repeat_moved: int = 0
    repeat_ulp: float = 0.0
    batch_checked: int = 0
    batch_moved: int = 0
    batch_ulp: float = 0.0
    batch_sizes: frozenset = frozenset()
    last_query: bool = False  # the attention forward's last query was rerun alone too
    split_checked: int = 0  # outputs compared between the key splits (a candidate that takes one of SPLITS)
    split_moved: int = 0
    split_ulp: float = 0.0
    splits: frozenset = frozenset()  # (keyword, value) of the splits compared with the candidate's own choice

    def merge(self, other: Moved) -> None:
        for field in ("repeat_checked", "repeat_moved", "batch_checked", "batch_moved", "split_checked", "split_moved"):
            setattr(self, field, getattr(self, field) + getattr(other, field))
        self.repeat_ulp = max(self.repeat_ulp, other.repeat_ulp)
        self.batch_ulp = max(self.batch_ulp, other.batch_ulp)
        self.split_ulp = max(self.split_ulp, other.split_ulp)
        self.batch_sizes = self.batch_sizes | other.batch_sizes
        self.splits = self.splits | other.splits
        self.last_query = self.last_query or other.last_query

    def columns(self) -> dict:
        """The table's columns: the share of outputs that moved and the largest move (NaN where nothing was rerun)."""
        nan = float("nan")
        repeat = self.repeat_checked > 0
        batch = self.batch_checked > 0
        split = self.split_checked > 0
        return {
            "repeat_differ": self.repeat_moved / self.repeat_checked if repeat else nan,
            "repeat_ulp": self.repeat_ulp if repeat else nan,
            "batch_differ": self.batch_moved / self.batch_checked if batch else nan,
            "batch_ulp": self.batch_ulp if batch else nan,
            "split_differ": self.split_moved / self.split_checked if split else nan,
            "split_ulp": self.split_ulp if split else nan,
        }

    def broken(self) -> dict[str, str]:
        """requirement -> what broke it, in words, for each requirement (`RULES`) the outputs broke: "not
        batch-invariant: 11% of outputs move by up to 2 ulps between batch sizes 1, 8 and 18"."""
        texts = {}
        if self.repeat_moved:
            texts["deterministic"] = (
                f"not deterministic: {_share(self.repeat_moved, self.repeat_checked)} of outputs move by up to "
                f"{_ulps(self.repeat_ulp)} between two runs of the same call"
            )
        if self.batch_moved:
            sizes = sorted(self.batch_sizes)
            listed = f"from {sizes[0]} to {sizes[-1]}" if len(sizes) > 4 else _listed(sizes)
            query = " (and the last query alone)" if self.last_query else ""
            texts["batch-invariant"] = (
                f"not batch-invariant: {_share(self.batch_moved, self.batch_checked)} of outputs move by up to "
                f"{_ulps(self.batch_ulp)} between batch sizes {listed}{query}"
            )
        if self.split_moved:
            (keyword,) = {name for name, _ in self.splits}
            texts["split-invariant"] = (
                f"not split-invariant: {_share(self.split_moved, self.split_checked)} of outputs move by up to "
                f"{_ulps(self.split_ulp)} between its own split and {keyword} "
                f"{_listed(sorted(value for _, value in self.splits))}"
            )
        return texts

    def note(self, required: tuple = ()) -> str:
        """What moved, in words, but for the requirements in `required` (their rules say it)."""
        return "; ".join(text for name, text in self.broken().items() if name not in required)


def split_keyword(candidate) -> str | None:
    """The keyword of SPLITS an attention candidate takes (num_splits, block_size), None where it takes neither (or
    is of a row kind: a row's split is the candidate's business, reported by batch invariance)."""
    if kinds.get(candidate.kind).row_wise or candidate.call is None:
        return None
    call = candidate.call.func if isinstance(candidate.call, functools.partial) else candidate.call
    try:
        parameters = inspect.signature(call).parameters
    except (TypeError, ValueError):  # (a builtin or extension function without a signature)
        return None
    return next((name for name in SPLITS if name in parameters), None)


class _Rerun(NamedTuple):
    """One call after the repeat: its inputs and mask, and where the case's items sit in it (items[i] at
    places[i]); last_query: each item's last query alone, its output compared with the case's last query."""

    arrays: dict
    mask: np.ndarray | None
    items: np.ndarray
    places: np.ndarray
    last_query: bool = False


class Reruns:
    """One case's reproducibility calls, made once and shared by every candidate (`calls`), and their comparison
    with the candidate's own outputs (`compare`)."""

    def __init__(self, kind: str, inputs: dict, mask, dtype, seed: int, options=None, last_query: bool = True):
        """last_query False: no rerun of the last query alone (a case judged against a top-left alignment the
        candidate declared: alone, its last query is query 0, which attends other keys)."""
        self.kind = kinds.get(kind)
        self.inputs, self.mask, self.dtype = inputs, mask, dtype
        first = inputs[self.kind.inputs[0]]
        self.lead = first.shape[:-1] if self.kind.row_wise else first.shape[:-2]
        self.items = int(np.prod(self.lead))
        self.reruns: list[_Rerun] = []
        if not self.kind.batched:  # (no batch items to rerun apart: merge_attention's splits, attention_fp8)
            return
        items = self._items()
        # A loss reduced over its rows (reduction="mean" or "sum") has no output per batch item to compare.
        reduced = (options or {}).get("reduction", "none") != "none"
        if items is None or self.items == 0 or reduced or not self.kind.batched:
            return
        arrays, mask = items
        rng = np.random.default_rng(seed)
        first_item = np.zeros(1, int)
        alone = {n: a[:1] for n, a in arrays.items()}
        self.reruns.append(_Rerun(alone, None if mask is None else mask[:1], first_item, first_item))
        size = 2 * self.items + 2
        places = rng.permutation(size)
        every = np.arange(self.items)
        self.reruns.append(_Rerun(*self._embedded(arrays, mask, places, size, rng), every, places[: self.items]))
        queries = arrays["q"].shape[-2] if "q" in arrays else 0
        if last_query and not self.kind.row_wise and len(self.kind.outputs) == 1 and queries > 1:
            # (a query's output is its own only in the forward: the gradients' dk and dv sum over the queries)
            last = {n: a[:, -1:] if n in ("q", "bias") else a for n, a in arrays.items()}  # (bias: (Lq, Lk) each)
            self.reruns.append(_Rerun(last, None if mask is None else mask[:, -1:], every, every, last_query=True))

    def _items(self):
        """The case's arrays and mask with the batch items along axis 0, or None where an input does not have
        them (k and v shared by every batch entry: their gradients sum over the batch)."""
        lead, count = self.lead, self.items
        arrays = {}
        for name, a in self.inputs.items():
            own = self.kind.extras.get(name)
            if own is not None:  # (attention's bias, ALiBi slopes, sinks: broadcast against the batch)
                try:
                    a = np.broadcast_to(a, lead + a.shape[a.ndim - own :] if own else lead)
                except ValueError:
                    return None
            elif a.shape[: len(lead)] != lead:
                return None
            arrays[name] = a.reshape((count,) + a.shape[len(lead) :])
        if self.mask is None:
            return arrays, None
        first = self.inputs[self.kind.inputs[0]]
        full = first.shape if self.kind.row_wise else first.shape[:-1] + (self.inputs["k"].shape[-2],)
        try:
            mask = np.broadcast_to(self.mask, full)
        except ValueError:
            return None
        return arrays, np.ascontiguousarray(mask).reshape((count,) + full[len(lead) :])

    def _embedded(self, arrays, mask, places, size, rng):
        """The items at `places[:R]` of a batch of `size`; the other places hold random batch-mates (the input's
        finite values drawn at random) and, the last of them, padding (zeros, nothing kept)."""
        padding = places[self.items + (size - self.items) // 2 :]
        batch = {}
        for name, a in arrays.items():
            if name in self.kind.integers:  # class labels: the batch-mates' drawn from the case's, padding's 0
                mates = rng.choice(a.reshape(-1), (size,) + a.shape[1:]) if a.size else np.zeros((size,) + a.shape[1:])
                mates[padding] = 0
                mates[places[: self.items]] = a
                batch[name] = mates.astype(np.int64)
                continue
            values = a.astype(np.float64)
            finite = values[np.isfinite(values)]
            shape = (size,) + a.shape[1:]
            mates = rng.choice(finite, shape) if finite.size else rng.standard_normal(shape)
            mates[padding] = 0.0
            mates[places[: self.items]] = values
            # (an array kept in its own dtype, an FP8 cache: its batch-mates are its own values, exact in it)
            batch[name] = mates.astype(a.dtype) if name in self.kind.kept else round_to(mates, self.dtype)
        if mask is None:
            return batch, None
        together = rng.random((size,) + mask.shape[1:]) < 0.75
        together[padding] = False
        together[places[: self.items]] = mask
        return batch, together

    def calls(self, shapes: tuple) -> list[tuple]:
        """The candidate's calls, (inputs, mask, output shapes) each, in the order `compare` reads their outputs:
        the same call again, then the reruns."""
        found = [(self.inputs, self.mask, shapes)]
        for rerun in self.reruns:
            size = len(next(iter(rerun.arrays.values())))
            outputs = tuple((size,) + s[len(self.lead) :] for s in shapes)
            if rerun.last_query:
                outputs = tuple(s[:-2] + (1, s[-1]) for s in outputs)
            found.append((rerun.arrays, rerun.mask, outputs))
        return found

    def split_calls(self, shapes: tuple, keyword: str) -> list[tuple]:
        """The calls with the keys split otherwise, (inputs, mask, output shapes, {keyword: value}) each, for a
        candidate that takes `keyword` (`split_keyword`): each value of SPLITS that splits the case's keys."""
        keys = self.inputs["k"].shape[-2]
        values = [v for v in SPLITS[keyword] if (v <= keys if keyword == "num_splits" else v < keys)]
        return [(self.inputs, self.mask, shapes, {keyword: value}) for value in values]

    @np.errstate(all="ignore")
    def compare_splits(self, index: int, y, split: list, wobble: float) -> Moved:
        """Output `index`'s moves between the candidate's own call (y) and its `split_calls`, (options, outputs)
        each, past the run-to-run wobble (in ulps; 0 where none)."""
        y = np.asarray(y).astype(np.float64)
        moved = Moved(split_checked=y.size)
        ever = np.zeros(y.shape, bool)
        for options, out in split:
            got = np.asarray(out[index]).astype(np.float64)
            apart = _differ(got, y)
            if wobble:
                apart &= _gaps(got, y, self.dtype) > wobble
            ever |= apart
            moved.splits = moved.splits | set(options.items())
            if apart.any():
                moved.split_ulp = max(moved.split_ulp, _max_ulps(got[apart], y[apart], self.dtype))
        moved.split_moved = int(ever.sum())
        return moved

    @np.errstate(all="ignore")
    def compare(self, index: int, y, outputs: list) -> Moved:
        """Output `index`'s moves: y the candidate's own output, outputs its outputs on `calls` (in that order),
        each a tuple with one array per output."""
        y = np.asarray(y).astype(np.float64)
        again = np.asarray(outputs[0][index]).astype(np.float64)
        moved = Moved(repeat_checked=y.size)
        differ = _differ(y, again)
        moved.repeat_moved = int(differ.sum())
        moved.repeat_ulp = _max_ulps(y[differ], again[differ], self.dtype)
        if not self.reruns:
            return moved
        y = y.reshape((self.items,) + y.shape[len(self.lead) :])
        ever = np.zeros(y.shape, bool)
        checked = np.zeros(self.items, bool)
        for rerun, out in zip(self.reruns, outputs[1:]):
            out = np.asarray(out[index]).astype(np.float64)
            where = (rerun.items, Ellipsis, slice(-1, None), slice(None)) if rerun.last_query else (rerun.items,)
            got, mine = out[rerun.places], y[where]
            apart = _differ(got, mine)
            if moved.repeat_moved:  # (past the run-to-run wobble only)
                apart &= _gaps(got, mine, self.dtype) > moved.repeat_ulp
            checked[rerun.items] = True
            ever[where] |= apart
            moved.batch_sizes = moved.batch_sizes | {len(out), self.items}
            moved.last_query = moved.last_query or rerun.last_query
            if apart.any():
                moved.batch_ulp = max(moved.batch_ulp, _max_ulps(got[apart], mine[apart], self.dtype))
        moved.batch_checked = int(ever[checked].size)
        moved.batch_moved = int(ever[checked].sum())
        return moved


def _gaps(a: np.ndarray, b: np.ndarray, dtype) -> np.ndarray:
    """|a - b| in ulps of the dtype at the larger magnitude (inf where one is not finite, 0 where both are NaN)."""
    top = np.maximum(np.abs(a), np.abs(b))
    spacing = np.abs(np.spacing(np.where(np.isfinite(top), top, 0.0).astype(dtype)).astype(np.float64))
    gaps = np.where(np.isfinite(a) & np.isfinite(b), np.abs(a - b) / spacing, np.inf)
    return np.where(_differ(a, b), gaps, 0.0)


def _max_ulps(a: np.ndarray, b: np.ndarray, dtype) -> float:
    """The largest of `_gaps` (0 for nothing)."""
    return float(_gaps(a, b, dtype).max(initial=0.0))


def _listed(values: list) -> str:
    """ "1, 2 and 8"."""
    return ", ".join(map(str, values[:-1])) + f" and {values[-1]}" if len(values) > 1 else str(values[0])


def _share(part: int, whole: int) -> str:
    share = 100 * part / whole
    return f"{share:.2g}%" if share < 10 else f"{share:.0f}%"


def _ulps(value: float) -> str:
    return "inf ulps" if value == np.inf else f"{value:.3g} ulp" + ("" if value == 1 else "s")
