"""attention_grad: attention's vector-Jacobian product for an upstream gradient g = dO (..., Lq, dv), `f(q, k, v,
g, mask=None) -> (dq, dk, dv)`, with attention's modifiers as keywords (`_grads.GRAD_MODIFIERS`: softcap, causal,
window, bias, alibi_slopes, sinks).

Its parts are in kinds/_grads.py: the exact VJP softaudit.reference evaluates (with the modifiers; the softcap's
derivative sech(s / cap)**2 multiplies dS), the conditioning scales `conditioning.attention_grad`, a Gaussian dO
where a family gives none, and `attention_conventions`, which names the convention a far gradient matches; what it
shares with attention_sinks_grad is `_grads.ATTENTION_GRAD_FIELDS`; its families are attention's
(kinds/_families.py), the attention backward bugs' (softaudit/cases/_grad.py) and the modifiers' (kinds/_attention.py).
"""

from __future__ import annotations

from . import _attention, _families, _grads
from ._kind import Kind

_BEST = "P, dP, D and dS in {wide}, each gradient rounded once (attention_grad.upcast)"
ATTENTION_GRAD = Kind(
    "attention_grad",
    "f(q, k, v, g, mask=None) -> (dq, dk, dv), with attention's causal, window, bias, alibi_slopes and sinks as "
    "keywords",
    arguments=("q", "k", "v", "g"),
    keywords=("mask",),
    outputs=("dq", "dk", "dv"),
    plain="attention_grad.naive",
    standard=("attention_grad.naive", "attention_grad.flash2_b64"),
    best="attention_grad.upcast",
    best_practice=_BEST,
    # The reported attention families (tier B made this reference fast; docs/gradients.md has their cost). Not
    # attn_nan_masked_key: the slowest by far in float64, where the dtype's max in its masked values keeps tier B off
    # (|v| >= 2**500) and sends every output to tier C; and its junk is not junk for a backward pass (dQ = dS K
    # meets the NaN keys, dP = dO V^T the max values: best practice gives NaN too).
    families=_families.ATTENTION
    + ("attn_similar_low_rank", "attn_keys_64_mod_128", "attn_constant_1000", "attn_d256_causal")
    + tuple(f for f in _families.REPORTED_ATTENTION if f != "attn_nan_masked_key")
    + ("attn_causal", "attn_window", "attn_bias", "attn_alibi", "attn_sinks", "attn_softcap"),
    reference=_grads.attention_reference,
    conditioning=_grads.attention_conditioning,
    conventions=_grads.attention_conventions,
    declarable=_attention.DECLARABLE,
    declared=_attention.declared,
    fixes={
        "nan": "give queries with nothing to attend P = 0 (where over the kept keys): their gradient is 0",
        "mask_leak": "exclude masked keys with where: a key no query attends has dK = dV = 0 exactly",
        "below_best": f"keep P, dP and D in {{wide}}; best practice: {_BEST}",
    },
    **_grads.ATTENTION_GRAD_FIELDS,
)
