"""The gradient kinds' parts of the loop: vector-Jacobian products for an upstream gradient g.

Row kinds (softmax_grad, log_softmax_grad, logsumexp_grad, masked_softmax_grad): x of rows x n and g of the forward
output's shape. attention_grad: q, k, v, g = dO (..., Lq, dv) and a mask or None, and attention's modifiers
(`GRAD_MODIFIERS`); three outputs (dq, dk, dv).
The gradient kind modules (softmax_grad.py ... attention_grad.py, attention_sinks_grad.py) import these and
`ROW_GRAD_FIELDS`, `ATTENTION_GRAD_FIELDS`, what they share as kinds; each part imports the reference where it uses
it, since marking a candidate loads the registry and must not load the reference (softaudit/adapters).
"""

from __future__ import annotations

import functools

import numpy as np

from .. import conditioning as _conditioning
from . import _attention

#: The attention modifiers attention_grad takes (keywords, as the forward's): causal and window choose the keys each
#: query attends (the backward is a masked one); a bias, ALiBi's slopes (a bias too) and sinks (one more key, of
#: value 0, whose score is the sink's logit) add to the scores; the softcap bends them (s -> cap tanh(s / cap),
#: before the bias), and its derivative sigma = sech(s / cap)**2 multiplies dS.
GRAD_MODIFIERS = ("softcap", "causal", "window", "bias", "alibi_slopes", "sinks")

#: Kinds whose g has the forward output's shape without the reduced axis (one value per row).
_G_PER_ROW = ("logsumexp_grad",)


def _row_scale(name: str):
    """The conditioning scale of a row gradient kind (masked softmax's VJP is softmax's over the kept entries). Read
    when called, not when imported: softaudit.conditioning imports the kinds, and may be the first to load."""
    return {
        "softmax_grad": _conditioning.softmax_grad,
        "masked_softmax_grad": _conditioning.softmax_grad,
        "log_softmax_grad": _conditioning.log_softmax_grad,
        "logsumexp_grad": _conditioning.logsumexp_grad,
    }[name]


def _exact(ref) -> np.ndarray:
    return ref.hi if not ref.lo.any() else ref.hi + ref.lo


def row_upstream(kind, arrays: dict, mask, rng) -> np.ndarray:
    """A standard Gaussian g of the forward output's shape."""
    x = arrays["x"]
    return rng.standard_normal(x.shape[:-1] if kind.name in _G_PER_ROW else x.shape)


def row_reference(kind, inputs: dict, mask, dtype) -> tuple:
    from .. import reference

    return (reference.evaluate_grad(kind.name, inputs["x"], inputs["g"], mask, dtype=dtype),)


def row_conditioning(kind, inputs: dict, mask, references) -> tuple[dict]:
    """Undefined rows (a NaN or +inf kept logit, a g that is not finite), rows that must give NaN, the scale, and
    for masked_softmax_grad the masked entries (their gradient is exactly 0; a fully masked row's is 0 too, so it
    is compared like any other)."""
    from .. import reference

    (ref,) = references
    x, g = inputs["x"].astype(np.float64), inputs["g"].astype(np.float64)
    kept = np.ones(x.shape, bool) if mask is None else np.broadcast_to(mask, x.shape)
    g_nan = np.isnan(g) if kind.name in _G_PER_ROW else (np.isnan(g) & kept).any(axis=-1)
    kept_nan = (np.isnan(x) & kept).any(axis=-1) | g_nan  # rows whose output must be NaN (an infinite g need not)
    scale = _row_scale(kind.name)(x, mask, g, _exact(ref))
    # A row whose kept logits are all -inf has no softmax, so no gradient either (the reference gives 0 there, as
    # for a row the mask keeps nothing of, which is defined: its gradient is exactly 0).
    no_softmax = reference.undefined_rows(x, mask) & (
        True if mask is None else np.broadcast_to(mask, x.shape).any(axis=-1)
    )
    undefined = ref.undefined | no_softmax
    extra = {"undefined": undefined, "kept_nan_rows": kept_nan, "scale": scale}
    return (extra | {"masked": ~kept} if kind.masked else extra,)


def row_element_inputs(kind, pc, position: tuple, output: int = 0) -> tuple[dict, np.ndarray | None]:
    """The row (its x, g and mask) behind one element of dx."""
    row = position[:-1]
    x, g = pc.inputs["x"], pc.inputs["g"]
    mask = None if pc.mask is None else np.broadcast_to(pc.mask, x.shape)[row]
    return {"x": x[row], "g": g[row]}, mask


#: What the row gradient kinds share as kinds (softmax_grad, log_softmax_grad, logsumexp_grad, masked_softmax_grad):
#: x of rows x n and g, dx of x's shape; each kind module adds the rest.
ROW_GRAD_FIELDS = {
    "reference": row_reference,
    "conditioning": row_conditioning,
    "element_inputs": row_element_inputs,
    "upstream": row_upstream,
    "reduction": ("x", -1),
    "row_wise": True,
    "reduces": False,
    "logarithmic": False,
    "causes": ("subnormal",),
}
#: What softmax's VJP's conditioning scale adds up (softmax_grad's and masked_softmax_grad's), for the cancellation
#: sentence.
SOFTMAX_GRAD_TERMS = "the terms of g - <g, p>"


def attention_upstream(kind, arrays: dict, mask, rng) -> np.ndarray:
    """A standard Gaussian dO of the output's shape (..., Lq, dv)."""
    q, k, v = arrays["q"], arrays["k"], arrays["v"]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    return rng.standard_normal(batch + (q.shape[-2], v.shape[-1]))


def attention_spec(inputs: dict, mask, options: dict) -> dict:
    """The exact problem's mask (with the case's causal and window), bias (with ALiBi's), softcap and sinks, as
    `_attention.spec` forms them for the forward."""
    return _attention.spec(inputs, mask, options)


def attention_problem(inputs: dict, mask, options: dict) -> tuple:
    """(q, k, v, g, keep, bias, extra, softcap) in float64 for the bounds that read the modified problem (the
    conditioning, the rounding budget): keep and bias broadcast to the scores' shape (bias None without one), a sink
    as one more key at the end (k = v = 0, its logit in the bias column; extra = 1, else 0), the softcap or None."""
    from ..reference import with_sinks

    found = attention_spec(inputs, mask, options)
    q, k, v, g = (np.asarray(inputs[n], dtype=np.float64) for n in ("q", "k", "v", "g"))
    bias, extra = found["bias"], 0
    keep = found["mask"]
    if found["sinks"] is not None:
        k, v, keep, bias = with_sinks(q, k, v, keep, bias, found["sinks"])
        extra = 1
    scores = np.broadcast_shapes(q.shape[:-1] + (k.shape[-2],), k.shape[:-2] + (1, 1))
    keep = np.broadcast_to(True if keep is None else keep, scores)
    if bias is not None:
        bias = np.broadcast_to(bias, scores)
        keep = keep & (bias != -np.inf)
    return q, k, v, g, keep, bias, extra, found["softcap"]


def attention_reference(kind, inputs: dict, mask, dtype, derivative=True, **options) -> tuple:
    """The exact (dq, dk, dv) of the case with its modifiers (`attention_spec`), one Result each (derivative
    False: without the softcap's derivative, the convention check's neighbour)."""
    from .. import reference

    found = attention_spec(inputs, mask, options)
    arrays = (inputs[n] for n in ("q", "k", "v", "g"))
    extras = {"bias": found["bias"], "sinks": found["sinks"], "softcap": found["softcap"]}
    extras["softcap_derivative"] = derivative
    return tuple(reference.evaluate_attention_grad(*arrays, found["mask"], dtype=dtype, **extras))


def attention_conditioning(kind, inputs: dict, mask, references, **options) -> tuple[dict, ...]:
    """Per output (dq, dk, dv, and attention_sinks_grad's dsinks): its undefined rows (from the reference), the
    scale, and for dk and dv the keys no query may attend (their gradients are exactly 0: anything else is a
    leak)."""
    q, k, v, g, keep, bias, extra, cap = attention_problem(inputs, mask, options)
    scale = 1 / np.sqrt(q.shape[-1])
    exact = [_exact(r) for r in references]
    scales = _conditioning.attention_grad(q, k, v, g, keep, exact, scale, bias, extra, softcap=cap)
    keep = keep[..., : keep.shape[-1] - extra]
    chosen = not keep.all()  # some key is not attended by some query
    out = []
    for name, ref, scale in zip(kind.outputs, references, scales):
        fields = {"undefined": ref.undefined, "scale": scale}
        if name in ("dk", "dv") and chosen:
            fields["masked"] = _unattended(keep, ref.value.shape)
        out.append(fields)
    return tuple(out)


def _unattended(keep: np.ndarray, shape: tuple) -> np.ndarray:
    """For a gradient of k's or v's `shape`: the keys no query may attend, in every batch entry k was broadcast
    along."""
    free = ~keep.any(axis=-2)  # (..., Lk) in the broadcast batch shape
    extra = free.ndim - (len(shape) - 1)
    free = free.all(axis=tuple(range(extra))) if extra > 0 else free
    axes = tuple(i for i, n in enumerate(shape[:-2]) if n == 1 and free.shape[i] != 1)
    free = free.all(axis=axes, keepdims=True) if axes else free
    return np.broadcast_to(free[..., None], shape)


def attention_element_inputs(kind, pc, position: tuple, output: int = 0) -> tuple[dict, np.ndarray | None]:
    """The inputs behind one element of dq, dk or dv: the whole case (an element of dk or dv depends on every
    query, and one of dq on every key)."""
    return {n: pc.inputs[n] for n in ("q", "k", "v", "g")}, pc.mask


#: What attention_grad and attention_sinks_grad share as kinds: q, k, v, g and a mask; gradients of their inputs'
#: shapes, which the upstream dO and the whole case are behind.
ATTENTION_GRAD_FIELDS = {
    "element_inputs": attention_element_inputs,
    "upstream": attention_upstream,
    "reduction": ("k", -2),
    "row_wise": False,
    "reduces": False,
    "logarithmic": False,
    "causes": ("subnormal",),
    "scale_terms": "the terms of dP - D and their share of the scores",
    "leak": "keys no query may attend get a gradient",
}


def attention_conventions(kind, pc, y) -> str:
    """Where a gradient (pc: the case seen through one output) is far from the exact one of its stated modifiers:
    which neighbouring convention's exact gradient it matches (the window off by one or aligned top-left, causal
    aligned top-left, the sink dropped, ALiBi's slopes rounded), or "". Each neighbour's exact gradients are computed
    once per prepared case: its outputs (dq, dk, dv) share them."""
    options, inputs, index = dict(pc.case.options), pc.inputs, getattr(pc, "index", 0)
    if not options and not any(n in inputs for n in _attention.EXTRAS):
        return ""
    memo = neighbour_memo(pc)
    own = bool(getattr(pc, "conventions", ()))  # (declared: each neighbour read in its own conditioning)

    def exact(label, alt_inputs, alt_mask, alt_options):
        if label not in memo:
            grads = attention_reference(kind, alt_inputs, alt_mask, pc.fmt.dtype, **alt_options)
            memo[label] = tuple(r.value for r in grads)
            if own:
                extras = kind.conditioning(kind, alt_inputs, alt_mask, grads, **alt_options)
                memo[label] = tuple(zip(memo[label], (e["scale"] for e in extras)))
        return memo[label][index]

    neighbours = _attention.stated_neighbours(pc)
    if options.get("softcap") is not None:  # (a backward's own neighbour: dS without sigma = sech(s / cap)**2)
        label = "the backward without the cap's derivative (dS not multiplied by sech(s / cap)**2)"
        mask, problem = getattr(pc, "problem", (pc.mask, options))
        neighbours.append((label, inputs, mask, problem | {"derivative": False}))
    return _attention.closest(pc, y, [(n[0], functools.partial(exact, *n)) for n in neighbours])


def neighbour_memo(pc) -> dict:
    """The neighbouring conventions' exact results computed so far for a prepared case (pc, or the case an output
    view looks through), by label: the outputs of one case share them."""
    case = getattr(pc, "pc", pc)
    return case.__dict__.setdefault("neighbour_results", {})
