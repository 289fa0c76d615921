"""merge_attention: combining partial attention results over disjoint key sets (split-KV decoding, ring and
context-parallel attention, cascade attention), where -inf LSEs, exp overflow and NaN junk have shipped.

`f(outputs, lses) -> (o, lse)`: outputs (S, ..., Lq, dv) and lses (S, ..., Lq), one partial result per split s
(its attention output over its keys and the log-sum-exp of its scaled scores); o (..., Lq, dv) and lse (..., Lq)
the merged ones. The exact result is that of the inputs as given: with w_s = e**(lse_s - lse),
lse = log sum_s e**lse_s and o = sum_s w_s o_s, i.e. attention whose scores are the lse_s and whose values are the
o_s (so softaudit.reference.attention computes it exactly, with q = 1, k = lse_s and scale 1); for inputs that are
the exact partials of one attention this is attention over the union of the keys. A split with lse_s = -inf is
empty: it takes no weight, and its output, whatever it holds (zeros, NaN junk), is not read. Every split empty:
o = 0 and lse = -inf (defined: what a merge must give, not NaN, vLLM PR #39148). A NaN or +inf lse, or a NaN or
infinity in a non-empty split's output, leaves the query undefined.
"""

from __future__ import annotations

import numpy as np

from ._kind import Kind


def _problem(outputs, lses):
    """The merge as attention over the splits, one query per batch entry: q (M, 1, 1) ones, k (M, S, 1) the lses (0
    where empty), v (M, S, dv), mask (M, 1, S) the non-empty splits; the shape to restore, and the empty queries."""
    o = np.asarray(outputs, dtype=np.float64)
    lse = np.asarray(lses, dtype=np.float64)
    s, lead, dv = o.shape[0], o.shape[1:-1], o.shape[-1]
    m = int(np.prod(lead))
    k = np.moveaxis(lse.reshape(s, m), 0, -1)[..., None]  # (M, S, 1)
    v = np.moveaxis(o.reshape(s, m, dv), 0, 1)  # (M, S, dv)
    kept = k[..., 0] != -np.inf
    k = np.where(kept[..., None], k, 0.0)
    return np.ones((m, 1, 1)), k, v, kept[:, None, :], lead, ~kept.any(axis=1)


def reference(kind, inputs: dict, mask, dtype) -> tuple:
    # (imported here: marking a candidate loads the registry and must not load the reference)
    from ..reference import evaluate, evaluate_attention

    q, k, v, keep, lead, empty = _problem(inputs["outputs"], inputs["lses"])
    with np.errstate(invalid="ignore"):
        o = evaluate_attention(q, k, v, keep, scale=1.0, dtype=dtype)
    lses = np.moveaxis(np.asarray(inputs["lses"], np.float64), 0, -1)
    lse = evaluate("logsumexp", lses, None, dtype=dtype)
    lse.undefined = lse.undefined | (lses == np.inf).any(axis=-1)  # (a +inf lse leaves the query undefined)
    o.value[empty] = 0.0  # every split empty: o = 0, exactly (the attention reference says "nothing to attend")
    o.hi[empty], o.lo[empty], o.err[empty], o.tier[empty] = 0.0, 0.0, 0.0, 0
    o.undefined[empty] = False
    dv = v.shape[-1]
    o.value, o.hi, o.lo, o.err, o.tier = (a.reshape(lead + (dv,)) for a in (o.value, o.hi, o.lo, o.err, o.tier))
    o.undefined = o.undefined.reshape(lead)
    if o.fine is not None:
        o.fine = o.fine.reshape(lead + (dv,))
    return o, lse


def conditioning(kind, inputs: dict, mask, references) -> tuple[dict, dict]:
    """o: |o| + sum_s w_s |o_s| + sum_s w_s |o_s - o| |lse_s| (d o / d o_s = w_s, d o / d lse_s = w_s (o_s - o));
    lse: |lse| + sum_s w_s |lse_s|, + 1 for rounding the sum of the weights once (as the log kinds)."""
    o_ref, lse_ref = references
    outputs = np.asarray(inputs["outputs"], dtype=np.float64)
    lses = np.asarray(inputs["lses"], dtype=np.float64)
    with np.errstate(all="ignore"):
        kept = np.isfinite(lses)
        m = np.where(kept.any(axis=0), np.where(kept, lses, -np.inf).max(axis=0), 0.0)
        e = np.where(kept, np.exp(np.where(kept, lses, 0.0) - m), 0.0)
        w = e / np.where(e.sum(axis=0) > 0, e.sum(axis=0), 1.0)  # (S, ..., Lq)
        al = np.where(kept, np.abs(lses), 0.0)
        o = o_ref.hi + o_ref.lo
        finite_o = np.where(kept[..., None], outputs, 0.0)
        # (w al first: an empty-looking split, w = 0 beside |lse| near float64's largest, adds 0, not 0 x inf)
        spread = w[..., None] * np.abs(finite_o) + (w * al)[..., None] * np.abs(finite_o - o)
        o_scale = np.abs(o) + spread.sum(axis=0)
        lse = lse_ref.hi + lse_ref.lo
        lse_scale = np.where(kept.any(axis=0), np.abs(lse) + (w * al).sum(axis=0) + 1.0, 0.0)
    return (
        {"undefined": o_ref.undefined, "scale": np.nan_to_num(o_scale)},
        {"undefined": lse_ref.undefined, "scale": np.nan_to_num(lse_scale)},
    )


def element_inputs(kind, pc, position: tuple) -> tuple[dict, None]:
    """The splits behind one output element: its query's outputs (S, 1, dv) and lses (S, 1)."""
    query = tuple(position[:-1]) if getattr(pc, "index", 0) == 0 else tuple(position)
    outputs, lses = pc.inputs["outputs"], pc.inputs["lses"]
    at = (slice(None), *query)
    return {"outputs": outputs[at][:, None, :], "lses": lses[at][:, None]}, None


# -------------------------------------------------------------------------------------------------- families


def _partials(rng, sizes, lq=4, dv=64, batch=2, center=0.0, empty_outputs=0.0):
    """(outputs, lses) of splits holding `sizes` keys: outputs N(0, 1/4), lses center + N(0, 4) + 0.7 bits(size)
    (larger splits hold larger sums), drawn with the seeded generator only, so the inputs are the same bits on
    every CPU (no exp, log or matrix product: those differ per CPU). The merge's exact result is that of the inputs
    as given, whichever attention they came from. An empty split has lse -inf and outputs `empty_outputs` (0, or
    NaN junk)."""
    outs, lses = [], []
    for size in sizes:
        if size == 0:
            outs.append(np.full((batch, lq, dv), empty_outputs))
            lses.append(np.full((batch, lq), -np.inf))
            continue
        outs.append(rng.standard_normal((batch, lq, dv)) * 0.5)
        lses.append(center + rng.standard_normal((batch, lq)) * 2 + 0.7 * int(size).bit_length())
    return {"outputs": np.stack(outs), "lses": np.stack(lses)}


def _gaussian(kind, fmt, size, rng):
    return [
        (_partials(rng, (128, 128), lq=size.lq), None, "two splits of 128 keys"),
        (_partials(rng, (1, 7, 120, 1000), lq=size.lq), None, "four splits of 1, 7, 120 and 1,000 keys"),
    ]


def _empty(kind, fmt, size, rng):
    every = _partials(rng, (0, 0), lq=size.lq)
    return [
        (_partials(rng, (64, 0, 64), lq=size.lq), None, "an empty split (lse -inf, outputs 0) between two others"),
        (
            _partials(rng, (64, 0, 64), lq=size.lq, empty_outputs=np.nan),
            None,
            "an empty split whose outputs are NaN junk: it takes no weight, and its junk must not reach o",
        ),
        (every, None, "every split empty: o = 0 and lse = -inf (vLLM PR #39148: NaN from -inf - -inf)"),
    ]


def _large_lse(kind, fmt, size, rng):
    found = _partials(rng, (100, 100), lq=size.lq, center=800.0)
    # Splits 800 apart: a merge whose shift is not the largest lse (the smallest, the first) overflows e**(lse - m)
    # in every dtype's arithmetic, float64's included.
    apart = _partials(rng, (100, 100), lq=size.lq)
    apart["lses"][1] += 800.0
    return [
        (found, None, "lses near 800, where e**lse overflows float64 (TE PR #716)"),
        (apart, None, "two splits' lses 800 apart: the lower split's weight is e**-800, 0 in every dtype"),
    ]


def _many(kind, fmt, size, rng):
    return [(_partials(rng, (16,) * 64, lq=size.lq, dv=32), None, "64 splits of 16 keys")]


def fp8_cache(rng, lq: int, splits=(64, 64, 128), d: int = 64):
    """(q, k, v, splits): one attention problem over an FP8 KV cache, batch 2: q in bfloat16, k and v the exact
    dequantized e4m3 cache of per-tensor descales (vLLM's k_scale, v_scale), one channel of v 200 times the rest
    (the cache's scale is set by it), all as float64."""
    import ml_dtypes

    from ..reference import fp8 as _fp8

    q = (rng.standard_normal((2, lq, d)) * 2).astype(ml_dtypes.bfloat16).astype(np.float64)
    k8, dk = _fp8.quantize(rng.standard_normal((2, sum(splits), d)) * 3, "float8_e4m3fn")
    v = rng.standard_normal((2, sum(splits), d))
    v[..., 7] *= 200.0
    v8, dv = _fp8.quantize(v, "float8_e4m3fn")
    return q, _fp8.dequantize(k8, dk), _fp8.dequantize(v8, dv), splits


def split_partials(q, k, v, splits) -> dict:
    """The partials (outputs, lses) of attention over consecutive splits of the keys, computed in float64 with
    exact products and correctly rounded sums (math.fsum; exp and log from softaudit._libm), so they are the same
    bits on every CPU."""
    import math

    from .._libm import exp, log

    batch, lq, d = q.shape
    scores = np.array(
        [
            [[math.fsum(q[b, i] * k[b, j]) / math.sqrt(d) for j in range(k.shape[1])] for i in range(lq)]
            for b in range(batch)
        ]
    )
    outs, lses, start = [], [], 0
    for length in splits:
        s = scores[..., start : start + length]
        m = s.max(axis=-1, keepdims=True)
        e = exp(s - m)
        total = np.array([[math.fsum(e[b, i]) for i in range(lq)] for b in range(batch)])
        lses.append(m[..., 0] + log(total))
        part = v[:, start : start + length]
        sums = [[[math.fsum(e[b, i] * part[b, :, c]) for c in range(d)] for i in range(lq)] for b in range(batch)]
        outs.append(np.array(sums) / total[..., None])
        start += length
    return {"outputs": np.stack(outs), "lses": np.stack(lses)}


def _fp8_cache(kind, fmt, size, rng):
    """Split-KV decoding on an FP8 KV cache: the partials of three splits of 256 keys (`fp8_cache`,
    `split_partials`); the merge's exact result is theirs as given."""
    return [
        (
            split_partials(*fp8_cache(rng, size.lq)),
            None,
            "split-KV decoding on an e4m3 KV cache (per-tensor scales, one channel of v 200 times the rest): three "
            "splits' exact partials",
        )
    ]


_MAKERS = {
    "merge_gaussian": ("splits of equal and of unequal sizes", _gaussian),
    "merge_empty": ("empty splits, their NaN junk, and every split empty", _empty),
    "merge_large_lse": ("lses past 710, and lses 800 apart", _large_lse),
    "merge_many": ("64 splits", _many),
    "merge_fp8_cache": ("split-KV decoding on an FP8 KV cache: the exact partials of three splits", _fp8_cache),
}

_BEST = "weights e**(lse_s - max) and both sums in {wide}, round once (merge_attention.textbook)"
MERGE_ATTENTION = Kind(
    "merge_attention",
    "f(outputs, lses) -> (o, lse): outputs (S, ..., Lq, dv), lses (S, ..., Lq) over S disjoint key splits",
    arguments=("outputs", "lses"),
    keywords=(),
    outputs=("o", "lse"),
    plain="merge_attention.in_dtype",
    standard=("merge_attention.in_dtype",),
    best="merge_attention.textbook",
    best_practice=_BEST,
    families=tuple(_MAKERS),
    reference=reference,
    conditioning=conditioning,
    element_inputs=element_inputs,
    reduction=("lses", 0),
    row_wise=False,
    reduces=False,
    logarithmic=False,
    batched=False,
    scale_terms="sum w_s |o_s| and the lses' share",
    fixes={"nan": "guard empty splits: where every lse is -inf, give o = 0 and lse = -inf, not -inf - -inf"},
    makers=_MAKERS,
)
