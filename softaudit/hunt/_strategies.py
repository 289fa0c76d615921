"""Hypothesis strategies that draw what `softaudit run` audits: batches, masks with fully masked rows, attention with
batch and head axes and its modifiers, cross-entropy with integer targets and its options, split-KV merges. Each
draws (inputs, mask, options), the options and extra arrays among those the candidate takes (`keywords`).

Row kinds draw x of rows x n (1 to 16 rows) from a recipe and a seeded generator: the spread, the offset and how far
the rows sit apart, a logit standing out by a gap, ties, a temperature, and special values of the dtype (raw floats
of every magnitude, and its thresholds: the smallest logit whose exp overflows, the largest whose exp underflows,
the largest finite value, each give or take two values: past the largest, inf and NaN). Masked kinds add a mask (its
density, a padding run, fully masked rows) and what the masked slots hold. Attention draws batch and head axes, K
and V broadcast along some of them (a caller's stride-0 expand) or shared by a group of query heads (grouped-query
attention), d, dv, Lq and Lk (tile-edge lengths among them), the scales, and a mask (random, padding on either side,
causal aligned top-left or bottom-right) with fully masked queries and NaN or inf in keys no query attends (not for
attention_grad: a backward pass meets them), and for the forward kinds the score modifiers. Cross-entropy draws
logits by the rows' recipe, targets (random, the largest or smallest logit, ignored rows) and its options; merges
draw splits whose lses follow the rows' recipe, some empty. Gradient kinds add an upstream g. A quarter of the draws
start instead from a case of the kind's reported-bug or own families (a few of its rows or queries): the families
seed the search.

Hypothesis shrinks toward the first choice of every draw (one row, no gap, no mask pattern, a threshold itself rather
than a value next to it); `_shrink` then moves what is left to the boundary of the failure.

(Longer than the house's 400 lines: every kind's strategy is built from the rows' recipe, the dtype's thresholds and the
seeding from the kind's families, which are defined once here.)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
from hypothesis import strategies as st

from .. import kinds
from ..cases import GRIDS, REPORTED, families_for
from ..reference import Format, round_to
from . import _bits

#: Lengths where tiled kernels change path: tile edges of 32, 64 and 128 (the reported-bug families use them too).
EDGE_LENGTHS = (33, 63, 64, 65, 127, 128, 129, 192, 255, 256, 257)
#: The most elements a drawn batch of rows has (rows x n).
MAX_ROW_ELEMENTS = 8192
#: The most multiply-adds of q k^T a drawn attention input has (batch x Lq x Lk x d).
MAX_SCORE_WORK = 2**19
#: attention_grad's bounds. Its reference decides nearly every output in its fast tiers (tier B) while the scores
#: stay within about 1e5; scores spread further send outputs to tier C (mpmath, per query), whose time grows with
#: the keys times the outputs: q and k drawn with a scale of 100 (scores about 1e4) stay fast up to 257 keys, a
#: scale of 1000 is orders of magnitude slower from 33 keys. So where the drawn scale is at most
#: MAX_GRAD_LONG_SCALE: up to 257 keys (run's tile edges) and 2**17 multiply-adds of q k^T (attn_tile_edges has
#: 4 x 192 x 64 = 2**15.6); beyond it, 33 keys and 2**13, the bounds from before tier B. (A short hunt of
#: attention_grad.upcast checked the trade: more examples in float16 than the tighter bounds gave, and a shorter
#: slowest example in float32.)
MAX_GRAD_LONG_SCALE = 100.0
MAX_GRAD_SCORE_WORK, MAX_GRAD_KEYS = 2**17, 257
MAX_GRAD_WIDE_WORK, MAX_GRAD_WIDE_KEYS = 2**13, 33
#: Reported-bug cases larger than this (elements in all) do not seed the hunt: each draw would cost a long reference.
MAX_SEED_ELEMENTS = 2**14


def _top(fmt: Format) -> float:
    return fmt.max_float if math.isfinite(fmt.max_float) else 1.7e308


def _raw_floats(fmt: Format):
    width = 16 if fmt.precision <= 11 else 32 if fmt.precision <= 24 else 64
    return st.floats(allow_nan=False, allow_infinity=False, width=width) | st.sampled_from([-math.inf, 0.0, -0.0])


@functools.cache
def thresholds(fmt: Format) -> tuple[float, ...]:
    """Values of the dtype where softmax-like code changes behaviour: the smallest x whose exp overflows (about
    log(max)), its negative, the largest x whose exp underflows to 0 (about log of half the smallest subnormal), and
    the largest finite value (x - max overflows past it)."""
    top = _top(fmt)
    overflow = _bits.first_above(math.log(top), fmt.dtype)
    underflow = _bits.first_above(-(fmt.min_subnormal_exp - 1) * math.log(2), fmt.dtype)
    found = [float(overflow), -float(overflow)] if overflow is not None else []
    found += [-float(underflow)] if underflow is not None else []
    return tuple(found + [top])


def _special(fmt: Format):
    """One special value of the dtype: a threshold give or take two values (the threshold itself first), or a raw
    float."""
    if not _bits.ordered(fmt.dtype):
        return _raw_floats(fmt)
    near = st.tuples(st.sampled_from(thresholds(fmt)), st.integers(-2, 2)).map(lambda t: _step(t[0], t[1], fmt))
    return near | _raw_floats(fmt)


def _step(value: float, steps: int, fmt: Format) -> float:
    """The value `steps` values of the dtype away from `value`, away from zero for steps > 0 (past the largest
    finite value: inf, then NaN, where the dtype has them)."""
    k = min(max(0, _bits.key(np.array(value).astype(fmt.dtype), fmt.dtype) + steps), _bits.top_key(fmt.dtype))
    return float(_bits.with_key(k, value < 0, fmt.dtype))


def _logits(draw, rng, fmt: Format, shape: tuple) -> np.ndarray:
    """Rows of logits from a drawn recipe, rounded to the dtype."""
    top, n = _top(fmt), shape[-1]
    spread = 10.0 ** draw(st.floats(-3, 4))
    offset = draw(st.sampled_from([0.0, 1.0, -1.0])) * min(10.0 ** draw(st.floats(0, 38)), top / 4)
    apart = min(draw(st.sampled_from([0.0, 1.0, 1e2, 1e4])), top / 4)  # rows sit apart by about this much
    x = rng.standard_normal(shape) * spread + offset + rng.standard_normal(shape[:-1] + (1,)) * apart
    with np.errstate(over="ignore", invalid="ignore"):
        if draw(st.booleans()):  # one logit per row standing out by a gap, at a chosen place
            x[..., draw(st.integers(0, n - 1))] = x.max(axis=-1) + 10.0 ** draw(st.floats(-2, 3))
        if draw(st.booleans()):  # ties
            x[..., : draw(st.integers(1, n))] = x[..., :1]
        x = x / draw(st.sampled_from([1.0, 1e-3, 1e-1, 10.0, 1e3]))  # temperature
        special = draw(st.lists(_special(fmt), max_size=min(x.size, 4)))
        x.reshape(-1)[: len(special)] = special  # the first row first
        return round_to(np.clip(x, -1.7e308, 1.7e308), fmt.dtype)


def _junk(draw, fmt: Format):
    """What masked slots hold: nothing special (None), 0, +-max, +-inf or NaN."""
    top = _top(fmt)
    return draw(st.sampled_from([None, 0.0, top, -top, math.inf, -math.inf, math.nan]))


def _in_dtype(value, fmt: Format) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(value).astype(fmt.dtype)


@st.composite
def rows(draw, kind: str, fmt: Format, takes: frozenset = frozenset()):
    """(inputs dict in the dtype, mask or None, options) for softmax, log_softmax, logsumexp and masked_softmax: x
    of rows x n (no options)."""
    if _seeds(kind, fmt, takes) and draw(st.integers(0, 3)) == 3:
        return draw(_seeded(kind, fmt, takes))
    count = draw(st.integers(1, 4) | st.integers(5, 16))
    n = draw(st.integers(1, 64) | st.sampled_from(EDGE_LENGTHS) | st.integers(65, 2048))
    n = max(1, min(n, MAX_ROW_ELEMENTS // count))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = _logits(draw, rng, fmt, (count, n))
    if not kinds.get(kind).masked:
        return {"x": x}, None, {}
    mask = rng.random(x.shape) < draw(st.floats(0, 1))
    if draw(st.booleans()):
        mask[:, : draw(st.integers(0, n))] = False  # a padding-like run, possibly the whole row
    mask[rng.random(count) < draw(st.sampled_from([0.0, 0.5, 1.0]))] = False  # fully masked rows
    junk = _junk(draw, fmt)
    if junk is not None:
        x = np.where(mask, x, _in_dtype(junk, fmt))
    return {"x": x}, mask, {}


def _attention_mask(draw, rng, batch: tuple, lq: int, lk: int) -> np.ndarray | None:
    """None, or a mask (Lq, Lk) or (batch..., Lq, Lk): random, padding on the right or the left (a left-padded
    batch's first keys masked: a tiled kernel's first blocks then hold no key), causal top-left or bottom-right, with
    fully masked queries."""
    style = draw(st.sampled_from(["none", "random", "padding", "left_padding", "causal", "causal_bottom_right"]))
    if style == "none":
        return None
    shape = (batch if draw(st.booleans()) else ()) + (lq, lk)
    if style == "random":
        mask = rng.random(shape) < draw(st.floats(0, 1))
    elif style == "padding":
        mask = np.arange(lk) < rng.integers(0, lk + 1, shape[:-1])[..., None]
    elif style == "left_padding":
        mask = np.arange(lk) >= rng.integers(0, lk + 1, shape[:-1])[..., None]
    else:  # query i sees keys up to i (top-left) or up to i + Lk - Lq (bottom-right, as a KV cache aligns)
        mask = np.broadcast_to(np.tril(np.ones((lq, lk), bool), k=0 if style == "causal" else lk - lq), shape).copy()
    mask[rng.random(shape[:-1]) < draw(st.sampled_from([0.0, 0.25, 1.0]))] = False  # fully masked queries
    return mask


def _unattended_keys(mask: np.ndarray, lk: int) -> np.ndarray:
    """The keys (Lk,) no query attends in any batch entry."""
    return ~mask.reshape(-1, lk).any(axis=0)


@st.composite
def attention(draw, kind: str, fmt: Format, takes: frozenset = frozenset()):
    """(q, k, v in the dtype, mask or None, options) for attention, attention_lse and attention_grad: q (batch...,
    Lq, d), k (kv batch..., Lk, d), v (kv batch..., Lk, dv), K and V broadcast against q along some batch axes; for
    the forward kinds, the modifiers the candidate takes (`_modifiers`); for the backward kinds, those of them that
    `gradients` passes (`kinds.GRAD_MODIFIERS`), and attention_sinks_grad's sinks always."""
    if _seeds(kind, fmt, takes) and draw(st.integers(0, 3)) == 3:
        return draw(_seeded(kind, fmt, takes))
    forward = kinds.get(kind).upstream is None
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    kv_batch = tuple(1 if draw(st.booleans()) else b for b in batch)  # K, V broadcast along this axis
    groups = draw(st.sampled_from([1, 2, 4]))  # grouped-query: `groups` query heads share a K, V head
    batch, kv_batch = (batch + (groups,), kv_batch + (1,)) if groups > 1 else (batch, kv_batch)
    if not batch and "sinks" in kinds.get(kind).arguments:  # (attention_sinks_grad: one sink per head, an axis)
        batch, kv_batch = (1,), (1,)
    d = draw(st.sampled_from([1, 2, 8, 16, 64, 128]))
    dv = draw(st.sampled_from([d, 1, 8]))
    lq = draw(st.integers(1, 8) | st.integers(9, 64))
    lk = draw(st.integers(1, 256) | st.sampled_from(EDGE_LENGTHS))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    scale = min(10.0 ** draw(st.floats(-2, 3)), math.sqrt(_top(fmt)))
    if forward:
        work, keys = MAX_SCORE_WORK, lk
    elif scale <= MAX_GRAD_LONG_SCALE:
        work, keys = MAX_GRAD_SCORE_WORK, MAX_GRAD_KEYS
    else:
        work, keys = MAX_GRAD_WIDE_WORK, MAX_GRAD_WIDE_KEYS
    lk = max(1, min(lk, keys, work // (math.prod(batch) * lq * d)))
    q, k = rng.standard_normal(batch + (lq, d)) * scale, rng.standard_normal(kv_batch + (lk, d)) * scale
    v = rng.standard_normal(kv_batch + (lk, dv)) * 10.0 ** draw(st.floats(-2, 2))
    mask = _attention_mask(draw, rng, batch, lq, lk)
    if mask is not None:
        junk = _junk(draw, fmt)
        # (PyTorch #101967: NaN in a masked-out key gave NaN.) Junk a product multiplies by exact zeros stays finite
        # (0 x NaN is NaN in every product form): V's in P V. The gradient kinds take none: a backward pass meets
        # what masked keys hold (dP = dO V^T overflows on the dtype's max in V, and P (dP - D) is then 0 x inf;
        # dQ = dS K meets K's), so best practice fails there too, as attention_grad's families say (no
        # attn_nan_masked_key: softaudit/kinds/attention_grad.py).
        if junk is not None and forward:
            free = _unattended_keys(mask, lk)
            k[..., free, :1], v[..., free, :1] = junk, junk if math.isfinite(junk) else _top(fmt)
    required = frozenset(n for n in ("sinks",) if n in kinds.get(kind).arguments)  # (attention_sinks_grad's)
    extra, options = _modifiers(draw, rng, takes | required, batch, lq, lk, required)  # (as `gradients` restricts)
    with np.errstate(over="ignore"):
        arrays = {"q": q, "k": k, "v": v} | extra
        return {name: round_to(a, fmt.dtype) for name, a in arrays.items()}, mask, options


#: Attention's modifiers (softaudit/kinds/_attention.py): options, and arrays passed as keywords.
ATTENTION_KEYWORDS = ("softcap", "causal", "window", "bias", "alibi_slopes", "sinks")


def _modifiers(
    draw, rng, takes: frozenset, batch: tuple, lq: int, lk: int, required: frozenset = frozenset()
) -> tuple[dict, dict]:
    """(arrays, options): each modifier the candidate takes, drawn or not (always where `required`: the sinks of
    attention_sinks_grad): a tanh softcap (Gemma 2's 30 and 50 among others), causal, a sliding window (a side of -1
    is unbounded; 0 keeps the diagonal alone), an additive bias with -inf padding, ALiBi's slopes (one per head, the
    axis before Lq; powers of two for 8 heads, as published, else rounded to float32 so the bias stays exact) and
    sink logits per head (0 among them: softmax1)."""
    arrays, options = {}, {}
    if "softcap" in takes and draw(st.booleans()):
        options["softcap"] = draw(st.sampled_from([30.0, 50.0, 5.0, 1.0]) | st.floats(0.25, 100))
    if "causal" in takes and draw(st.booleans()):
        options["causal"] = True
    if "window" in takes and draw(st.booleans()):
        options["window"] = (draw(st.integers(-1, lk)), draw(st.integers(-1, lk)))
    if "bias" in takes and draw(st.booleans()):
        shape = (batch if draw(st.booleans()) else ()) + (lq, lk)
        bias = rng.standard_normal(shape) * 10.0 ** draw(st.floats(-1, 2))
        bias[..., lk - draw(st.integers(0, lk)) :] = -np.inf  # padded keys (the whole row, possibly)
        arrays["bias"] = bias
    heads = batch[-1:]
    if "alibi_slopes" in takes and heads and draw(st.booleans()):
        h = heads[0]
        arrays["alibi_slopes"] = (2.0 ** (-8.0 * np.arange(1, h + 1) / h)).astype(np.float32).astype(np.float64)
    if "sinks" in required or ("sinks" in takes and draw(st.booleans())):
        sinks = rng.standard_normal(heads) * 10.0 ** draw(st.floats(-1, 2))
        arrays["sinks"] = np.zeros(heads) if draw(st.booleans()) else sinks
    return arrays, options


@st.composite
def gradients(draw, kind: str, fmt: Format, takes: frozenset = frozenset()):
    """(inputs in the dtype with an upstream gradient g, mask or None, options) for the gradient kinds: the forward
    kind's inputs (the attention backward's with those of `kinds.GRAD_MODIFIERS` it takes), and g Gaussian,
    constant along the row (softmax's exact VJP is then 0), one-hot, or spread over 8 decades."""
    entry = kinds.get(kind)
    modifiers = takes & frozenset(kinds.GRAD_MODIFIERS)
    inputs, mask, options = draw(rows(kind, fmt) if entry.row_wise else attention(kind, fmt, modifiers))
    if "g" in inputs:  # a seed: the family gave its g
        return inputs, mask, options
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    g = entry.upstream(entry, inputs, mask, rng)
    return inputs | {"g": _upstream(draw, rng, g, fmt)}, mask, options


def _upstream(draw, rng, g: np.ndarray, fmt: Format) -> np.ndarray:
    """g as drawn (Gaussian), constant, one-hot along its last axis, or spread over 8 decades; in the dtype."""
    style = draw(st.sampled_from(["gaussian", "constant", "onehot", "wide"]))
    if style == "constant":
        g = np.full(g.shape, draw(st.floats(-100, 100, allow_subnormal=False)))
    elif style == "onehot" and g.ndim:
        g = (np.arange(g.shape[-1]) == rng.integers(0, g.shape[-1])).astype(np.float64) * np.ones(g.shape)
    elif style == "wide":
        g = g * 10.0 ** rng.uniform(-4, 4, g.shape)
    with np.errstate(over="ignore"):
        return round_to(g, fmt.dtype)


#: cross_entropy's options (softaudit/kinds/cross_entropy.py): PyTorch's, PaLM's z-loss, Gemma 2's softcap.
CROSS_ENTROPY_KEYWORDS = ("ignore_index", "label_smoothing", "z_loss", "softcap", "reduction")
#: The most logits a drawn softcapped cross_entropy input has: each capped row's reference is mpmath's (a tanh has
#: no fast tier), whose time grows with the row (docs/benchmarks.md, bench_cross_entropy in the History).
MAX_CAPPED_LOGITS = 2048


@st.composite
def cross_entropy(draw, kind: str, fmt: Format, takes: frozenset = frozenset()):
    """(logits (N, V) in the dtype and int64 targets (N,), no mask, options) for cross_entropy, and with g for its
    gradient (one per row for reduction 'none', else a scalar): logits from the rows' recipe, each row's target at
    random, at its largest logit (confident rows) or at its smallest, a share of the rows ignored (all of them, some
    or none), and the options the candidate takes: ignore_index -100 (the default), -1 or 0 (a padding class),
    label smoothing in [1e-3, 1] and z-loss in [1e-6, 1e-3] (0.1 and 1e-4 first: values people train with, not
    ones a float32 or float16 hyperparameter rounds to 0), a softcap, the three reductions."""
    if _seeds(kind, fmt, takes) and draw(st.integers(0, 3)) == 3:
        return draw(_seeded(kind, fmt, takes))
    options = {}
    if "softcap" in takes and draw(st.booleans()):
        options["softcap"] = draw(st.sampled_from([30.0, 5.0]) | st.floats(0.25, 100))
    count = draw(st.integers(1, 4) | st.integers(5, 16))
    v = draw(st.integers(1, 64) | st.sampled_from(EDGE_LENGTHS) | st.integers(65, 4096))
    v = max(1, min(v, (MAX_CAPPED_LOGITS if options else MAX_ROW_ELEMENTS) // count))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    logits = _logits(draw, rng, fmt, (count, v))
    with np.errstate(invalid="ignore"):
        finite = np.where(np.isnan(logits.astype(np.float64)), -np.inf, logits.astype(np.float64))
    inputs = {"logits": logits, "target": _targets_and_options(draw, rng, finite, takes, options)}
    return _with_g(draw, rng, kind, fmt, inputs, count, options), None, options


def _targets_and_options(draw, rng, finite: np.ndarray, takes: frozenset, options: dict) -> np.ndarray:
    """int64 targets for rows of float64 logits `finite` (NaN as -inf): at random, at each row's largest or smallest
    logit, a drawn share of the rows ignored; and into `options` cross_entropy's options the candidate takes (the
    ignore_index, label smoothing, z-loss, a reduction)."""
    count, v = finite.shape
    style = draw(st.sampled_from(["random", "largest", "smallest"]))
    target = {
        "random": rng.integers(0, v, count),
        "largest": finite.argmax(axis=1),
        "smallest": np.where(np.isfinite(finite), finite, np.inf).argmin(axis=1),
    }[style]
    ignore = -100
    if "ignore_index" in takes and draw(st.booleans()):
        ignore = options["ignore_index"] = draw(st.sampled_from([-1, 0]))
    target = np.where(rng.random(count) < draw(st.sampled_from([0.0, 0.5, 1.0])), ignore, target).astype(np.int64)
    if "label_smoothing" in takes and draw(st.booleans()):
        options["label_smoothing"] = draw(st.sampled_from([0.1, 1.0]) | st.floats(1e-3, 1))
    if "z_loss" in takes and draw(st.booleans()):
        options["z_loss"] = draw(st.sampled_from([1e-4, 0.0]) | st.floats(1e-6, 1e-3))
    if "reduction" in takes and draw(st.booleans()):
        options["reduction"] = draw(st.sampled_from(["mean", "sum"]))
    return target


def _with_g(draw, rng, kind: str, fmt: Format, inputs: dict, count: int, options: dict) -> dict:
    """The inputs with an upstream g for a gradient kind: one per row, or 1 for a mean or a sum."""
    if kinds.get(kind).upstream is not None:
        per_row = options.get("reduction", "none") == "none"
        g = rng.standard_normal(count) if per_row else np.array(1.0)
        inputs["g"] = _upstream(draw, rng, g, fmt)
    return inputs


#: The most products a drawn linear_cross_entropy input has (N x V x H): the exact reference sums each logit's.
MAX_LINEAR_PRODUCTS = 2**18


@st.composite
def linear_cross_entropy(draw, kind: str, fmt: Format, takes: frozenset = frozenset()):
    """(x (N, H), weight (V, H) and int64 targets (N,), a bias (V,) when the candidate takes one, no mask, options)
    for linear_cross_entropy, and with g for its gradient: x Gaussian over a drawn spread, the weight's rows from
    the rows' recipe (spread, offsets, a value standing out, ties, the dtype's specials), targets at random, at
    each row's largest or smallest float64 logit, a share of the rows ignored, and cross_entropy's options as
    `cross_entropy` draws them."""
    options = {}
    if "softcap" in takes and draw(st.booleans()):
        options["softcap"] = draw(st.sampled_from([30.0, 5.0]) | st.floats(0.25, 100))
    count = draw(st.integers(1, 4) | st.integers(5, 16))
    h = draw(st.integers(1, 16) | st.sampled_from([64, 128, 256]))
    v = draw(st.integers(1, 64) | st.sampled_from(EDGE_LENGTHS) | st.integers(65, 2048))
    v = max(1, min(v, MAX_LINEAR_PRODUCTS // (count * h), MAX_CAPPED_LOGITS // count if options else v))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    with np.errstate(over="ignore"):
        x = round_to(rng.standard_normal((count, h)) * 10.0 ** draw(st.floats(-2, 2)), fmt.dtype)
    weight = _logits(draw, rng, fmt, (v, h))
    inputs = {"x": x, "weight": weight}
    if "bias" in takes and draw(st.booleans()):
        inputs["bias"] = _logits(draw, rng, fmt, (1, v))[0]
    with np.errstate(all="ignore"):
        z = x.astype(np.float64) @ weight.astype(np.float64).T
        finite = np.where(np.isfinite(z), z, -np.inf)
    inputs["target"] = _targets_and_options(draw, rng, finite, takes, options)
    return _with_g(draw, rng, kind, fmt, inputs, count, options), None, options


#: The most elements a drawn merge's outputs have (splits x batch x Lq x dv).
MAX_MERGE_ELEMENTS = 2**15


@st.composite
def merge(draw, kind: str, fmt: Format, takes: frozenset = frozenset()):
    """(outputs (S, batch..., Lq, dv), lses (S, batch..., Lq) in the dtype, no mask, no options) for merge_attention:
    1 to 16 splits whose lses per query come from the rows' recipe (spread, offsets past exp's overflow, a split
    standing out, ties, the dtype's thresholds), a share of them empty (lse -inf, every split of a query among them
    at times) with outputs holding zeros or junk (NaN, inf, the dtype's max), other outputs Gaussian."""
    if _seeds(kind, fmt, takes) and draw(st.integers(0, 3)) == 3:
        return draw(_seeded(kind, fmt, takes))
    splits = draw(st.integers(1, 4) | st.integers(5, 16))
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    lq = draw(st.integers(1, 8) | st.integers(9, 64))
    dv = draw(st.sampled_from([1, 8, 64, 128]))
    lq = max(1, min(lq, MAX_MERGE_ELEMENTS // (splits * math.prod(batch) * dv)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    lses = np.moveaxis(_logits(draw, rng, fmt, batch + (lq, splits)), -1, 0).astype(np.float64)
    empty = rng.random(lses.shape) < draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]))
    lses[empty] = -np.inf
    outputs = rng.standard_normal((splits, *batch, lq, dv)) * 10.0 ** draw(st.floats(-2, 2))
    junk = _junk(draw, fmt)
    if junk is not None:  # (vLLM PR #39148: an empty split's output is junk, never to be read)
        outputs[empty] = junk
    with np.errstate(over="ignore"):
        return {"outputs": round_to(outputs, fmt.dtype), "lses": round_to(lses, fmt.dtype)}, None, {}


def for_kind(kind) -> Callable | None:
    """The strategy that draws the inputs of `kind` (a Kind), chosen by its shape: `rows` for a row-wise kind of
    logits x (and a mask), `attention` for q, k and v (and a mask), `gradients` for either with an upstream g,
    `cross_entropy` for logits and integer targets (with g or not), `linear_cross_entropy` for x, a weight and
    integer targets (with g or not), `merge` for split outputs and their lses. None
    for any other kind: the hunt has none for it."""
    forward = tuple(n for n in kind.inputs if n != "g") if kind.upstream is not None else kind.inputs
    if forward == ("logits", "target") and kind.row_wise:
        return cross_entropy
    if forward == ("x", "weight", "target"):
        return linear_cross_entropy
    if forward == ("outputs", "lses"):
        return merge
    if forward == ("x",) and kind.row_wise:
        drawn = rows
    elif forward in (("q", "k", "v"), ("q", "k", "v", "sinks")) and not kind.row_wise:
        drawn = attention
    else:
        return None
    return drawn if kind.upstream is None else gradients


def keywords(kind) -> tuple[str, ...]:
    """The keywords the hunt may draw for `kind` (a Kind): a search draws those its candidate takes."""
    strategy = for_kind(kind)
    if strategy is cross_entropy:
        return CROSS_ENTROPY_KEYWORDS
    if strategy is linear_cross_entropy:
        return (*CROSS_ENTROPY_KEYWORDS, "bias")
    if strategy is gradients and not kind.row_wise:
        return kinds.GRAD_MODIFIERS
    return ATTENTION_KEYWORDS if strategy is attention else ()


@functools.cache
def _seeds(kind: str, fmt: Format, takes: frozenset) -> tuple:
    """The kind's cases of its reported-bug families, its covering grid and its own families (quick suite, up to
    MAX_SEED_ELEMENTS elements each), rounded to the dtype, those with a keyword the candidate does not take left out:
    (inputs, mask, options) triples."""
    found = []
    entry = kinds.get(kind)
    own = {name for each in kinds.KINDS.values() for name in each.makers}
    for family in families_for(kind):
        if family.name not in REPORTED and family.name not in GRIDS and family.name not in own:
            continue
        for case in family.cases(kind, fmt, "quick"):
            extra = [n for n in case.arrays if n not in entry.arguments]
            if any(n not in takes for n in [*case.options, *extra]):
                continue
            if sum(a.size for a in case.arrays.values()) <= MAX_SEED_ELEMENTS:
                with np.errstate(over="ignore"):
                    arrays = {
                        n: a.astype(np.int64) if n in entry.integers else round_to(a, fmt.dtype)
                        for n, a in case.arrays.items()
                    }
                found.append((arrays, case.mask, dict(case.options)))
    return tuple(found)


def whole_seeds(kind: str, fmt: Format, takes: frozenset) -> tuple:
    """The seeds (`_seeds`) that hold every input of the kind (a gradient kind's seed without its g is left to the
    draws, which add one): each is judged whole before any draw, so the hunt finds at least what the quick suite's
    seeding cases show."""
    return tuple(seed for seed in _seeds(kind, fmt, takes) if all(n in seed[0] for n in kinds.get(kind).inputs))


#: The axis along which a seed is cut to a run of its rows or queries, by input name (a mask: the same as the
#: kind's first input's). merge_attention's seeds are taken whole.
_CUT_AXES = {"x": 0, "logits": 0, "target": 0, "q": -2, "bias": -2}


@st.composite
def _seeded(draw, kind: str, fmt: Format, takes: frozenset):
    """A case of the kind's seeding families, cut to a run of its rows (row kinds, cross_entropy) or its queries
    (attention)."""
    seeds = _seeds(kind, fmt, takes)
    inputs, mask, options = seeds[draw(st.integers(0, len(seeds) - 1))]
    first = kinds.get(kind).inputs[0]
    if first not in _CUT_AXES:
        return inputs, mask, options
    axis = _CUT_AXES[first]
    size = inputs[first].shape[axis]
    start = draw(st.integers(0, size - 1))
    keep = slice(start, start + draw(st.integers(1, size - start)))
    axes = _CUT_AXES | {"g": axis, "mask": axis}

    def cut(name, a):
        if a is None or name not in axes or a.ndim < (axes[name] + 1 if axes[name] >= 0 else -axes[name]):
            return a
        if a.shape[axes[name]] == 1:
            return a
        return np.moveaxis(np.moveaxis(a, axes[name], 0)[keep], 0, axes[name])

    return {n: cut(n, a) for n, a in inputs.items()}, cut("mask", mask), options
