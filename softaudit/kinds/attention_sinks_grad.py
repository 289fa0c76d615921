"""attention_sinks_grad: attention's backward with learnable sinks, the sinks' own gradient included (gpt-oss trains
one sink logit per head; FlashAttention 3 and 4 and TransformerEngine return its gradient beside dq, dk, dv).

`f(q, k, v, g, sinks, mask=None, **modifiers) -> (dq, dk, dv, dsinks)`: dq, dk, dv as attention_grad's with the
sinks (each a key of value 0 whose score is its logit z), and dsinks of sinks' shape: dz = sum_i dS_i,z =
-sum_i P_i,z D_i over the queries of every batch entry that shares the sink (its dP is 0: its value is 0), D_i =
sum_j P_ij dP_ij = rowsum(dO * O). The modifiers are attention_grad's but the sinks: causal, window, bias, ALiBi.
"""

from __future__ import annotations

import functools

import numpy as np

from . import _attention, _grads
from ._kind import Kind


def reference(kind, inputs: dict, mask, dtype, **options) -> tuple:
    if np.ndim(inputs["sinks"]) == 0:
        raise ValueError("attention_sinks_grad takes sinks of at least one axis (one logit per head), got a scalar")
    return (*_grads.attention_reference(kind, inputs, mask, dtype, **options), _dsinks(inputs, mask, dtype, options))


def _dsinks(inputs: dict, mask, dtype, options: dict):
    """The exact dsinks of the case with its modifiers, a Result."""
    from ..reference import evaluate_sinks_grad

    found = _grads.attention_spec(inputs, mask, options)
    arrays = (inputs[n] for n in ("q", "k", "v", "g"))
    extras = {"bias": found["bias"], "softcap": found["softcap"]}
    return evaluate_sinks_grad(*arrays, found["sinks"], found["mask"], dtype=dtype, **extras)


def conventions(kind, pc, y) -> str:
    """dq, dk, dv: attention_grad's neighbours. dsinks: the causal and window neighbours' exact dsinks."""
    index = getattr(pc, "index", 0)
    if index < 3:
        return _grads.attention_conventions(kind, pc, y)
    options, inputs = dict(pc.case.options), pc.inputs
    if not options:
        return ""

    memo = _grads.neighbour_memo(pc)

    def exact(label, alt_inputs, alt_mask, alt_options):
        if ("dsinks", label) not in memo:
            memo["dsinks", label] = _dsinks(alt_inputs, alt_mask, pc.fmt.dtype, alt_options).value
        return memo["dsinks", label]

    lq, lk = inputs["q"].shape[-2], inputs["k"].shape[-2]
    neighbours = [n for n in _attention._neighbours(inputs, pc.mask, options, lq, lk) if "sinks" in n[1]]
    return _attention.closest(pc, y, [(n[0], functools.partial(exact, *n)) for n in neighbours])


# -------------------------------------------------------------------------------------------------- families


def _heads(rng, heads, lq, lk, d=64):
    return {
        "q": rng.standard_normal((1, heads, lq, d)),
        "k": rng.standard_normal((1, heads, lk, d)),
        "v": rng.standard_normal((1, heads, lk, d)),
    }


def _extremes(kind, fmt, size, rng):
    arrays = _heads(rng, 4, size.lq, 128)
    # 12 over 128 keys of scores N(0, 1): the sink takes 99.9% of every query's weight; -20: a share of 1e-11
    return [
        (arrays | {"sinks": np.array([12.0, -20.0, 4.0, 0.0])}, None, "sinks of 12, -20, 4 and 0 over 128 keys", {}),
        (
            arrays | {"sinks": np.full(4, 12.0)},
            rng.random((size.lq, 128)) < 0.1,
            "sinks of 12 with 90% of the keys masked: dz = -sum P_z D, P_z near 1",
            {},
        ),
    ]


def _shared(kind, fmt, size, rng):
    q = rng.standard_normal((2, 4, size.lq, 64))
    k, v = rng.standard_normal((2, 1, 256, 64)), rng.standard_normal((2, 1, 256, 64))
    sinks = rng.standard_normal(4) * 2
    text = "4 query heads sharing one K/V head (GQA), a sink per query head, over a batch of 2: dz sums both"
    return [({"q": q, "k": k, "v": v, "sinks": sinks}, None, text, {}, {"causal": True})]


_MAKERS = {
    "sinks_extremes": ("sinks that take nearly every weight, or none", _extremes),
    "sinks_shared": ("grouped-query heads with a sink per query head, shared over the batch", _shared),
}

_BEST = "P (the sink's included), dP, D and dS in {wide}, each gradient rounded once (attention_sinks_grad.upcast)"
ATTENTION_SINKS_GRAD = Kind(
    "attention_sinks_grad",
    "f(q, k, v, g, sinks, mask=None) -> (dq, dk, dv, dsinks), with attention_grad's causal, window, bias and "
    "alibi_slopes as keywords",
    arguments=("q", "k", "v", "g", "sinks"),
    keywords=("mask",),
    outputs=("dq", "dk", "dv", "dsinks"),
    plain="attention_sinks_grad.naive",
    standard=("attention_sinks_grad.naive", "attention_sinks_grad.flash2_b64"),
    best="attention_sinks_grad.upcast",
    best_practice=_BEST,
    families=("attn_sinks", *_MAKERS),
    reference=reference,
    conditioning=_grads.attention_conditioning,
    conventions=conventions,
    fixes={
        "nan": "give queries with nothing to attend but the sink P = 0 on the keys (where over the kept keys)",
        "below_best": f"keep P, dP and D in {{wide}}; best practice: {_BEST}",
    },
    # (its reruns would give each batch item its own sink: a sink shared over the batch sums there, so the
    # outputs would not compare)
    batched=False,
    extras={"bias": 2, "alibi_slopes": 0},
    makers=_MAKERS,
    **_grads.ATTENTION_GRAD_FIELDS,
)
