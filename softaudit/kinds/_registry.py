"""The kinds softaudit audits, one entry each: adding a kind is one entry here (its parts imported from the module
that holds them) plus its reference and families; a layer above that needs more of it (the hunt's strategy, the
rounding budget) finds it in its own table, and a kind missing there goes without."""

from __future__ import annotations

from . import _attention, _grads, _rows
from ._kind import Kind
from .attention_lse import ATTENTION_LSE
from .attention_sinks_grad import ATTENTION_SINKS_GRAD
from .cross_entropy import CROSS_ENTROPY, CROSS_ENTROPY_GRAD
from .merge_attention import MERGE_ATTENTION

#: The row families every row kind runs, in registration order (softaudit/cases/_rows.py).
_ROW_FAMILIES = (
    "textbook",
    "gaussian",
    "offset",
    "wide_spread",
    "ties",
    "dominant",
    "long",
    "temperature",
    "subnormal",
    "neg_inf",
    "mnist_logits",
)
#: Rows with a NaN, a +inf logit or every entry -inf: run by every row kind, forward and gradient. The masked kinds
#: get them with every entry kept, and with the NaN and the +inf masked out (defined rows that must not see them;
#: softaudit/cases/_rows.py): 40 rows in the main job, about 2 s on 2 cores.
_UNDEFINED = ("undefined",)
_MASKED_FAMILIES = ("padding", "causal", "random_mask", "fully_masked", "masked_extremes", "below_fill")
_ATTENTION_FAMILIES = ("attn_gaussian", "attn_shapes", "attn_long", "attn_large_activations", "attn_masks")
#: The mask x score-regime x length grids (softaudit/cases/_grid.py), 144 cases each: the forward kinds only (the
#: gradient kinds' time in the main job).
_GRIDS = {"masked_softmax": ("mask_grid",), "attention": ("attn_grid",)}
#: Families from reported bugs (softaudit/cases/_reported.py): the forward row kinds', and attention's. The row
#: gradient kinds do not run them (the main job's time); attention_grad runs attention's but one (below).
_REPORTED_ROWS = ("reported_vectors", "uniform_512", "equal_sum_overflow", "tile_edges", "mask_planes")
_REPORTED_ATTENTION = (
    "attn_nan_masked_key",
    "attn_tile_edges",
    "attn_fp8_keys_128",
    "attn_causal_alignment",
    "attn_broadcast_kv",
    "attn_exact_probes",
)

#: What the row kinds share: x of rows x n, reduced along its last axis.
_ROW = dict(
    reference=_rows.reference,
    conditioning=_rows.conditioning,
    element_inputs=_rows.element_inputs,
    reduction=("x", -1),
    row_wise=True,
)
_PROBABILITIES = ("negative", "sum_err", "argmax_flips")

SOFTMAX = Kind(
    "softmax",
    "f(x, axis=-1)",
    arguments=("x",),
    keywords=("axis",),
    outputs=("y",),
    plain="softmax.max_shifted",
    standard=(
        "softmax.max_shifted",
        "softmax.online_b128",
        "softmax.exp2",
        "softmax.division_free",
        "softmax.log1p_form",
    ),
    best="softmax.max_shifted_f32acc",
    best_practice="max-shift and sum in {wide}, round once (softmax.max_shifted_f32acc)",
    families=_ROW_FAMILIES + _UNDEFINED + _REPORTED_ROWS,
    reduces=False,
    logarithmic=False,
    invariants=("shift", "permutation", "monotonic"),
    measures=_PROBABILITIES,
    causes=("subnormal",),
    **_ROW,
)

LOG_SOFTMAX = Kind(
    "log_softmax",
    "f(x, axis=-1)",
    arguments=("x",),
    keywords=("axis",),
    outputs=("y",),
    plain="log_softmax.shifted",
    standard=("log_softmax.shifted", "log_softmax.log1p_form"),
    best="log_softmax.log1p_form_f32acc",
    best_practice="x - max - log1p(sum of the others) in {wide}, round once (log_softmax.log1p_form_f32acc)",
    families=_ROW_FAMILIES + _UNDEFINED + _REPORTED_ROWS,
    reduces=False,
    logarithmic=True,
    invariants=("shift", "permutation", "monotonic"),
    measures=("argmax_flips",),
    causes=("absorbed", "subnormal"),
    **_ROW,
)

LOGSUMEXP = Kind(
    "logsumexp",
    "f(x, axis=-1)",
    arguments=("x",),
    keywords=("axis",),
    outputs=("y",),
    plain="logsumexp.shifted",
    standard=("logsumexp.shifted", "logsumexp.log1p_form"),
    best="logsumexp.log1p_form_f32acc",
    best_practice="max + log1p(sum of the others) in {wide}, round once (logsumexp.log1p_form_f32acc)",
    # (no subnormal cause: a result below the normal range is judged as any other)
    families=_ROW_FAMILIES + _UNDEFINED + _REPORTED_ROWS,
    reduces=True,
    logarithmic=True,
    invariants=("permutation", "lse_below_max"),
    causes=("absorbed",),
    **_ROW,
)

MASKED_SOFTMAX = Kind(
    "masked_softmax",
    "f(x, mask, axis=-1)",
    arguments=("x", "mask"),
    keywords=("axis",),
    outputs=("y",),
    plain="masked_softmax.where_in_dtype",
    standard=("masked_softmax.where_in_dtype",),
    best="masked_softmax.where",
    best_practice="where over the kept entries in {wide}, round once (masked_softmax.where)",
    families=_ROW_FAMILIES + _UNDEFINED + _MASKED_FAMILIES + _GRIDS["masked_softmax"] + _REPORTED_ROWS,
    reduces=False,
    logarithmic=False,
    invariants=("shift", "permutation", "monotonic", "masked_values", "masked_equals_kept"),
    measures=_PROBABILITIES,
    causes=("subnormal",),
    fixes={"nan": "take the max over the kept entries only and exclude masked ones with where"},
    **_ROW,
)

_ATTENTION_BEST = "scores, softmax and P V in {wide}, round once (attention.upcast)"
ATTENTION = Kind(
    "attention",
    "f(q, k, v, mask=None)",
    arguments=("q", "k", "v"),
    keywords=("mask",),
    outputs=("y",),
    plain="attention.naive",
    standard=("attention.naive", "attention.tiled_b64"),
    best="attention.upcast",
    best_practice=_ATTENTION_BEST,
    families=_ATTENTION_FAMILIES + _GRIDS["attention"] + _REPORTED_ATTENTION + tuple(_attention.MAKERS),
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
    makers=_attention.MAKERS,
    extras=_attention.EXTRAS,
    max_floor=6.0,
    fixes={
        "nan": "subtract each query's largest score before exp and form the scores in {wide}",
        "mask_leak": "exclude masked keys with where on the scores; a finite fill is not far enough below every score",
        "below_best": "keep P in {wide} for P V, or work in {wide} throughout: rounding P to the dtype before P V "
        f"costs about u of sum p|v| per output, as FlashAttention does; best practice: {_ATTENTION_BEST}",
    },
)

# The gradient kinds: vector-Jacobian products for an upstream gradient g (docs/metrics.md, docs/reference.md).
_ROW_GRAD = dict(
    reference=_grads.row_reference,
    conditioning=_grads.row_conditioning,
    element_inputs=_grads.row_element_inputs,
    upstream=_grads.row_upstream,
    reduction=("x", -1),
    row_wise=True,
    reduces=False,
    logarithmic=False,
    causes=("subnormal",),
)
#: What each row gradient's conditioning scale adds up (each kind its own formula, for the cancellation sentence).
_SOFTMAX_GRAD_TERMS = "the terms of g - <g, p>"
#: Upstream gradients with a known structure, on Gaussian logits (softaudit/cases/_grad.py).
_UPSTREAM_FAMILIES = ("g_onehot", "g_cross_entropy", "g_constant", "g_wide")

SOFTMAX_GRAD = Kind(
    "softmax_grad",
    "f(x, g, axis=-1) -> dx",
    arguments=("x", "g"),
    keywords=("axis",),
    outputs=("dx",),
    plain="softmax_grad.in_dtype",
    # saved_output: what autograd does (the forward's output rounded to the dtype, the backward in float32)
    standard=("softmax_grad.in_dtype", "softmax_grad.from_logp", "softmax_grad.saved_output"),
    best="softmax_grad.f32acc",
    best_practice="p, <g, p> and p (g - <g, p>) in {wide}, round once (softmax_grad.f32acc)",
    families=_ROW_FAMILIES + _UNDEFINED + _UPSTREAM_FAMILIES,
    scale_terms=_SOFTMAX_GRAD_TERMS,
    measures=("sum_zero",),
    **_ROW_GRAD,
)

LOG_SOFTMAX_GRAD = Kind(
    "log_softmax_grad",
    "f(x, g, axis=-1) -> dx",
    arguments=("x", "g"),
    keywords=("axis",),
    outputs=("dx",),
    plain="log_softmax_grad.in_dtype",
    standard=("log_softmax_grad.in_dtype",),
    best="log_softmax_grad.f32acc",
    best_practice="p and g - p sum(g) in {wide}, round once (log_softmax_grad.f32acc)",
    families=_ROW_FAMILIES + _UNDEFINED + _UPSTREAM_FAMILIES,
    scale_terms="the terms of g - p sum(g)",
    **_ROW_GRAD,
)

LOGSUMEXP_GRAD = Kind(
    "logsumexp_grad",
    "f(x, g, axis=-1) -> dx (g: x's shape without the axis)",
    arguments=("x", "g"),
    keywords=("axis",),
    outputs=("dx",),
    plain="logsumexp_grad.exp_minus_lse",
    standard=("logsumexp_grad.exp_minus_lse", "logsumexp_grad.softmax_in_dtype"),
    best="logsumexp_grad.f32acc",
    best_practice="p g with p in {wide}, round once (logsumexp_grad.f32acc)",
    families=_ROW_FAMILIES + _UNDEFINED,
    scale_terms="p g and the logits' share in p",
    **_ROW_GRAD,
)

MASKED_SOFTMAX_GRAD = Kind(
    "masked_softmax_grad",
    "f(x, mask, g, axis=-1) -> dx",
    arguments=("x", "mask", "g"),
    keywords=("axis",),
    outputs=("dx",),
    plain="masked_softmax_grad.where_in_dtype",
    standard=("masked_softmax_grad.where_in_dtype", "masked_softmax_grad.where_saved_output"),
    best="masked_softmax_grad.where",
    best_practice=(
        "where over the kept entries in {wide}, exact zeros elsewhere, round once (masked_softmax_grad.where)"
    ),
    families=_ROW_FAMILIES + _UNDEFINED + _MASKED_FAMILIES + _UPSTREAM_FAMILIES,
    scale_terms=_SOFTMAX_GRAD_TERMS,
    measures=("sum_zero",),
    leak="masked entries get a gradient",
    fixes={
        "nan": "give rows with nothing kept a zero gradient: where over the kept entries, not a -inf fill",
        "mask_leak": "multiply the gradient by the mask (or use where): a masked entry's gradient is exactly 0",
    },
    **_ROW_GRAD,
)

_ATTENTION_GRAD_BEST = "P, dP, D and dS in {wide}, each gradient rounded once (attention_grad.upcast)"
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
    best_practice=_ATTENTION_GRAD_BEST,
    # The reported attention families (tier B made this reference fast): each takes under 1 s per dtype on the
    # 2-core development machine, attn_tile_edges 3.6-5.6 s in float64 (docs/gradients.md has the table). Not
    # attn_nan_masked_key: 15-24 s in float64, where the dtype's max in its masked values keeps tier B off
    # (|v| >= 2**500) and sends every output to tier C; and its junk is not junk for a backward pass (dQ = dS K
    # meets the NaN keys, dP = dO V^T the max values: best practice gives NaN too).
    families=_ATTENTION_FAMILIES
    + ("attn_similar_low_rank", "attn_keys_64_mod_128", "attn_constant_1000", "attn_d256_causal")
    + tuple(f for f in _REPORTED_ATTENTION if f != "attn_nan_masked_key")
    + ("attn_causal", "attn_window", "attn_bias", "attn_alibi", "attn_sinks", "attn_softcap"),
    reference=_grads.attention_reference,
    conditioning=_grads.attention_conditioning,
    conventions=_grads.attention_conventions,
    fixes={
        "nan": "give queries with nothing to attend P = 0 (where over the kept keys): their gradient is 0",
        "mask_leak": "exclude masked keys with where: a key no query attends has dK = dV = 0 exactly",
        "below_best": f"keep P, dP and D in {{wide}}; best practice: {_ATTENTION_GRAD_BEST}",
    },
    **_grads.ATTENTION_GRAD_FIELDS,
)

#: Every kind by name, in the order the audit runs them.
KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        SOFTMAX,
        LOG_SOFTMAX,
        LOGSUMEXP,
        MASKED_SOFTMAX,
        ATTENTION,
        ATTENTION_LSE,
        CROSS_ENTROPY,
        MERGE_ATTENTION,
        SOFTMAX_GRAD,
        LOG_SOFTMAX_GRAD,
        LOGSUMEXP_GRAD,
        MASKED_SOFTMAX_GRAD,
        ATTENTION_GRAD,
        ATTENTION_SINKS_GRAD,
        CROSS_ENTROPY_GRAD,
    )
}


def get(name) -> Kind:
    """The kind called `name`; ValueError in one line for an unknown one."""
    try:
        return KINDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown kind {name!r}; known: {', '.join(KINDS)}") from None
