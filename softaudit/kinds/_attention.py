"""Attention's parts of the loop: q (..., Lq, d), k (..., Lk, d), v (..., Lk, dv), a mask (..., Lq, Lk) or None.

kinds/attention.py imports these (attention_lse.py and the attention gradient kinds some of them); each imports the
reference where it uses it, since marking a candidate loads the registry and must not load the reference
(softaudit/adapters).

(Longer than the house's 400 lines: attention's parts of the loop, the case makers of its modifiers and the
neighbouring conventions it compares an output with share `spec` and the modifiers' tables; the makers, a third of
it, would be the part to move out should it grow.)
"""

from __future__ import annotations

import functools

import numpy as np

from .. import conditioning as _conditioning

#: The score modifiers a case may set (`Case.options`, the candidate's keywords), beside the arrays bias,
#: alibi_slopes and sinks (passed as keywords too): softcap c (s -> c tanh(s / c), before the bias and the mask),
#: causal (True: key j <= i + Lk - Lq, FlashAttention's bottom-right alignment) and window (left, right): keys
#: i + Lk - Lq - left <= j <= i + Lk - Lq + right, -1 for a side without bound (FlashAttention's window_size).
MODIFIERS = ("softcap", "causal", "window")
#: The arrays beside q, k and v (Kind.extras): each with its axes per batch item.
EXTRAS = {"bias": 2, "alibi_slopes": 0, "sinks": 0, "k8": 2, "v8": 2, "descale_k": 0, "descale_v": 0}
#: An FP8 KV cache a case may pass beside k and v (its exact dequantized values), kept in its own formats
#: (`Kind.kept`) and given only to a candidate that takes it (`Kind.optional`).
FP8_CACHE = ("k8", "v8", "descale_k", "descale_v")
#: The conventions an attention candidate may declare (Kind.declarable), the default first: where causal and the
#: window are aligned when Lq != Lk. Bottom-right (key j against query i + Lk - Lq) is FlashAttention's; top-left (key
#: j against query i) is what jax.nn.dot_product_attention's is_causal and local_window_size, PyTorch SDPA's
#: is_causal and ONNX's Attention document. They agree where Lq == Lk.
DECLARABLE = {
    "causal": ("causal alignment", ("bottom_right", "top_left")),
    "window": ("window alignment", ("bottom_right", "top_left")),
}


def spec(inputs: dict, mask, options: dict) -> dict:
    """The exact problem's keywords for softaudit.reference.attention: the mask with the window and causal ones,
    the bias with ALiBi's (-slope |i + Lk - Lq - j| per head, exact: slopes of at most 32 bits), softcap, sinks."""
    q, k = inputs["q"], inputs["k"]
    lq, lk = q.shape[-2], k.shape[-2]
    i, j = np.arange(lq)[:, None], np.arange(lk)[None, :]
    offset = j - (i + lk - lq)  # key position relative to the query's own, bottom-right aligned
    keep = None if mask is None else np.asarray(mask, bool)
    limits = []
    if options.get("causal"):
        limits.append(offset <= 0)
    if options.get("window") is not None:
        left, right = options["window"]
        limits.append(((offset >= -left) | (left < 0)) & ((offset <= right) | (right < 0)))
    for limit in limits:
        keep = limit if keep is None else keep & limit
    bias = inputs.get("bias")
    bias = None if bias is None else np.asarray(bias, np.float64)
    if inputs.get("alibi_slopes") is not None:
        slopes = np.asarray(inputs["alibi_slopes"], np.float64)[:, None, None]  # per head, the axis before Lq
        significand = np.frexp(slopes)[0] * 2.0**32
        if not np.array_equal(significand, np.round(significand)) or lk > 2**20:
            raise ValueError("ALiBi's bias must be exact in float64: slopes of at most 32 bits, at most 2**20 keys")
        alibi = -slopes * np.abs(offset)
        bias = alibi if bias is None else bias + alibi
    sinks = inputs.get("sinks")
    return {
        "mask": keep,
        "bias": bias,
        "softcap": options.get("softcap"),
        "sinks": None if sinks is None else np.asarray(sinks, np.float64),
    }


def declared(inputs: dict, mask, options: dict, conventions: dict) -> tuple:
    """(mask, options): a case's exact problem with top-left causal and window limits (key j against query i itself,
    `DECLARABLE`), each joined to the mask and taken out of the options, where the bottom-right ones stay with
    `spec`: exact, a mask of the same keys the declared convention keeps."""
    lq, lk = inputs["q"].shape[-2], inputs["k"].shape[-2]
    offset = np.arange(lk)[None, :] - np.arange(lq)[:, None]  # key position relative to query i itself
    keep = None if mask is None else np.asarray(mask, bool)
    options = dict(options)
    limits = []
    if conventions.get("causal") == "top_left" and options.get("causal"):
        limits.append(offset <= 0)
        del options["causal"]
    if conventions.get("window") == "top_left" and options.get("window") is not None:
        left, right = options.pop("window")
        limits.append(((offset >= -left) | (left < 0)) & ((offset <= right) | (right < 0)))
    for limit in limits:
        keep = limit if keep is None else keep & limit
    return keep, options


def _modified(inputs: dict, options: dict) -> bool:
    return any(options.get(m) is not None and options.get(m) is not False for m in MODIFIERS) or any(
        n in inputs for n in ("bias", "alibi_slopes", "sinks")
    )


def reference(kind, inputs: dict, mask, dtype, **options) -> tuple:
    from ..reference import evaluate_attention

    if not _modified(inputs, options):
        return (evaluate_attention(inputs["q"], inputs["k"], inputs["v"], mask, dtype=dtype),)
    return (evaluate_attention(inputs["q"], inputs["k"], inputs["v"], dtype=dtype, **spec(inputs, mask, options)),)


def conditioning(kind, inputs: dict, mask, references, **options) -> tuple[dict]:
    """What the measures need beyond the reference: undefined queries, queries with nothing kept, sum p|v|, the
    scale."""
    (ref,) = references
    exact = ref.hi if not ref.lo.any() else ref.hi + ref.lo
    q, k, v = (inputs[n] for n in ("q", "k", "v"))
    scores_shape = np.broadcast_shapes(q.shape[:-1] + (k.shape[-2],), k.shape[:-2] + (1, 1))
    if _modified(inputs, options):
        found = spec(inputs, mask, options)
        keep = np.broadcast_to(True if found["mask"] is None else found["mask"], scores_shape)
        if found["bias"] is not None:
            keep = keep & (np.broadcast_to(found["bias"], scores_shape) != -np.inf)
        scale, vsum = _modified_scale(q, k, v, keep, exact, found)
        nothing_kept = ~keep.any(axis=-1) if found["sinks"] is None else None
        return ({"undefined": ref.undefined, "nothing_kept": nothing_kept, "vsum": vsum, "scale": scale},)
    keep = np.broadcast_to(True if mask is None else mask, scores_shape)
    scale, vsum = _conditioning.attention(q, k, v, keep, exact, 1 / np.sqrt(q.shape[-1]))
    nothing_kept = ~keep.any(axis=-1) if mask is not None else None
    return ({"undefined": ref.undefined, "nothing_kept": nothing_kept, "vsum": vsum, "scale": scale},)


def modified_weights(q, k, keep, found: dict) -> tuple:
    """In float64, with the modifiers (`spec`'s): the weights p over the kept keys (a sink's share apart), each
    score's first-order sensitivity to rounding, 2 a_j f_j + |b_j| + |s'_j| [cap] (a_j = c sum_t |q_t k_jt|,
    f_j = sech(s_j / cap)**2, 1 without a cap, s'_j the capped score), the sink's share and its logit (None, None
    without a sink). A score that is not finite (a NaN or infinity in q or k, never one a defined query attends) is
    left out."""
    with np.errstate(all="ignore"):
        q, k = (np.asarray(a, dtype=np.float64) for a in (q, k))
        c = 1 / np.sqrt(q.shape[-1])
        kt = np.swapaxes(k, -1, -2)
        s = (q @ kt) * c
        a = (np.abs(q) @ np.abs(kt)) * c
        cap = found["softcap"]
        f = np.ones_like(s) if cap is None else 1 / np.cosh(s / cap) ** 2
        s = s if cap is None else cap * np.tanh(s / cap)
        keep = np.broadcast_to(keep, s.shape) & np.isfinite(s)
        b = np.zeros_like(s) if found["bias"] is None else np.where(keep, np.broadcast_to(found["bias"], s.shape), 0.0)
        total = np.where(keep, s + b, -np.inf)
        z = found["sinks"]
        m = total.max(axis=-1, keepdims=True, initial=-np.inf)
        zb = None
        if z is not None:
            zb = np.broadcast_to(z.reshape(z.shape + (1, 1)) if z.ndim else z, m.shape)
            m = np.maximum(m, zb)
        m = np.where(np.isfinite(m), m, 0.0)
        e = np.where(keep, np.exp(total - m), 0.0)
        sink = 0.0 if z is None else np.exp(zb - m)
        denominator = e.sum(axis=-1, keepdims=True) + sink
        denominator = np.where(denominator > 0, denominator, 1.0)
        weight = np.where(keep, 2 * a * f + np.abs(b) + (0.0 if cap is None else np.abs(s)), 0.0)
        return e / denominator, weight, (None if z is None else sink / denominator), zb


def _modified_scale(q, k, v, keep, o, found: dict) -> tuple[np.ndarray, np.ndarray]:
    """The scale with modifiers: |o| + sum_j p_j |v_j| + sum_j p_j |v_j - o| w_j + p_sink |o| |z|, with p and the
    scores' sensitivities w_j of `modified_weights`: the first-order change of o when q, k, v, the bias and the sink
    are rounded (and the cap's tanh)."""
    p, weight, p_sink, zb = modified_weights(q, k, keep, found)
    with np.errstate(all="ignore"):
        v, o = (np.asarray(a, dtype=np.float64) for a in (v, o))
        v = _conditioning._finite(v)
        vsum = p @ np.abs(v)
        spread = np.einsum("...ij,...ijc->...ic", p * weight, np.abs(v[..., None, :, :] - o[..., :, None, :]))
        scale = np.abs(o) + vsum + spread
        if p_sink is not None:
            scale = scale + p_sink * np.abs(o) * np.abs(zb)
    return np.nan_to_num(scale), vsum


def element_inputs(kind, pc, position: tuple) -> tuple[dict, np.ndarray | None]:
    """The query behind one output element, with the keys and values of its batch entry (and its mask row)."""
    shape = pc.output_shape
    lead, query = position[:-2], position[-2]
    batch = shape[:-2]
    q, k, v = (np.broadcast_to(pc.inputs[n], batch + pc.inputs[n].shape[-2:])[lead] for n in ("q", "k", "v"))
    mask = None
    if pc.mask is not None:
        mask = np.broadcast_to(pc.mask, batch + (shape[-2], k.shape[-2]))[lead][query]
    return {"q": q[query][None, :], "k": k, "v": v}, mask


# -------------------------------------------------------------------------------------- the modifiers' families


def _qkv(rng, heads, lq, lk, d=64, spread=1.0):
    shape = (1, heads)
    return {
        "q": rng.standard_normal(shape + (lq, d)) * spread,
        "k": rng.standard_normal(shape + (lk, d)),
        "v": rng.standard_normal(shape + (lk, d)),
    }


def _softcap(kind, fmt, size, rng):
    # The backward's over 128 keys (see _alibi): its float64 reference is tier C's direct evaluation throughout
    # (no double-double tanh), whose time grows with the keys.
    keys = 128 if _backward(kind) else 256
    arrays = _qkv(rng, 2, size.lq, keys, spread=4.0)  # scores of N(0, 16): a cap of 20 bends the largest
    keep = rng.random((size.lq, keys)) < 0.7
    return [
        (arrays, None, "scores of N(0, 16) capped at 20 (Gemma 2's tanh softcap)", {}, {"softcap": 20.0}),
        (
            arrays,
            keep,
            "capped at 5 with 30% of the keys masked: the cap comes before the mask (FlashAttention PR #1025: a cap "
            "after it makes a masked -inf into -5, which takes weight)",
            {},
            {"softcap": 5.0},
        ),
    ]


def _backward(kind: str) -> bool:
    """Whether the family is made for a gradient kind (attention_grad, attention_sinks_grad): read from its name, a
    forward's followed by _grad (tests/test_kinds.py checks that the names say which kinds take an upstream g), as
    the registry imports this module and not the other way round."""
    return kind.endswith("_grad")


def _alibi(kind, fmt, size, rng):
    # The backward's outputs dk and dv are as long as the keys, each compared element by element (the forward's
    # are as long as the queries): 256 keys there, where a bias of up to -127 (slope 1/2) still takes the far keys'
    # weights and gradients below float32's normal range (e**-87) and a float16 slope's error of 2**-12 still moves
    # their weights by 2% (the bug this family holds).
    keys = 256 if _backward(kind) else 512
    out = []
    for heads in (8, 12):
        arrays = _qkv(rng, heads, size.lq, keys)
        # 2**(-8 h / H): powers of two for 8 heads, else rounded to float32 (ALiBi's exact bias needs <= 32 bits)
        arrays["alibi_slopes"] = (2.0 ** (-8.0 * np.arange(1, heads + 1) / heads)).astype(np.float32).astype(np.float64)
        text = f"ALiBi over {keys} keys, {heads} heads' slopes, causal (FlashAttention #845: slopes cast to float16)"
        out.append((arrays, None, text, {}, {"causal": True}))
    return out


def _window(kind, fmt, size, rng):
    keys = 512 if _backward(kind) else 1024  # (the backward's: 240 keys still fall left of the window; see _alibi)
    arrays = _qkv(rng, 2, size.lq, keys)
    return [
        (
            arrays,
            None,
            f"a sliding window of 256 keys to the left, causal, {keys:,} keys (transformers #39408, onnxruntime PR "
            "#25927: off by one)",
            {},
            {"window": (256, 0)},
        ),
        (arrays, None, "a window of 100 keys on each side", {}, {"window": (100, 100)}),
        # The narrowest window, each query's own key alone (its output is that key's value): a bound off by one key,
        # or a side taken as unbounded (-1 is one step from 0), moves every output in every dtype.
        (
            _qkv(rng, 2, size.lq, 64),
            None,
            "a window of 0 keys on each side: the query's own key",
            {},
            {"window": (0, 0)},
        ),
    ]


def _causal(kind, fmt, size, rng):
    out = []
    for lq, lk in ((size.lq, 300), (size.lq, size.lq)):
        arrays = _qkv(rng, 2, lq, lk)
        text = f"causal with {lq} queries over {lk} keys, bottom-right aligned (FlashAttention #951: top-left)"
        out.append((arrays, None, text, {}, {"causal": True}))
    return out


def _sinks(kind, fmt, size, rng):
    arrays = _qkv(rng, 4, size.lq, 256)
    keep = rng.random((size.lq, 256)) < 0.5
    keep[0] = False  # a query with no key still attends the sink: its output is 0
    # The learned sinks over 100 keys: a partial last tile of every tile size (a tiled kernel that adds the sink in
    # its last tile's epilogue may have it in the branch for a whole tile only; softmax1's 256 keys are whole), and
    # few enough keys that the sink's share of the weight shows in float16 too.
    learned = dict(q=arrays["q"], k=arrays["k"][..., :100, :], v=arrays["v"][..., :100, :])
    learned["sinks"] = rng.standard_normal(4) * 2
    keep = keep[:, :100]
    one = dict(arrays, sinks=np.zeros(4))
    return [
        (
            learned,
            keep,
            "a learnable sink logit per head over 100 keys, a partial last tile (FlashAttention PR #1819, "
            "TransformerEngine PR #2225)",
            {},
            {},
        ),
        (one, None, "softmax1: a sink of logit 0, 'off by one' (the denominator 1 + sum e**s)", {}, {}),
    ]


def _bias(kind, fmt, size, rng):
    arrays = _qkv(rng, 2, size.lq, 256)
    bias = rng.standard_normal((2, size.lq, 256)) * 2
    bias[:, :, 200:] = -np.inf  # an additive mask: the last 56 keys are padding
    return [(dict(arrays, bias=bias), None, "an additive bias of N(0, 4), -inf on 56 padded keys", {}, {})]


def _fp8_kv_cache(kind, fmt, size, rng):
    """An FP8 KV cache (vLLM's, SGLang's): k8 and v8 in e4m3 with a power-of-two descale per tensor and per (batch,
    head), so k = k8 descale_k and v = v8 descale_v are exact in every audited dtype; the case passes both, and a
    candidate that reads the cache gets k8, v8, descale_k and descale_v (`Kind.optional`)."""
    from ..reference import fp8 as _fp8

    out = []
    for granularity, lq in (("tensor", 1), ("head", 1), ("head", size.lq)):
        q = rng.standard_normal((2, 4, lq, 64)) * 2
        raw_k = rng.standard_normal((2, 4, 256, 64)) * np.array([0.5, 1, 4, 30])[None, :, None, None]
        raw_v = rng.standard_normal((2, 4, 256, 64)) * np.array([30, 4, 1, 0.5])[None, :, None, None]
        k8, dk = _fp8.quantize(raw_k, "float8_e4m3fn", granularity, power_of_two=True)
        v8, dv = _fp8.quantize(raw_v, "float8_e4m3fn", granularity, power_of_two=True)
        arrays = {
            "q": q,
            "k": _fp8.dequantize(k8, dk),
            "v": _fp8.dequantize(v8, dv),
            "k8": k8,
            "v8": v8,
            "descale_k": dk,
            "descale_v": dv,
        }
        queries = "one query (decoding)" if lq == 1 else f"{lq} queries"
        out.append((arrays, None, f"an e4m3 KV cache, power-of-two descales per {granularity}, {queries}"))
    return out


#: attention's own families beyond the modifiers' (the gradient kinds do not run them).
OWN = {"attn_fp8_kv_cache": ("an FP8 KV cache: k8 and v8 in e4m3 beside k and v, their exact values", _fp8_kv_cache)}

MAKERS = {
    "attn_softcap": ("a tanh softcap, with and without a mask", _softcap),
    "attn_alibi": ("ALiBi slopes for 8 and 12 heads", _alibi),
    "attn_window": ("sliding windows", _window),
    "attn_causal": ("causal masks when queries and keys differ in number", _causal),
    "attn_sinks": ("learnable sinks and softmax1", _sinks),
    "attn_bias": ("an additive bias with -inf padding", _bias),
}


# ------------------------------------------------------------------------------ which convention an output matches

#: An output matches a convention when it is within this many times the conditioning (the case's scale, in units of
#: u) of that convention's exact result, where sound attention reads at most 6 (docs/policy.md), and the stated
#: convention's distance is at least MATCH_GAIN times larger.
MATCH_COND = 6.0
MATCH_GAIN = 16.0


def _neighbours(inputs: dict, mask, options: dict, lq: int, lk: int):
    """(label, inputs, mask, options) of the conventions next to the stated one."""
    found = []
    if options.get("window") is not None:
        left, right = options["window"]
        for name, (a, b) in (("left", (left - 1, right)), ("left", (left + 1, right))):
            if a >= 0:
                found.append(
                    (f"window ({a}, {b}), {name} side off by {a - left:+d}", inputs, mask, options | {"window": (a, b)})
                )
        if right >= 0:
            for b in (right - 1, right + 1):
                if b >= 0:
                    found.append((f"window ({left}, {b})", inputs, mask, options | {"window": (left, b)}))
        if lq != lk:  # the window aligned top-left: key j against query i itself
            offset = np.arange(lk)[None, :] - np.arange(lq)[:, None]
            inside = ((offset >= -left) | (left < 0)) & ((offset <= right) | (right < 0))
            both = inside if mask is None else np.asarray(mask, bool) & inside
            rest = {k: v for k, v in options.items() if k != "window"}
            label = f"window ({left}, {right}) aligned top-left, not bottom-right{_declares('window')}"
            found.append((label, inputs, both, rest))
    if options.get("causal"):
        top_left = np.arange(lk)[None, :] <= np.arange(lq)[:, None]
        both = top_left if mask is None else np.asarray(mask, bool) & top_left
        found.append(
            (f"top-left causal, not bottom-right{_declares('causal')}", inputs, both, options | {"causal": False})
        )
    if options.get("softcap") is not None:
        found.append(
            ("no softcap (the cap dropped)", inputs, mask, {k: v for k, v in options.items() if k != "softcap"})
        )
        found += _cap_after_mask(inputs, mask, options)
    if inputs.get("sinks") is not None:
        found.append(("no sink (the sink dropped)", {n: a for n, a in inputs.items() if n != "sinks"}, mask, options))
    if inputs.get("alibi_slopes") is not None:
        import ml_dtypes

        for dtype in (np.float16, ml_dtypes.bfloat16):
            slopes = np.asarray(inputs["alibi_slopes"]).astype(dtype).astype(np.float64)
            if not np.array_equal(slopes, np.asarray(inputs["alibi_slopes"], np.float64)):
                found.append(
                    (
                        f"ALiBi slopes rounded to {np.dtype(dtype).name}",
                        inputs | {"alibi_slopes": slopes},
                        mask,
                        options,
                    )
                )
    return found


def _declares(name: str) -> str:
    """How a candidate documented as aligned top-left says so (docs/policy.md, "Declared conventions")."""
    return f" (a candidate documented so declares conventions={{{name!r}: 'top_left'}})"


def stated_neighbours(pc) -> list:
    """(label, inputs, mask, options) of the conventions next to a prepared case's stated one, each in the defaults'
    terms (`spec`'s). Where the candidate declared conventions that depart from the defaults (`Prepared.problem`),
    the defaults themselves come first, then the neighbours of the declared problem."""
    inputs, options = pc.inputs, dict(pc.case.options)
    lq, lk = inputs["q"].shape[-2], inputs["k"].shape[-2]
    departing = dict(getattr(pc, "conventions", ()))
    if not departing:
        return _neighbours(inputs, pc.mask, options, lq, lk)
    mask, problem = pc.problem
    ours = " and ".join(f"{value.replace('_', '-')} {DECLARABLE[name][0]}" for name, value in departing.items())
    default = " and ".join(f"{DECLARABLE[name][1][0].replace('_', '-')} {DECLARABLE[name][0]}" for name in departing)
    label = f"the default {default}, not its declared {ours}"
    return [(label, inputs, pc.mask, options), *_neighbours(inputs, mask, problem, lq, lk)]


def _cap_after_mask(inputs: dict, mask, options: dict) -> list:
    """The cap after the mask (FlashAttention PR #1025): each masked score's -inf fill capped to -c, so every masked
    key takes weight e**-c. As a neighbour, [] where nothing is masked, else one: no mask, and a bias that brings each
    masked key's capped score to -c, computed in float64 (-c - c tanh(s / c), within float64's rounding of c: what
    the match reads is the dtype's error, far above it). ALiBi's and the case's own bias stay on the kept keys."""
    found = spec(inputs, mask, options)
    if found["mask"] is None or found["mask"].all():
        return []
    c = options["softcap"]
    with np.errstate(all="ignore"):
        q, k = (np.asarray(inputs[n], np.float64) for n in ("q", "k"))
        s = (q @ np.swapaxes(k, -1, -2)) / np.sqrt(q.shape[-1])
        shape = np.broadcast_shapes(s.shape, found["mask"].shape, np.shape(found["bias"]))  # (None's shape: ())
        bias = np.zeros(shape) if found["bias"] is None else np.broadcast_to(found["bias"], shape)
        bias = np.where(np.broadcast_to(found["mask"], shape), bias, -c - c * np.tanh(np.broadcast_to(s, shape) / c))
    rest = {n: a for n, a in inputs.items() if n != "alibi_slopes"}
    unmasked = {n: v for n, v in options.items() if n not in ("causal", "window")}
    return [
        ("the cap after the mask: masked keys score -softcap and take weight", rest | {"bias": bias}, None, unmasked)
    ]


def conventions(kind, pc, y) -> str:
    """Where an output is far from the exact result of its stated convention: which neighbouring convention's exact
    result it matches ("matches top-left causal, not bottom-right"), or "" (none does, or no modifier is set)."""
    from ..reference import evaluate_attention

    if not _modified(pc.inputs, dict(pc.case.options)):
        return ""
    own = bool(getattr(pc, "conventions", ()))  # (declared: each neighbour read in its own conditioning, `closest`)

    def exact(alt_inputs, alt_mask, alt_options):
        found = spec(alt_inputs, alt_mask, alt_options)
        ref = evaluate_attention(alt_inputs["q"], alt_inputs["k"], alt_inputs["v"], dtype=pc.fmt.dtype, **found)
        if not own:
            return ref.value
        return ref.value, conditioning(kind, alt_inputs, alt_mask, (ref,), **alt_options)[0]["scale"]

    neighbours = stated_neighbours(pc)
    return closest(pc, y, [(label, functools.partial(exact, *rest)) for label, *rest in neighbours])


def closest(pc, y, neighbours: list) -> str:
    """The sentence for the neighbouring convention whose exact output y matches, of (label, exact) pairs (exact()
    computes that convention's exact output, y's shape, or that and its conditioning scale, in which its distance is
    then read: a declared convention's neighbours may attend far more keys than it), or "" where none is within
    MATCH_COND x the conditioning or the stated convention's own exact result is not MATCH_GAIN times farther."""
    y = np.asarray(y, dtype=np.float64)
    with np.errstate(over="ignore"):  # (a scale below 2**-1000 has no 1 / (u scale) in float64: inf, not compared)
        per_u = pc.basis.inv_scale * 2.0**pc.fmt.precision  # 1 / (u scale), 0 where not compared

    def distance(r):
        r, scale = r if isinstance(r, tuple) else (r, None)
        r = np.asarray(r, dtype=np.float64)
        per = per_u
        if scale is not None:
            with np.errstate(all="ignore"):
                per = np.where(per_u > 0, 1 / (np.asarray(scale, dtype=np.float64) * 2.0**-pc.fmt.precision), 0.0)
        both = np.isfinite(r) & np.isfinite(y) & (per > 0) & np.isfinite(per)
        if not both.any():
            return np.inf
        return float((np.abs(y[both] - r[both]) * per[both]).max())

    stated = distance(pc.reference.value)
    best = None
    for label, exact in neighbours:
        with np.errstate(all="ignore"):
            d = distance(exact())
        if best is None or d < best[0]:
            best = (d, label)
    if best is None or best[0] > MATCH_COND or stated < MATCH_GAIN * max(best[0], 0.5):
        return ""
    return (
        f"matches {best[1]}: within {best[0]:.3g}x the conditioning of that convention's exact result, "
        f"{stated:.3g}x from the stated one's"
    )
