"""attention: o = softmax(c q k^T, mask) v with c = 1 / sqrt(d), `f(q, k, v, mask=None)`, q (..., Lq, d), k
(..., Lk, d), v (..., Lk, dv), a boolean mask (..., Lq, Lk) or None (True = may attend); with the score modifiers
(softcap, causal, window) as keywords and the arrays bias, alibi_slopes and sinks beside them (`Kind.extras`).

Its parts are in kinds/_attention.py: the exact reference (softaudit.reference's attention with the modifiers
applied exactly), the conditioning scale (`conditioning.attention`, |o| + sum_j p_j |v_j| + 2 sum_j p_j |v_j - o|
a_j, and its form with the modifiers), the modifiers' families (`_attention.MAKERS`) and `conventions`, which names
the convention a far output matches; the families attention shares are in kinds/_families.py.
"""

from __future__ import annotations

from . import _attention, _families
from ._kind import Kind

#: The mask x score-regime x length grid (softaudit/cases/_grid.py), 144 cases: the forward kind only (the gradient
#: kind's time in the main job).
_GRID = ("attn_grid",)

_BEST = "scores, softmax and P V in {wide}, round once (attention.upcast)"
ATTENTION = Kind(
    "attention",
    "f(q, k, v, mask=None)",
    arguments=("q", "k", "v"),
    keywords=("mask",),
    outputs=("y",),
    plain="attention.naive",
    standard=("attention.naive", "attention.tiled_b64"),
    practice=("attention.upcast_running",),
    best="attention.upcast",
    best_practice=_BEST,
    families=_families.ATTENTION
    + _GRID
    + _families.REPORTED_ATTENTION
    + tuple(_attention.MAKERS)
    + tuple(_attention.OWN),
    reference=_attention.reference,
    conditioning=_attention.conditioning,
    element_inputs=_attention.element_inputs,
    reduction=("k", -2),
    row_wise=False,
    reduces=False,
    logarithmic=False,
    leak_probe=True,
    measures=("max_ulp_vsum", "max_normwise"),
    causes=("subnormal",),
    scale_terms="sum p|v| and the scores' share",
    leak="outputs move when masked keys change",
    conventions=_attention.conventions,
    makers=_attention.MAKERS | _attention.OWN,
    declarable=_attention.DECLARABLE,
    declared=_attention.declared,
    extras=_attention.EXTRAS,
    max_floor=6.0,
    kept=_attention.FP8_CACHE,
    optional=_attention.FP8_CACHE,
    fixes={
        "nan": "subtract each query's largest score before exp and form the scores in {wide}",
        "mask_leak": "exclude masked keys with where on the scores; a finite fill is not far enough below every score",
        "below_best": "keep P in {wide} for P V, or work in {wide} throughout: rounding P to the dtype before P V "
        f"costs about u of sum p|v| per output, as FlashAttention does; best practice: {_BEST}",
    },
)
