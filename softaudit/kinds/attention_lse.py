"""attention_lse: attention that also returns each query's log-sum-exp, as FlashAttention and FlashInfer do (the
split-KV merges, ring attention and the backward pass read it), where +inf and misplaced LSEs have shipped.

`f(q, k, v, mask=None, **modifiers) -> (o, lse)`: o as the attention kind's (its modifiers too: softcap, bias,
ALiBi, causal, window, sinks), lse (..., Lq) = log sum_j e**s_j over the kept keys of the modified scores (a sink's
e**z included). A query with nothing to attend has lse = -inf (log of an empty sum; FlashAttention PR #978 gave
+inf) and o = 0, or NaN, or what the policy's fully-masked rule accepts for o.
"""

from __future__ import annotations

import numpy as np

from . import _attention
from ._kind import Kind


def reference(kind, inputs: dict, mask, dtype, **options) -> tuple:
    from ..reference import evaluate_attention_lse

    (o,) = _attention.reference(kind, inputs, mask, dtype, **options)
    found = _attention.spec(inputs, mask, options)
    lse = evaluate_attention_lse(inputs["q"], inputs["k"], inputs["v"], dtype=dtype, **found)
    return o, lse


def conditioning(kind, inputs: dict, mask, references, **options) -> tuple[dict, dict]:
    """o's as attention's; lse's: |lse| + sum_j p_j (2 a_j f_j + |b_j|) + 1 (d lse / d s_j = p_j; a_j = c sum_t |q_t
    k_jt| and f_j = sech(s_j / cap)**2 as for o; the 1 for rounding the sum once, as the log kinds)."""
    o_ref, lse_ref = references
    (o_extra,) = _attention.conditioning(kind, inputs, mask, (o_ref,), **options)
    found = _attention.spec(inputs, mask, options)
    keep = True if found["mask"] is None else found["mask"]
    if found["bias"] is not None:
        keep = keep & (found["bias"] != -np.inf)
    p, weight, _, _ = _attention.modified_weights(inputs["q"], inputs["k"], keep, found)
    lse = lse_ref.hi + lse_ref.lo
    with np.errstate(all="ignore"):
        scale = np.where(np.isfinite(lse), np.abs(lse) + (p * weight).sum(axis=-1) + 1.0, 0.0)
    return o_extra, {"undefined": lse_ref.undefined, "scale": np.nan_to_num(scale)}


def element_inputs(kind, pc, position: tuple):
    """The query behind one output element (of o, or of lse), with the keys and values of its batch entry."""
    if getattr(pc, "index", 0) == 1:
        position = (*position, 0)  # an lse element is its query's
    return _attention.element_inputs(kind, getattr(pc, "pc", pc), position)


def _empty(kind, fmt, size, rng):
    q = rng.standard_normal((1, 2, size.lq, 64))
    k, v = rng.standard_normal((1, 2, 300, 64)), rng.standard_normal((1, 2, 300, 64))
    keep = np.ones((size.lq, 300), bool)
    keep[0] = False  # a query with no key: lse = -inf (FlashAttention PR #978 gave +inf)
    keep[1, 150:] = False
    arrays = {"q": q, "k": k, "v": v}
    causal = np.arange(300)[None, :] <= np.arange(size.lq)[:, None] + 300 - size.lq  # bottom-right, as a mask
    return [
        (arrays, keep, "query 0 attends no key: its lse is -inf (FlashAttention PR #978: +inf)"),
        (arrays, causal, "a causal mask over 300 keys, bottom-right aligned"),
    ]


def _large(kind, fmt, size, rng):
    arrays = {
        "q": rng.standard_normal((1, 2, size.lq, 64)) * 8,
        "k": rng.standard_normal((1, 2, 256, 64)) * 8,
        "v": rng.standard_normal((1, 2, 256, 64)),
    }
    return [(arrays, None, "scores of N(0, 64**2): lse near the largest score, far from 0")]


_MAKERS = {
    "lse_empty": ("queries with no key, and causal masks", _empty),
    "lse_large": ("large scores", _large),
}

_BEST = "scores, softmax, P V and the lse in {wide}, round once (attention_lse.upcast)"
ATTENTION_LSE = Kind(
    "attention_lse",
    "f(q, k, v, mask=None) -> (o, lse), with attention's modifiers as keywords",
    arguments=("q", "k", "v"),
    keywords=("mask",),
    outputs=("o", "lse"),
    plain="attention_lse.naive",
    standard=("attention_lse.naive", "attention_lse.tiled_b64"),
    practice=("attention_lse.upcast_running",),
    best="attention_lse.upcast",
    best_practice=_BEST,
    families=("attn_gaussian", "attn_masks", "attn_softcap", "attn_sinks", *_MAKERS),
    reference=reference,
    conditioning=conditioning,
    element_inputs=element_inputs,
    reduction=("k", -2),
    row_wise=False,
    reduces=False,
    logarithmic=False,
    leak_probe=True,
    measures=("max_ulp_vsum",),
    causes=("subnormal",),
    scale_terms="sum p|v| and the scores' share",
    leak="outputs move when masked keys change",
    max_floor=6.0,
    fixes={"nan": "give a query with no key lse = -inf and o = 0 (where over the kept keys), not -inf - -inf"},
    makers=_MAKERS,
    declarable=_attention.DECLARABLE,
    declared=_attention.declared,
    extras=_attention.EXTRAS,
)
