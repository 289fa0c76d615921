"""Production shapes by sampled rows: the candidate runs on the whole problem, the exact reference only on a sample
of its rows (issue 26). docs/metrics.md "Sampled rows" says what the columns mean.

A shape names a kind and its dimensions (`Shape.parse("attention:1x32x32768x128,kv_heads=8")`). Its inputs are
drawn N(0, scale^2) from the seed and rounded to the audited dtype. A row is a row of x (the row kinds: x's leading
axes flattened) or a query (attention: each (batch, head) entry an item of Lq rows). Each item gives the sample the
same number of rows, in three parts:

- **the worst-conditioned**: the row kinds by the conditioning scale itself (each row's largest scale / |r|, the
  ULPs sound code may lose there, from a float64 evaluation of every row); attention by the bound on its scores,
  |q_i| max_j |k_j| / sqrt(d) (the scores' part of the scale grows with it, and 16-bit scores overflow by it). The
  values' part, cancellation in sum_j p_j v_j, needs every score of every query: the random rows stand for it;
- **the rows at tile edges**: 0 and the last row, and both sides of every multiple of 64 and 128, spread evenly;
- **uniform random rows** from the rest of the item (seeded).

The rows sampled from every item make one case for the measures (the candidate's output at those rows against the
exact results there), so the table's measures are the sample's: each maximum is a lower bound on the whole
problem's. The comparisons (plain, standard, best practice) that set the verdict's lines run on the sampled rows
alone (every one of them computes each row from that row's inputs only). The random rows bound the rest: with k of
n random rows past a line, Clopper-Pearson's one-sided 95% upper bound p on the share of the unsampled rows with an
output past it, the share of all outputs past it is at most (rows known past it + p x rows not sampled) / rows
(`ub_*` columns); a row counts as past a line where any one of its outputs is.

(Longer than the house's 400 lines: a shape, its sample, the bounds and the audit of a shape are one feature read
top to bottom, and no other module imports a part of it.)
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
import types

import numpy as np

from . import execute, judge, kinds, plan, prepare
from .adapters import call_all
from .cases import Case
from .execute import Called
from .metrics import Basis, measure
from .policy import Policy
from .prepare import Prepared, PreparedFamily
from .reference import Format, format_of, round_to
from .results import COLUMNS, AuditResult

#: Rows per item at least (an item with fewer is audited whole), and the sample's default size.
MIN_PER_ITEM = 8
SAMPLES = 256
#: The tile sizes whose edges are sampled (FlashAttention's and the usual Triton blocks).
TILES = (64, 128)
#: One-sided confidence of the upper bounds.
CONFIDENCE = 0.95
#: Elements per step when the row kinds' conditioning is evaluated over every row.
CHUNK = 1 << 22

_OPTION = re.compile(r"(kv_heads|lq|scale)=([0-9.e+-]+)|causal")


@dataclasses.dataclass(frozen=True)
class Shape:
    """A problem to audit by sampled rows: a kind, its dimensions and the inputs' distribution.

    dims: x's shape for the row kinds (..., n); (batch, heads, keys, d) for attention, with lq queries (default: as
    many as keys; fewer are the last lq positions, as in chunked prefill and decoding). kv_heads: grouped-query
    attention, kv_heads key and value heads each shared by heads / kv_heads query heads, given to candidates as
    broadcast batch axes: q (batch, kv_heads, group, lq, d), k and v (batch, kv_heads, 1, keys, d). causal: a query
    attends the keys up to its own position, aligned bottom-right (the masked kinds: x's last two axes, square).
    scale: the inputs' standard deviation."""

    kind: str
    dims: tuple[int, ...]
    kv_heads: int | None = None
    lq: int | None = None
    causal: bool = False
    scale: float = 1.0

    @classmethod
    def parse(cls, text: str) -> Shape:
        """A shape from `kind:AxBxC[,kv_heads=N][,lq=N][,causal][,scale=S]`; ValueError in one line otherwise."""
        kind, _, rest = str(text).partition(":")
        dims_text, *options = rest.split(",")
        try:
            dims = tuple(int(d) for d in dims_text.lower().split("x"))
        except ValueError:
            dims = ()
        if not kind or not dims or any(d < 1 for d in dims):
            raise ValueError(f"a shape is KIND:AxBx...[,kv_heads=N][,lq=N][,causal][,scale=S], got {text!r}")
        given = {}
        for option in options:
            found = _OPTION.fullmatch(option.strip())
            if found is None:
                raise ValueError(f"unknown shape option {option!r} in {text!r}: kv_heads=N, lq=N, causal, scale=S")
            name, value = found[1] or "causal", found[2]
            given[name] = True if value is None else float(value) if name == "scale" else int(float(value))
        shape = cls(kinds.get(kind).name, dims, **given)
        shape.check()
        return shape

    @property
    def text(self) -> str:
        """The shape as `parse` reads it, less the kind: the table's family ("shape:1x8x8192x128,kv_heads=2")."""
        options = [f"kv_heads={self.kv_heads}"] * bool(self.kv_heads) + [f"lq={self.lq}"] * bool(self.lq)
        options += ["causal"] * self.causal + [f"scale={self.scale:g}"] * (self.scale != 1.0)
        return "shape:" + ",".join(["x".join(map(str, self.dims)), *options])

    def check(self) -> None:
        kind = kinds.get(self.kind)
        if not kind.row_wise and len(kind.outputs) > 1:
            raise ValueError(
                f"{self.kind} cannot be sampled by rows (dk and dv sum over every query): "
                "shapes are for the row kinds and attention"
            )
        if self.attention:
            if len(self.dims) != 4:
                raise ValueError(f"an attention shape is batch x heads x keys x d, got {self.text}")
            heads, keys = self.dims[1], self.dims[2]
            if self.kv_heads and heads % self.kv_heads:
                raise ValueError(f"kv_heads={self.kv_heads} does not divide {heads} heads")
            if self.lq and self.lq > keys:
                raise ValueError(f"lq={self.lq} is more queries than the {keys} keys")
        elif self.kv_heads or self.lq:
            raise ValueError(f"kv_heads and lq are attention's options, not {self.kind}'s")
        elif self.causal and (not kind.masked or len(self.dims) < 2 or self.dims[-1] != self.dims[-2]):
            raise ValueError("causal is for the masked kinds and attention, over a square last two axes")

    @property
    def attention(self) -> bool:
        """Queries against keys (attention), not rows reduced along their last axis."""
        return not kinds.get(self.kind).row_wise

    def inputs(self, fmt: Format, seed: int) -> tuple[dict, np.ndarray | None]:
        """The whole problem's inputs, drawn N(0, scale^2) in float64 and rounded to the dtype, and its mask."""
        rng = np.random.default_rng(seed)
        kind = kinds.get(self.kind)
        if self.attention:
            batch, heads, keys, d = self.dims
            lq = self.lq or keys
            lead = (batch, heads) if not self.kv_heads else (batch, self.kv_heads, heads // self.kv_heads)
            kv_lead = lead if not self.kv_heads else (batch, self.kv_heads, 1)
            shapes = {"q": lead + (lq, d), "k": kv_lead + (keys, d), "v": kv_lead + (keys, d)}
            mask = np.tri(lq, keys, keys - lq, dtype=bool) if self.causal else None
        else:
            shapes = {"x": self.dims}
            if "g" in kind.arguments:
                shapes["g"] = _upstream_shape(kind, self.dims)
            if kind.masked:
                n = self.dims[-1]
                mask = np.tri(n, dtype=bool) if self.causal else np.ones(self.dims[-1:], bool)
            else:
                mask = None
        return {name: _drawn(rng, shape, self.scale, fmt) for name, shape in shapes.items()}, mask


def _drawn(rng, shape: tuple, scale: float, fmt: Format) -> np.ndarray:
    """N(0, scale^2) values in the dtype: drawn in float32 (float64 for a wider dtype) and rounded once to it, a block
    of rows at a time (a large input is never held in float64)."""
    wide = np.float64 if fmt.precision > 24 else np.float32
    out = np.empty(shape, fmt.dtype)
    flat = out.reshape(-1, shape[-1])
    step = max(1, CHUNK // shape[-1])
    for start in range(0, len(flat), step):
        block = flat[start : start + step]
        drawn = rng.standard_normal(block.shape, dtype=wide)
        drawn *= wide(scale)
        # (numpy's float32 -> float16 cast rounds to nearest even, as round_to does, and costs far less)
        block[...] = drawn if fmt.dtype in (np.float16, wide) else round_to(drawn, fmt.dtype)
    return out


#: What chose each sampled row (`Sample.part`).
WORST, EDGE, RANDOM = 0, 1, 2


def _upstream_shape(kind, dims: tuple) -> tuple:
    """g's shape for a row gradient kind: the forward output's, as the kind's upstream draws it (x's shape, or x's
    less the reduced axis for log-sum-exp's)."""
    drawn = kind.upstream(kind, {"x": np.zeros((1, 2))}, None, np.random.default_rng(0))
    return dims if drawn.shape == (1, 2) else dims[:-1]


@dataclasses.dataclass
class Sample:
    """The rows sampled from each item, as indices into the item's rows (each item the same count, ascending), and
    what chose each: WORST, EDGE or RANDOM (drawn uniformly from the item's rows not chosen otherwise)."""

    rows: np.ndarray  # (items, per item) int
    part: np.ndarray  # (items, per item) int8
    total: int  # rows per item

    @property
    def whole(self) -> bool:
        """Every row is in the sample (the measures are then the whole problem's)."""
        return self.rows.shape[1] == self.total

    @property
    def random(self) -> np.ndarray:
        return self.part == RANDOM

    def describe(self, noun: str) -> str:
        """ "256 of 65,536 queries: 64 worst-conditioned, 32 at tile edges, 160 random" (or "all 8 rows")."""
        items, each = self.rows.shape
        if self.whole:
            return f"all {items * each:,} {noun}"
        worst, edge, random = (int((self.part == part).sum()) for part in (WORST, EDGE, RANDOM))
        return (
            f"{items * each:,} of {items * self.total:,} {noun}: {worst:,} worst-conditioned, {edge:,} at tile "
            f"edges, {random:,} random"
        )


def edge_rows(total: int, count: int) -> list[int]:
    """Up to `count` rows at tile edges: the first and the last, then both sides of tile boundaries (multiples of
    TILES) spread evenly over the rows."""
    bounds = sorted({at for tile in TILES for at in range(tile, total, tile)})
    picks = [0, total - 1]
    pairs = min(len(bounds), max(0, count - 1) // 2)
    for i in np.linspace(0, len(bounds) - 1, pairs).round().astype(int) if pairs else ():
        picks += [bounds[i] - 1, bounds[i]]
    return list(dict.fromkeys(picks))[:count]


def choose(keys: np.ndarray, samples: int, seed: int) -> Sample:
    """The sample from each item's rows: keys (items, rows) ranks the rows, largest first (the worst-conditioned;
    equal keys in row order). An item gives max(MIN_PER_ITEM, ceil(samples / items)) rows: a quarter of them the
    worst, an eighth at tile edges, the rest at random; an item with no more rows than that is taken whole."""
    items, total = keys.shape
    each = max(MIN_PER_ITEM, -(-samples // items))
    if each >= total:
        rows = np.broadcast_to(np.arange(total), (items, total)).copy()
        return Sample(rows, np.full(rows.shape, WORST, np.int8), total)
    rng = np.random.default_rng(seed)
    rows, part = np.empty((items, each), np.int64), np.empty((items, each), np.int8)
    for item in range(items):
        worst = [int(r) for r in np.argsort(-keys[item], kind="stable")[: each // 4]]
        edges = [r for r in edge_rows(total, each // 8 + len(worst)) if r not in set(worst)][: each // 8]
        chosen = worst + edges
        drawn = rng.choice(np.setdiff1d(np.arange(total), chosen), each - len(chosen), replace=False)
        found = np.concatenate([chosen, drawn])
        parts = np.repeat(np.array([WORST, EDGE, RANDOM], np.int8), [len(worst), len(edges), len(drawn)])
        order = np.argsort(found, kind="stable")
        rows[item], part[item] = found[order], parts[order]
    return Sample(rows, part, total)


def upper_bound(past: int, n: int, confidence: float = CONFIDENCE) -> float:
    """Clopper-Pearson's one-sided upper bound on a binomial proportion with `past` successes in n trials: the p
    at which P(X <= past) = 1 - confidence (1 where past = n; 1 - (1 - confidence)^(1/n) where past = 0)."""
    if n <= 0 or past >= n:
        return 1.0
    alpha = 1.0 - confidence
    if past == 0:
        return 1.0 - alpha ** (1.0 / n)
    low, high = past / n, 1.0
    for _ in range(100):  # bisection: P(X <= past; p) falls as p rises
        mid = (low + high) / 2
        if _binomial_cdf(past, n, mid) > alpha:
            low = mid
        else:
            high = mid
    return high


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), 0 < p < 1, summed in log space."""
    log_p, log_q = math.log(p), math.log1p(-p)
    whole = math.lgamma(n + 1)
    terms = [whole - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q for i in range(k + 1)]
    top = max(terms)
    return math.exp(top) * sum(math.exp(t - top) for t in terms)


class _SampledCase(Prepared):
    """The sampled rows as one prepared case: their measures, with no invariants' probes, leak probe or reruns
    (each of those is another call on the whole problem)."""

    probes = None
    reruns = None
    leak_probe = None

    def __init__(self, case: Case, fmt: Format, case_in_family: int):
        self.case, self.fmt, self.case_in_family = case, fmt, case_in_family
        self.inputs, self.mask = dict(case.arrays), case.mask  # (drawn in the dtype: nothing to round)
        self.overflowed = 0


class Problem:
    """One shape in one dtype: its inputs, its sample, the sampled rows as a prepared family with the comparisons'
    errors on them (computed once, shared by every candidate), and what a row of the table needs beside them."""

    def __init__(self, shape: Shape, fmt: Format, samples: int, seed: int):
        """The inputs and the sample; the reference is computed when first read, the comparisons by `compare`."""
        self.shape, self.fmt, self.samples, self.seed = shape, fmt, samples, seed
        self.kind = kinds.get(shape.kind)
        self.inputs, self.mask = shape.inputs(fmt, seed)
        self.sample = choose(self._keys(), samples, seed)
        sub_inputs, sub_mask = self._rows_of_inputs()
        case = Case(shape.kind, shape.text, sub_inputs, sub_mask, seed, f"{shape.text} ({self.describe()})")
        self.family = PreparedFamily([_SampledCase(case, fmt, 0)])

    def compare(self, timeout, ex) -> Problem:
        """Run the comparisons on the sampled rows (their errors set the verdict's lines)."""
        prepare.compare(self.family, self.shape.kind, timeout, ex)
        return self

    def describe(self) -> str:
        return self.sample.describe("queries" if self.shape.attention else "rows")

    @property
    def output_shapes(self) -> tuple:
        if self.shape.attention:
            q, k, v = (self.inputs[n] for n in ("q", "k", "v"))
            return (np.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + q.shape[-2:-1] + v.shape[-1:],)
        x = self.inputs["x"]
        return (x.shape[:-1] if self.kind.reduces and "g" not in self.inputs else x.shape,)

    def _keys(self) -> np.ndarray:
        """(items, rows): how badly each row is conditioned, larger worse (see the module's docstring)."""
        if self.shape.attention:
            q = self.inputs["q"]
            q = q.reshape(-1, *q.shape[-2:]).astype(np.float64)
            return np.sqrt((q * q).sum(axis=-1))  # (the keys' largest norm is the same for every row of an item)
        from .candidates import best

        wide = {name: a.astype(np.float64) for name, a in self.inputs.items()}
        x = wide["x"]
        n = x.shape[-1]
        rows = x.reshape(-1, n)
        keys = np.empty(len(rows))
        step = max(1, CHUNK // n)
        for start in range(0, len(rows), step):
            part = slice(start, start + step)
            chunk = {"x": rows[part]}
            if "g" in wide:
                g = wide["g"].reshape(len(rows), -1)[part]
                chunk["g"] = g[:, 0] if wide["g"].ndim < x.ndim else g
            mask = self._row_mask(np.arange(len(rows))[part])
            shape = (len(chunk["x"]),) if self.kind.reduces and "g" not in chunk else chunk["x"].shape
            (r,), _ = call_all(best(self.shape.kind), chunk, mask, (shape,), np.float64, None)
            exact = types.SimpleNamespace(hi=r, lo=np.zeros_like(r), value=r, undefined=np.zeros(len(r), bool))
            (extra,) = self.kind.conditioning(self.kind, chunk, mask, (exact,))
            with np.errstate(all="ignore"):
                ratio = np.where(r != 0, extra["scale"] / np.abs(r), 0.0)
            keys[part] = np.nan_to_num(ratio.reshape(len(chunk["x"]), -1), posinf=0.0).max(axis=-1)
        return keys[None, :]

    def _row_mask(self, rows: np.ndarray) -> np.ndarray | None:
        """The mask rows of x's rows (the masked kinds: a causal mask's row is the row's position mod n)."""
        if self.mask is None:
            return None
        return self.mask[rows % len(self.mask)] if self.mask.ndim == 2 else self.mask

    def _rows_of_inputs(self) -> tuple[dict, np.ndarray | None]:
        rows = self.sample.rows
        if self.shape.attention:
            q = self.inputs["q"]
            flat = q.reshape(-1, *q.shape[-2:])
            sub = {"q": np.take_along_axis(flat, rows[:, :, None], axis=1).reshape(q.shape[:-2] + (rows.shape[1], -1))}
            mask = None if self.mask is None else self.mask[rows].reshape(q.shape[:-2] + rows.shape[1:] + (-1,))
            return sub | {"k": self.inputs["k"], "v": self.inputs["v"]}, mask
        (picked,) = rows
        n = self.inputs["x"].shape[-1]
        sub = {"x": self.inputs["x"].reshape(-1, n)[picked]}
        if "g" in self.inputs:
            g = self.inputs["g"]
            sub["g"] = g.reshape(-1)[picked] if g.ndim < self.inputs["x"].ndim else g.reshape(-1, n)[picked]
        return sub, self._row_mask(picked)

    def rows_of(self, y: np.ndarray) -> np.ndarray:
        """The candidate's output at the sampled rows, shaped as the sampled case's."""
        rows = self.sample.rows
        if self.shape.attention:
            flat = y.reshape(-1, *y.shape[-2:])
            picked = np.take_along_axis(flat, rows[:, :, None], axis=1)
            return picked.reshape(y.shape[:-2] + (rows.shape[1], y.shape[-1]))
        (picked,) = rows
        return y.reshape(-1)[picked] if y.ndim == self.inputs["x"].ndim - 1 else y.reshape(-1, y.shape[-1])[picked]

    def calls(self, candidate, timeout, ex):
        """The candidate's call on the whole problem, as the judge reads it: one Called on the sampled case (a
        CandidateError or CandidateSkip from the call is raised while it is read)."""
        start = time.perf_counter()
        (y,), note = ex.call_all(candidate, self.inputs, self.mask, self.output_shapes, self.fmt.dtype, timeout)
        seconds = time.perf_counter() - start
        yield Called(self.family.prepared[0], (self.rows_of(y),), note, seconds, [], None)

    def judged(self, candidate, policy: Policy, timeout, ex) -> judge.UnitResult:
        """The candidate's rows on this shape in this dtype: the judge's, with `sampled` and the bounds."""
        seen = []

        def called():
            for done in self.calls(candidate, timeout, ex):
                seen.append(done.outputs[0])
                yield done

        recipe = ("default", self.seed, None)
        result = judge.unit(candidate, self.fmt, self.shape.text, self.family, called(), policy, recipe)
        for row in result.rows:
            row["sampled"] = self.describe()
            if seen and row["verdict"] not in ("error", "skip"):
                line = policy.line(self.fmt, row["plain_cond_err"], candidate.kind)  # (per element: metrics.fail_line)
                lines = {"ub_past_warn": row["warn_above"], "ub_past_fail": line}
                row |= self.bounds(self.family.prepared[0].basis, seen[0], lines)
        again = {
            "shape": f"{self.shape.kind}:{self.shape.text.removeprefix('shape:')}",
            "samples": self.samples,
            "seed": self.seed,
            "family": self.shape.text,
            "case_index": 0,
        }
        for record in result.worst.values():  # (its command runs the shape again: softaudit.results.WorstInput)
            record.recipe = dict(again)
        return result

    def bounds(self, basis: Basis, y: np.ndarray, lines: dict) -> dict:
        """The ub_* columns: for each line, the upper bound on the share of outputs past it (see the module)."""
        past = {name: np.zeros(self.sample.rows.size, bool) for name in ("ub_ge2_ulp", *lines)}
        for i, tally in enumerate(_row_tallies(basis, y, lines["ub_past_fail"])):
            events = tally.nan + tally.overflow > 0
            past["ub_ge2_ulp"][i] = events or tally.max_ulp >= 2
            past["ub_past_warn"][i] = events or tally.max_ulp > lines["ub_past_warn"]
            past["ub_past_fail"][i] = events or tally.max_line_err > 1
        random = self.sample.random.reshape(-1)
        total = self.sample.total * len(self.sample.rows)
        known = int((~random).sum())
        out = {}
        for name, flags in past.items():
            if self.sample.whole:
                out[name] = float(flags.sum()) / total
            else:
                rest = upper_bound(int(flags[random].sum()), int(random.sum()))
                out[name] = min(1.0, (int(flags[~random].sum()) + rest * (total - known)) / total)
        return out


def _row_tallies(b: Basis, y: np.ndarray, line=None):
    """Each sampled row's own Tally (its outputs measured alone, as `measure` measures a case, against the fail line
    drawn from `line`: metrics.fail_line)."""
    rows = int(np.asarray(b.undefined).size)
    per_row = (1,) if b.rounded.ndim == np.asarray(b.undefined).ndim else (1, b.rounded.size // max(rows, 1))
    width = per_row[-1]
    for i in range(rows):
        row = np.asarray(y).reshape(rows, width)[i].reshape(per_row)
        yield measure(_row_basis(b, i, per_row), row, case_index=0, line=line)


def _row_basis(b: Basis, i: int, shape: tuple) -> Basis:
    """Row i of a case's Basis as a Basis of its own (per-element arrays of `shape`)."""
    width = shape[-1]
    lo, hi = i * width, (i + 1) * width

    def element(a):
        return None if a is None else np.asarray(a).reshape(-1)[lo:hi].reshape(shape)

    def row(a):
        return None if a is None else np.asarray(a).reshape(-1)[i : i + 1]

    def sparse(pair):
        if pair is None:
            return None
        at, values = pair
        inside = (at >= lo) & (at < hi)
        return at[inside] - lo, values[inside]

    elements = ("rounded", "hi", "lo", "defined", "finite_ref", "nonzero_ref", "ulp", "inv_ulp", "rel_per_ulp")
    elements += ("masked", "ulp_vsum", "inv_scale", "inv_bound", "inv_reorder", "subnormal")
    fields = {name: element(getattr(b, name)) for name in elements}
    fields |= {name: row(getattr(b, name)) for name in ("undefined", "best", "nothing_kept", "kept_nan_rows")}
    return dataclasses.replace(b, **fields, far_below=sparse(b.far_below), fine=sparse(b.fine))


def audit_shapes(
    targets=None,
    shapes=(),
    *,
    kind: str | None = None,
    dtypes=("float32",),
    samples: int = SAMPLES,
    seed: int = 0,
    policy: Policy | None = None,
    timeout: float | None = None,
    device: str | None = None,
    isolation: str = "worker",
    memory_limit_mib: int | None = None,
    progress=None,
    stop=None,
) -> AuditResult:
    """Audit candidates on production shapes by sampled rows: each candidate of a shape's kind runs on the whole
    problem in each dtype, and is measured and judged on `samples` rows (about; see `choose`) against the exact
    reference. shapes: Shape objects or their text ("attention:1x8x8192x128,kv_heads=2"). The other arguments as
    softaudit.audit takes them. The table has softaudit.audit's columns, with `sampled` and the `ub_*` bounds."""
    import pandas as pd

    policy = policy or Policy()
    shapes = [s if isinstance(s, Shape) else Shape.parse(s) for s in ([shapes] if isinstance(shapes, str) else shapes)]
    if not shapes:
        raise ValueError("no shape to audit")
    if kind is not None and any(s.kind != kinds.get(kind).name for s in shapes):
        raise ValueError(f"--kind {kind} and a shape of another kind: {', '.join(s.kind for s in shapes)}")
    formats = [format_of(d) for d in dtypes]
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    loaded = plan.candidates_for(targets, kind, device)
    found = {s: [c for c in loaded if c.kind == s.kind] for s in shapes}
    missing = sorted({s.kind for s in shapes if not found[s]})
    if missing:
        raise ValueError(f"no candidate of {', '.join(missing)} among the targets, for the shapes of that kind")
    total = sum(len(c) for c in found.values()) * len(formats)
    results, stopped = [], False
    ex = execute.executor(isolation, memory_limit_mib)
    try:
        with ex:
            for shape in shapes:
                for fmt in formats:
                    problem = None
                    for candidate in found[shape]:
                        if stop is not None and stop.is_set():
                            stopped = True
                            break
                        problem = problem or Problem(shape, fmt, samples, seed).compare(timeout, ex)
                        results.append(problem.judged(candidate, policy, timeout, ex))
                        if progress:
                            progress(len(results), total, f"{candidate.name} {fmt.name}")
    except KeyboardInterrupt:
        if stop is None or not stop.is_set():
            raise
        stopped = True  # (softaudit run's second Ctrl-C, as audit takes it: the call running abandoned)
    frameworks = ex.frameworks()
    settings = {
        "shapes": [f"{s.kind}:{s.text.removeprefix('shape:')}" for s in shapes],
        "samples": samples,
        "dtypes": [f.name for f in formats],
        "policy": dataclasses.asdict(policy),
        "timeout": timeout,
        "seed": seed,
        "device": device,
        "isolation": isolation,
        "memory_limit_mib": memory_limit_mib,
        "interrupted": stopped,
    }
    table = pd.DataFrame([row for r in results for row in r.rows], columns=list(COLUMNS))
    worst = {key: record for r in results for key, record in r.worst.items()}
    return AuditResult(table, worst, settings, [c for r in results for c in r.case_rows], frameworks, policy)
