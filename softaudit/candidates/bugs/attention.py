"""Bug models of attention, f(q, k, v, mask=None, **modifiers) -> o.

The standard algorithm (`standard`): scores s = q k^T / sqrt(d) with the modifiers (softaudit.candidates.attention's
`modified`: cap, bias, ALiBi, causal and window bottom-right aligned), masked keys excluded with where, the max over
kept scores (0 where none is), P = exp(s - m) / l with l its sum (and a sink's term), zeros for a query that attends
no key, then P V; or the same online over key blocks (FlashAttention's form). Each model flips one switch; the fix is
the same call without it.

(Longer than the house's 400 lines: every attention model, the backward's too, is a switch of the standard algorithms
here, which share the forward's P; the library of them grows in this module, as bugs/__init__.py says.)
"""

from __future__ import annotations

import functools

import numpy as np

from .. import attention_grad as grad_parts
from .._ops import const, dtype_sum, exp, exp2, matmul
from ..attention import _sink_weights, modified
from ..cross_entropy import tanh
from ._model import Model, Variant
from .rows import BLOCKS, FILLS, LOG2E, NARROWER, SHORT_LOG2E, WORK, each_work, working

_SCALES = {"rsqrt": lambda d: 1 / np.sqrt(d), "none": lambda d: 1.0, "sqrt": np.sqrt}


def standard(
    q,
    k,
    v,
    mask=None,
    *,
    work: str = "wide",
    scale: str = "rsqrt",
    shift: bool = True,
    fill=None,
    guard: bool = True,
    p_in_dtype: bool = False,
    block: int | None = None,
    rescale_o: bool = True,
    rescale_l: bool = True,
    log2e: float | None = None,
    after_softmax: bool = False,
    additive: bool = False,
    hide_nan: bool = False,
    sinks=None,
    **modifiers,
):
    """Attention with one switch per known mistake: scale "none" or "sqrt" (times sqrt(d)) for 1 / sqrt(d);
    shift=False drops the max; fill writes masked scores as a value instead of excluding them; guard=False leaves a
    max of -inf (nothing kept yet) and a zero sum unguarded; p_in_dtype rounds P to the 16-bit dtype before P V;
    block runs it online over key blocks, rescale_o / rescale_l=False forgetting to rescale o or l when the max
    grows; log2e computes exp as exp2 with that constant; after_softmax zeroes masked keys' weights after a softmax
    over every key; additive masks by adding a -inf bias to the scores (a masked key's NaN score stays NaN) and
    reads every key's value in P V (a masked key's NaN value reaches o through P's exact 0); hide_nan zeroes NaN
    outputs."""
    d = q.dtype
    w = working(d, work)
    qw, kw, vw = (a.astype(w) for a in (q, k, v))
    c = w.type(_SCALES[scale](w.type(q.shape[-1])))
    with np.errstate(all="ignore"):
        if block is None:
            dense = (shift, fill, guard, p_in_dtype, log2e, after_softmax, additive, sinks, modifiers)
            o = _dense(qw, kw, vw, mask, c, w, d, *dense)
        else:
            o = _online(qw, kw, vw, mask, c, w, d, block, guard, rescale_o, rescale_l, p_in_dtype, sinks, modifiers)
        o = o.astype(d)
        return np.where(np.isnan(o), np.zeros((), d), o) if hide_nan else o


def _dense(q, k, v, mask, c, w, d, shift, fill, guard, p_in_dtype, log2e, after_softmax, additive, sinks, modifiers):
    s, keep = modified(matmul(q, np.swapaxes(k, -1, -2), w) * c, mask, **modifiers)
    masked = None
    if additive and keep is not None:
        s, keep = s + np.where(keep, np.zeros((), w), -np.inf), None
    if after_softmax:
        keep, masked = None, keep
    if fill is not None and keep is not None:
        s, keep = np.where(keep, s, const(fill, d).astype(w)), None
    kept = s if keep is None else np.where(keep, s, -np.inf)
    m = kept.max(axis=-1, keepdims=True, initial=-np.inf) if shift else np.zeros(s.shape[:-1] + (1,), w)
    z = None if sinks is None else np.broadcast_to(np.asarray(sinks).astype(w)[..., None, None], m.shape)
    if z is not None and shift:
        m = np.maximum(m, z)
    if guard:
        m = np.where(np.isneginf(m), np.zeros((), w), m)
    e = exp2((kept - m) * w.type(log2e)) if log2e is not None else exp(kept - m)
    total = dtype_sum(e) + (0 if z is None else exp(z - m))
    p = np.where(total == 0, 0, e / np.where(total == 0, 1, total)).astype(w) if guard else e / total
    if masked is not None:
        p = np.where(masked, p, np.zeros((), w))
    if p_in_dtype:
        p = p.astype(d).astype(w)
    return matmul(p, v, w) if additive or keep is None else _selected(p, v, keep, w)


def _selected(p, v, keep, w):
    """P V reading only the keys each query keeps: a masked key's NaN or infinite value is not read (P's exact 0
    times NaN would be NaN), a kept one's reaches the query's output."""
    bad = ~np.isfinite(v).all(axis=-1)  # (..., Lk): the keys whose value is not finite
    if not bad.any():
        return matmul(p, v, w)
    o = matmul(p, np.where(bad[..., None], np.zeros((), w), v), w)
    hit = (np.broadcast_to(keep, p.shape) & bad[..., None, :]).any(axis=-1)
    return np.where(hit[..., None], w.type(np.nan), o)


def _online(q, k, v, mask, c, w, d, block, guard, rescale_o, rescale_l, p_in_dtype, sinks, modifiers):
    lq, lk = q.shape[-2], k.shape[-2]
    shape = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]) + (lq,)
    m, total = np.full(shape + (1,), -np.inf, w), np.zeros(shape + (1,), w)
    if sinks is not None:
        m = np.broadcast_to(np.asarray(sinks).astype(w)[..., None, None], m.shape).copy()
        total = np.ones(shape + (1,), w)
    acc = np.zeros(shape + (v.shape[-1],), w)
    keep = np.ones(shape[:-1] + (lq, lk), bool) if mask is None else np.broadcast_to(mask, shape[:-1] + (lq, lk))
    cap = modifiers.pop("softcap", None)
    extra, limits = modified(np.zeros(shape[:-1] + (lq, lk), w), None, **modifiers) if modifiers else (None, None)
    if limits is not None:
        keep = keep & limits
    for start in range(0, lk, block):
        s = matmul(q, np.swapaxes(k[..., start : start + block, :], -1, -2), w) * c
        if cap is not None:
            s = w.type(cap) * tanh(s / w.type(cap))
        if extra is not None:
            s = s + extra[..., start : start + block]
        s = np.where(keep[..., start : start + block], s, -np.inf)
        new = np.maximum(m, s.max(axis=-1, keepdims=True))
        safe = np.where(np.isfinite(new), new, 0) if guard else new
        p = exp(s - safe)
        correction = exp((np.where(np.isfinite(m), m, safe) if guard else m) - safe)
        total = (total * correction if rescale_l else total) + dtype_sum(p)
        pv = matmul(p.astype(d).astype(w) if p_in_dtype else p, v[..., start : start + block, :], w)
        acc = (acc * correction if rescale_o else acc) + pv
        m = new
    return np.where(total == 0, 0, acc / np.where(total == 0, 1, total)) if guard else acc / total


@functools.cache
def _made(items: tuple):
    switches = dict(items)

    def attend(q, k, v, mask=None, **modifiers):
        return standard(q, k, v, mask, **switches, **modifiers)

    return attend


def _model(name: str, mistake: str, fix: str, mistakes, events: bool = True) -> Model:
    def call(switches):  # (one function per switches: the variants that share a fix share it)
        return _made(tuple(sorted(switches.items())))

    variants = tuple(Variant(label, call(bad), call(good)) for label, bad, good in mistakes)
    return Model(name, "attention", mistake, fix, variants, events)


def _online_variants(bad: dict) -> list:
    return [
        (f"key blocks of {block}, {label}", {"work": work, "block": block} | bad, {"work": work, "block": block})
        for block in BLOCKS
        for label, work in WORK
    ]


MODELS: list = [
    _model(
        "unscaled_scores",
        "the scores q k^T are not multiplied by 1 / sqrt(d)",
        "scale the scores by 1 / sqrt(d)",
        each_work({"scale": "none"}),
    ),
    _model(
        "scaled_by_sqrt_d",
        "the scores are multiplied by sqrt(d) instead of divided by it",
        "scale the scores by 1 / sqrt(d), not sqrt(d)",
        each_work({"scale": "sqrt"}),
    ),
    _model(
        "no_max_shift",
        "exp(s) is taken without subtracting each query's largest score, so it overflows",
        "subtract each query's largest score before exp",
        each_work({"shift": False}),
    ),
    _model(
        "finite_fill",
        "masked scores are filled with a finite value instead of being excluded, so scores near or below it lose "
        "weight to masked keys and a query with no key averages v",
        "exclude masked keys with where on the scores, and give a query with no key zeros",
        [(f"fill {fill}", {"fill": fill}, {}) for fill in FILLS],
    ),
    _model(
        "neginf_fill",
        "masked scores are filled with -inf and nothing guards a query with no key: exp(-inf - -inf) / 0 is NaN",
        "give a query with no key zeros: a max of -inf taken as 0, and the division guarded for a zero sum",
        [("fill -inf", {"fill": -np.inf, "guard": False}, {})],
    ),
    _model(
        "online_no_rescale_o",
        "the online softmax does not rescale the output accumulator o by exp(m_old - m_new) when the max grows",
        "multiply o by exp(m_old - m_new) whenever the running max grows, as l is",
        _online_variants({"rescale_o": False}),
    ),
    _model(
        "online_no_rescale_l",
        "the online softmax does not rescale the running sum l by exp(m_old - m_new) when the max grows",
        "multiply l by exp(m_old - m_new) whenever the running max grows, as o is",
        _online_variants({"rescale_l": False}),
    ),
    _model(
        "unguarded_running_max",
        "the running max of a key block with nothing kept stays -inf, and exp(-inf - -inf) is NaN",
        "take the running max as 0 while it is -inf (m_safe = where(m == -inf, 0, m)) and guard the final division",
        _online_variants({"guard": False})
        + [
            (f"{label}, its NaN then zeroed", {**bad, "hide_nan": True}, good)
            for label, bad, good in _online_variants({"guard": False})
        ],
    ),
    _model(
        "in_dtype",
        "the scores and the softmax are rounded to the 16-bit dtype",
        "compute the scores, softmax and P V in float32 and round once",
        [("everything in the dtype", {"work": "dtype"}, {})],
    ),
    _model(
        "p_in_dtype",
        "the weights P are rounded to the 16-bit dtype before the P V product",
        "keep P in float32 for the P V product (or accept about one ulp per weight)",
        [("dense", {"p_in_dtype": True}, {})]
        + [(f"key blocks of {b}", {"block": b, "p_in_dtype": True}, {"block": b}) for b in BLOCKS],
    ),
    _model(
        "short_log2e",
        "exp is computed as exp2(t * log2(e)) with log2(e) rounded to a few digits",
        "use log2(e) to the dtype's full precision (1.4426950408889634)",
        [(f"log2(e) as {c}", {"log2e": c}, {"log2e": LOG2E}) for c in SHORT_LOG2E],
    ),
    _model(
        "downcast",
        "the computation runs in a narrower type than the audited dtype",
        "compute in the audited dtype (no cast to a narrower type, no TF32 or bfloat16 matmul passes)",
        [(f"in {narrow}", {"work": narrow}, {}) for narrow in sorted({n for ns in NARROWER.values() for n in ns})],
        events=False,
    ),
    _model(
        "mask_after_softmax",
        "the softmax is taken over every key and masked keys' weights zeroed afterwards, so the weights do not sum "
        "to 1",
        "mask the scores before the softmax (where, or -inf before the max and the sum)",
        [("masked after", {"after_softmax": True}, {})],
    ),
    _model(
        "additive_mask",
        "the mask is added to the scores as a -inf bias and every key's value is read in P V, so a masked key's NaN "
        "in k (NaN + -inf) or in v (P's exact 0 times NaN) reaches the output",
        "mask by selecting: where(mask, scores, -inf) drops a masked key's score, and keep masked keys' values out of "
        "P V (zero their rows of V, or select)",
        [("a -inf bias", {"additive": True}, {})],
    ),
    _model(
        "nan_hidden",
        "a NaN does not reach the output",
        "let a NaN input give NaN: no nan_to_num on the output",
        [("NaN outputs set to 0", {"hide_nan": True}, {})],
    ),
]


def grad_standard(
    q,
    k,
    v,
    g,
    mask=None,
    *,
    work: str = "wide",
    drop_delta: bool = False,
    dq_unscaled: bool = False,
    grad_scale: str = "rsqrt",
    drop_cap_derivative: bool = False,
    p_in_dtype: bool = False,
    causal=False,
    window=None,
    bias=None,
    alibi_slopes=None,
    softcap=None,
    sinks=None,
    sink_sign: int = -1,
    sink_in_d: bool = True,
):
    """attention_grad's standard algorithm (q, k, v, g = dO -> dq, dk, dv): P as the forward forms it (masked keys
    excluded, zeros for a query with no key), dV = P^T dO, dP = dO V^T, D = rowsum(dP * P), dS = P (dP - D) (times
    a softcap's derivative 1 - tanh**2), dQ = c dS K, dK = c dS^T Q, each summed over the axes its input was
    broadcast along; with one switch per known mistake: drop_delta forgets D; dq_unscaled forgets dQ's c;
    grad_scale "sqrt" multiplies dQ and dK by sqrt(d); drop_cap_derivative forgets the cap's derivative; p_in_dtype
    rounds P to the 16-bit dtype for dV. With `sinks` (attention_sinks_grad: one logit z per head, a key of value 0
    in the softmax) it gives dz = -sum_i P_iz D_i too, summed as the sinks were broadcast; sink_sign=+1 flips dz's
    sign; sink_in_d=False forms dz from D / (1 - P_iz), D of the keys' weights renormalised without the sink."""
    d = q.dtype
    w = working(d, work)
    qw, kw, vw, gw = (a.astype(w) for a in (q, k, v, g))
    with np.errstate(all="ignore"):
        c = w.type(1 / np.sqrt(w.type(q.shape[-1])))
        s = matmul(qw, np.swapaxes(kw, -1, -2), w) * c
        s, keep, sigma = grad_parts._modified(s, mask, causal, window, bias, alibi_slopes, softcap)
        e, e_z, _ = _sink_weights(s, grad_parts._keep(keep, s.shape), sinks, w)
        total = dtype_sum(e) + e_z
        p = np.where(total == 0, 0, e / np.where(total == 0, 1, total)).astype(w)
        p_z = np.where(total == 0, 0, e_z / np.where(total == 0, 1, total)).astype(w)
        dp = matmul(gw, np.swapaxes(vw, -1, -2), w)
        delta = 0 if drop_delta else dtype_sum(dp * p)
        ds = p * (dp - delta)
        if sigma is not None and not drop_cap_derivative:
            ds = ds * sigma
        cg = {"rsqrt": c, "sqrt": w.type(np.sqrt(w.type(q.shape[-1])))}[grad_scale]
        pv = p.astype(d).astype(w) if p_in_dtype else p
        grads = (
            matmul(ds, kw, w) * (w.type(1) if dq_unscaled else cg),
            matmul(np.swapaxes(ds, -1, -2), qw, w) * cg,
            matmul(np.swapaxes(pv, -1, -2), gw, w),
        )
        grads = tuple(grad_parts._unbroadcast(a, b.shape).astype(d) for a, b in zip(grads, (q, k, v)))
        if sinks is None:
            return grads
        d_z = delta if sink_in_d else delta / (w.type(1) - p_z)
        dz = w.type(sink_sign) * dtype_sum(np.swapaxes(p_z * d_z, -1, -2))[..., 0, 0]
        return (*grads, grad_parts._unbroadcast(dz, np.shape(sinks)).astype(d))


@functools.cache
def _made_grad(items: tuple):
    switches = dict(items)

    def backward(q, k, v, g, mask=None, **modifiers):
        return grad_standard(q, k, v, g, mask, **switches, **modifiers)

    return backward


@functools.cache
def _made_sinks_grad(items: tuple):
    switches = dict(items)

    def backward(q, k, v, g, sinks, mask=None, **modifiers):
        return grad_standard(q, k, v, g, mask, **switches, **modifiers, sinks=sinks)

    return backward


def _grad_model(name: str, mistake: str, fix: str, mistakes, kind: str = "attention_grad") -> Model:
    made = _made_sinks_grad if kind == "attention_sinks_grad" else _made_grad

    def call(switches):
        return made(tuple(sorted(switches.items())))

    variants = tuple(Variant(label, call(bad), call(good)) for label, bad, good in mistakes)
    return Model(name, kind, mistake, fix, variants)


MODELS += [
    _grad_model(
        "missing_delta",
        "dS = P dP: the term D = rowsum(dO * O) is not subtracted",
        "form dS = P (dP - D) with D = rowsum(dO * O) (or rowsum(dP * P))",
        each_work({"drop_delta": True}),
    ),
    _grad_model(
        "dq_missing_scale",
        "dQ = dS K is not multiplied by 1 / sqrt(d)",
        "multiply dQ by the scores' scale 1 / sqrt(d), as dK is",
        each_work({"dq_unscaled": True}),
    ),
    _grad_model(
        "grad_scaled_by_sqrt_d",
        "dQ and dK are multiplied by sqrt(d) instead of 1 / sqrt(d)",
        "multiply dQ and dK by 1 / sqrt(d)",
        each_work({"grad_scale": "sqrt"}),
    ),
    _grad_model(
        "softcap_derivative_dropped",
        "with a tanh softcap, dS is not multiplied by the cap's derivative 1 - tanh(s / cap)**2",
        "multiply dS by 1 - tanh(s / cap)**2, the cap's derivative, before dQ and dK",
        each_work({"drop_cap_derivative": True}),
    ),
    _grad_model(
        "p_in_dtype",
        "P is rounded to the 16-bit dtype before dV = P^T dO",
        "keep P in float32 for dV (or accept about one ulp per weight)",
        [("P rounded for dV", {"p_in_dtype": True}, {})],
    ),
    _grad_model(
        "in_dtype",
        "every step of the backward is rounded to the 16-bit dtype",
        "compute P, dP, D and dS in float32 and round each gradient once",
        [("everything in the dtype", {"work": "dtype"}, {})],
    ),
]

MODELS += [
    _grad_model(
        "sink_gradient_sign",
        "the sink's gradient has the wrong sign: dz = +sum_i P_iz D_i",
        "dz = -sum_i P_iz D_i (the sink's score enters every query's softmax; its value is 0)",
        each_work({"sink_sign": 1}),
        kind="attention_sinks_grad",
    ),
    _grad_model(
        "sink_left_out_of_d",
        "the sink's gradient takes D from the keys' weights renormalised without the sink, D / (1 - P_iz)",
        "dz = -sum_i P_iz D_i with D = rowsum(dO * O), the output's own weights, the sink's included",
        each_work({"sink_in_d": False}),
        kind="attention_sinks_grad",
    ),
]
