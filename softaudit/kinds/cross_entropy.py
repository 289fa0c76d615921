"""cross_entropy and its gradient: the loss of logits (N, V) for integer targets, where softmax bugs ship today.

Everything the loop needs of the two kinds is here: the calling convention, the exact reference
(softaudit.reference.cross_entropy, correctly rounded), the conditioning scale, the families (each from a reported
bug, named in its description) and the upstream gradient. The options are PyTorch's (ignore_index,
label_smoothing, reduction) plus z_loss (PaLM's zl lse**2 per row) and softcap (Gemma 2's c tanh(x / c) on the
finite logits); a case carries them in `Case.options` and the candidate gets them as keywords.
"""

from __future__ import annotations

import math

import numpy as np

from .._libm import exp, log
from ._kind import Kind

#: The options a candidate may be called with, and the defaults a case leaves out.
OPTIONS = {"ignore_index": -100, "label_smoothing": 0.0, "z_loss": 0.0, "softcap": None, "reduction": "none"}


def _options(options: dict) -> dict:
    return OPTIONS | dict(options)


def reference(kind, inputs: dict, mask, dtype, **options) -> tuple:
    # (imported here: marking a candidate loads the registry and must not load the reference)
    from ..reference import evaluate_cross_entropy, evaluate_cross_entropy_grad

    if kind.upstream is None:
        return (evaluate_cross_entropy(inputs["logits"], inputs["target"], dtype=dtype, **options),)
    g = inputs["g"]
    return (evaluate_cross_entropy_grad(inputs["logits"], inputs["target"], g, dtype=dtype, **options),)


def row_parts(logits, target, o: dict, size=None):
    """In float64: kept entries, p, 2 zl lse, a = (1 + 2 zl lse) p - q (at y without cancelling), the sensitivity
    factors sech(x / c)**2 (1 without a softcap), |x| as the conditioning reads it, the ignored rows, the targets
    and 1 - p_y (the others' share). size: what rounding the inputs moves each logit by, in units of u, where the
    logits are not the inputs themselves (linear_cross_entropy's |x| |W|^T + |b|); |x| otherwise."""
    x = np.asarray(logits, dtype=np.float64)
    n, v = x.shape
    t = np.asarray(target, np.int64)
    ignored = t == o["ignore_index"]
    y = np.where(ignored, 0, t)
    rows = np.arange(n)
    cap = o["softcap"]
    kept = np.isfinite(x)
    with np.errstate(all="ignore"):
        z = np.where(kept, x if cap is None else cap * np.tanh(x / cap), -np.inf)
        factor = np.ones_like(x) if cap is None else np.where(kept, 1 / np.cosh(x / cap) ** 2, 0.0)
        moved = np.abs(x) if size is None else size
        ax = np.where(kept, moved * factor + (0.0 if cap is None else np.abs(z)), 0.0)
        m = np.where(kept.any(axis=1), z.max(axis=1), 0.0)[:, None]
        e = np.where(kept, np.exp(z - m), 0.0)
        s = e.sum(axis=1, keepdims=True)
        p = e / np.where(s > 0, s, 1.0)
        lse = (m + np.log(np.where(s > 0, s, 1.0)))[:, 0]
        eps, zl = o["label_smoothing"], o["z_loss"]
        t2 = 2 * zl * lse
        a = (1 + t2)[:, None] * p - eps / v
        others = np.where(np.arange(v)[None, :] == y[:, None], 0.0, e).sum(axis=1) / s[:, 0]  # 1 - p_y
        a[rows, y] = -others + t2 * p[rows, y] + eps * (v - 1) / v
    return kept, p, t2, a, factor, ax, ignored, y, others


def conditioning(kind, inputs: dict, mask, references, size=None, **options) -> tuple[dict]:
    """The scale: |r| + what rounding the logits moves r by (sum_k |dr/dx_k| |x_k|), and for the loss the log of
    the sum's rounding (1 + 2 zl |lse|), as for log_softmax (softaudit/conditioning.py: sum_rounding)."""
    (ref,) = references
    o = _options(options)
    exact = ref.hi if not ref.lo.any() else ref.hi + ref.lo
    kept, p, t2, a, factor, ax, ignored, y, one_minus = row_parts(inputs["logits"], inputs["target"], o, size)
    x = np.asarray(inputs["logits"], dtype=np.float64)
    rows = np.arange(len(x))
    nan_rows = np.isnan(x).any(axis=1) & ~ignored
    with np.errstate(all="ignore"):
        spread_x = (p * ax).sum(axis=1)  # sum_k p_k |x_k|
        if kind.upstream is None:
            # dL/dx_k = a_k factor_k: the inputs' part; the sum's rounding: 1 + |2 zl lse|
            per_row = (np.abs(a) * ax).sum(axis=1) + 1 + np.abs(t2)
            per_row = np.where(ignored, 0.0, per_row)
            if o["reduction"] == "none":
                return ({"undefined": ref.undefined, "kept_nan_rows": nan_rows, "scale": np.abs(exact) + per_row},)
            div = max(int((~ignored).sum()), 1) if o["reduction"] == "mean" else 1
            scale = np.abs(exact) + per_row.sum() / div
            return ({"undefined": ref.undefined, "kept_nan_rows": np.array([nan_rows.any()]), "scale": scale},)
        g = np.asarray(inputs["g"], dtype=np.float64)
        div = max(int((~ignored).sum()), 1) if o["reduction"] == "mean" else 1
        w = np.abs(np.broadcast_to(g, (len(x),)) / div)[:, None]
        # d r_j / d x_k = w f_j ((1 + 2 zl lse) p_j (delta_jk - p_k) + 2 zl p_j p_k) f_k, plus r_j's own factor's
        spread = (1 - p) * ax + (spread_x[:, None] - p * ax)  # sum_k |delta_jk - p_k| |x_k|
        others = np.where(np.arange(x.shape[1])[None, :] == y[:, None], 0.0, p * ax).sum(axis=1)
        spread[rows, y] = one_minus * ax[rows, y] + others  # (1 - p_y without cancelling)
        zl2 = 2 * o["z_loss"]  # d (2 zl lse) / d x_k = 2 zl p_k
        logits = w * factor * (np.abs(1 + t2)[:, None] * p * spread + zl2 * p * spread_x[:, None])
        own = 0.0
        if o["softcap"] is not None:  # d sech(x/c)**2 / dx = -2 sech**2 tanh / c: |r| 2 |tanh| |x| / c
            moved = np.abs(x) if size is None else size
            own = np.abs(exact) * 2 * np.abs(np.tanh(x / o["softcap"])) * moved / o["softcap"]
        # Every standard algorithm forms p_j in its working precision (float32 for a 16-bit dtype: autograd's
        # exp(log p) - q; the dtype itself otherwise) before q_j is subtracted, and rounds q_j there too: those
        # roundings, u_work (|1 + 2 zl lse| p_j + |q_j|), are unavoidable for them, in units of the dtype's u (where
        # p_j - q_j cancels, at a confident target or under smoothing, they are all of the error). p_y rounded to a
        # 16-bit dtype itself (Liger-Kernel PR #1329) costs 2**16 times more than this holds, and fails.
        precision = _precision(inputs.get("dtype", inputs["logits"].dtype))
        work = 2.0 ** (precision - max(precision, 24))
        q = np.full(p.shape, o["label_smoothing"] / x.shape[1])
        q[rows, y] += 1 - o["label_smoothing"]
        rounding = w * factor * (np.abs(1 + t2)[:, None] * p + np.where(o["label_smoothing"] > 0, q, 0.0)) * work
        scale = np.where(kept & ~ignored[:, None], np.abs(exact) + logits + np.nan_to_num(own) + rounding, 0.0)
        scale = np.where(ignored[:, None], 0.0, scale)
    return ({"undefined": ref.undefined, "kept_nan_rows": nan_rows, "scale": scale},)


def _precision(dtype) -> int:
    """The significand bits of a float dtype (ml_dtypes' included)."""
    import ml_dtypes

    return int(ml_dtypes.finfo(dtype).nmant) + 1


def element_inputs(kind, pc, position: tuple) -> tuple[dict, None]:
    """The row behind one output element (for a mean or sum, the first row): its logits (also as x, which the
    row diagnosis reads), target and g."""
    row = position[0] if position else 0
    found = {"logits": pc.inputs["logits"][row : row + 1], "target": pc.inputs["target"][row : row + 1]}
    found["x"] = found["logits"][0]
    if "g" in pc.inputs:
        g = pc.inputs["g"]
        found["g"] = g[row : row + 1] if g.ndim else g
    return found, None


def upstream(kind, arrays: dict, mask, rng) -> np.ndarray:
    """A Gaussian g per row (reduction="none": the families give their own g for a mean or sum)."""
    return rng.standard_normal(len(arrays["logits"]))


# -------------------------------------------------------------------------------------------------- families


def _case(kind, logits, target, description, rng, **options):
    """One family entry: the arrays (with g for the gradient: Gaussian per row, 1 for a mean or sum), no mask."""
    arrays = {"logits": np.asarray(logits, np.float64), "target": np.asarray(target, np.int64)}
    if kind == "cross_entropy_grad":
        reduced = options.get("reduction", "none") != "none"
        arrays["g"] = np.array(1.0) if reduced else rng.standard_normal(len(arrays["logits"]))
    return arrays, None, description, {}, options


def _vocab(size) -> int:
    """The suite's vocabulary: not a multiple of a block (32 in quick, 32,003 in default, 50,257 in full)."""
    return {32: 1003, 128: 32003, 512: 50257}.get(size.n, 32003)


def _gaussian(kind, fmt, size, rng):
    v = _vocab(size)
    rows = max(size.rows // 4, 2)
    x = rng.standard_normal((rows, v)) * 2
    t = rng.integers(0, v, rows)
    return [
        _case(kind, x, t, f"{rows} rows of N(0, 4) logits, V={v}", rng),
        _case(kind, x, t, f"the same, reduction='mean' (V={v})", rng, reduction="mean"),
    ]


def _confident_rows(v, shares, rng):
    """Rows whose target has probability 1 - share (to float64's rounding) over N(0, 1/4) others: x_y = log((1 -
    share) / share * sum_{j != y} e**x_j), with the portable exp and log and an exact sum, so the inputs are the same
    bits on every CPU."""
    x = rng.standard_normal((len(shares), v)) * 0.5
    t = rng.integers(0, v, len(shares))
    for i, share in enumerate(shares):
        x[i, t[i]] = 0.0
        rest = math.fsum(exp(np.delete(x[i], t[i])))
        x[i, t[i]] = float(log(np.array((1 - share) / share * rest)))
    return x, t


def _confident(kind, fmt, size, rng):
    v = _vocab(size)
    shares = (1e-2, 1e-3, 1e-4)
    x, t = _confident_rows(v, shares, rng)
    text = "p_y = 0.99, 0.999, 0.9999 (Liger-Kernel PR #1329: bf16's true-class gradient 20% off at 0.99)"
    return [_case(kind, x, t, f"{text}, V={v}", rng)]


def _confident_deep(kind, fmt, size, rng):
    v = _vocab(size)
    x, t = _confident_rows(v, (1e-5, 1e-6, 1e-7), rng)
    return [_case(kind, x, t, f"p_y = 1 - 1e-5, 1 - 1e-6, 1 - 1e-7: the loss is 1 - p_y, V={v}", rng)]


def _offset(kind, fmt, size, rng):
    v = _vocab(size)
    x = rng.standard_normal((2, v)) * 2
    t = rng.integers(0, v, 2)
    out = []
    for shift in (1e4, 1e8):
        if shift > fmt.max_float:  # (inputs past the dtype are inf: undefined rows, nothing to judge)
            continue
        out.append(_case(kind, x + shift, t, f"N(0, 4) logits + {shift:g} (MLX PR #4188: no max shift)", rng))
    return out


def _vocabularies(kind, fmt, size, rng):
    sizes = (1003, 4099) if size.n <= 32 else (32000, 50257, 128256, 262144)
    out = []
    for v in sizes:
        x = rng.standard_normal((2, v)) * 3
        out.append(_case(kind, x, rng.integers(0, v, 2), f"V={v} (Llama 2, GPT-2, Llama 3, Gemma)", rng))
    return out


def _ignored(kind, fmt, size, rng):
    v = _vocab(size)
    x = rng.standard_normal((4, v)) * 2
    t = rng.integers(0, v, 4)
    some = np.where(np.arange(4) % 2 == 1, -100, t)
    every = np.full(4, -100)
    return [
        _case(kind, x, some, "rows 1 and 3 ignored (Liger #968: reduction='none' gave zero gradients)", rng),
        _case(kind, x, some, "rows 1 and 3 ignored, mean over the other 2", rng, reduction="mean"),
        _case(
            kind,
            x,
            some,
            "rows 1 and 3 ignored, label smoothing 0.1, mean (PyTorch #73205)",
            rng,
            reduction="mean",
            label_smoothing=0.1,
        ),
        _case(kind, x, every, "every row ignored: losses 0, gradients 0", rng),
        _case(kind, x, every, "every row ignored, reduction='sum': 0", rng, reduction="sum"),
    ]


def _smoothing(kind, fmt, size, rng):
    v = _vocab(size)
    x = rng.standard_normal((4, v)) * 2
    t = rng.integers(0, v, 4)
    return [
        _case(kind, x, t, "label smoothing 0.1", rng, label_smoothing=0.1),
        _case(kind, x, t, "label smoothing 0.1, mean", rng, label_smoothing=0.1, reduction="mean"),
    ]


def _z_loss(kind, fmt, size, rng):
    v = _vocab(size)
    x = rng.standard_normal((4, v)) * 2 + 3
    t = rng.integers(0, v, 4)
    return [
        _case(kind, x, t, "z_loss 1e-4 (PaLM)", rng, z_loss=1e-4),
        _case(kind, x, t, "z_loss 0 passed explicitly (OLMo-core PR #702: z-loss added when off)", rng, z_loss=0.0),
    ]


def _softcap_padded(kind, fmt, size, rng):
    v = 1003  # (every softcapped row's reference is mpmath's: a tanh has no fast tier, and its time grows with the row)
    padded = -(-v // 128) * 128 + 128  # the vocabulary padded past a multiple of 128, as kernels pad it
    x = np.full((4, padded), -np.inf)
    x[:, :v] = rng.standard_normal((4, v)) * 3
    t = rng.integers(0, v, 4)
    lanes = padded - v
    return [
        # (a cap near the logits' spread: c tanh(-inf / c) = -c is then close enough to them to take mass)
        _case(kind, x, t, f"softcap 5, {lanes} padded lanes at -inf (unsloth PR #10616)", rng, softcap=5.0),
        _case(kind, x[:, :v] * 8, t, "softcap 30 (Gemma 2) on N(0, 576) logits, no padding", rng, softcap=30.0),
    ]


def _scaled_g(kind, fmt, size, rng):
    """A mean and a sum with g other than 1: what gradient accumulation (2**-k), a float16 loss scale (65,536) and
    any other scaling (0.3: not a power of two) pass back. Liger-Kernel skips its g-scaling kernel exactly when g
    == 1, the only g the other families pass for a reduced loss."""
    v = _vocab(size)
    x = rng.standard_normal((4, v)) * 2
    t = rng.integers(0, v, 4)
    out = []
    for g, why in ((2.0**-3, "8 accumulation steps"), (65536.0, "a loss scale of 65,536"), (0.3, "not a power of 2")):
        if g > fmt.max_float:  # (65,536 is inf in float16: the scaler's own overflow, not the kernel's)
            continue
        for reduction in ("mean", "sum"):
            arrays, mask, text, params, options = _case(
                kind, x, t, f"g = {g:g} ({why}), {reduction}", rng, reduction=reduction
            )
            arrays["g"] = np.array(g)
            out.append((arrays, mask, text, params, options))
    return out


_MAKERS = {
    "ce_gaussian": ("Gaussian logits over a vocabulary that is not a multiple of a block size", _gaussian),
    "ce_confident": ("confident rows: the target's probability 0.99 to 0.9999", _confident),
    "ce_confident_deep": ("very confident rows: the target's probability 1 - 1e-5 to 1 - 1e-7", _confident_deep),
    "ce_offset": ("a large common offset (1e4, 1e8) on every logit", _offset),
    "ce_vocabularies": ("real vocabulary sizes, 32,000 to 262,144", _vocabularies),
    "ce_ignored": ("ignore_index: some rows, every row, with mean and with label smoothing", _ignored),
    "ce_smoothing": ("label smoothing 0.1, per row and mean", _smoothing),
    "ce_z_loss": ("z-loss on and explicitly off", _z_loss),
    "ce_softcap": ("a tanh softcap with and without padded vocabulary lanes", _softcap_padded),
}

CROSS_ENTROPY = Kind(
    "cross_entropy",
    "f(logits, target) -> loss, with the case's keywords of ignore_index=-100, label_smoothing=0.0, z_loss=0.0, "
    "softcap=None, reduction='none'",
    arguments=("logits", "target"),
    keywords=(),
    outputs=("loss",),
    plain="cross_entropy.log_softmax_gather",
    # lse_minus_target: the loss as lse - x_y with lse rounded, what a kernel keeping lse for its backward computes
    standard=("cross_entropy.log_softmax_gather", "cross_entropy.lse_minus_target"),
    best="cross_entropy.f32acc",
    best_practice="(max - x_y) + log1p(sum of the others) in {wide}, round once (cross_entropy.f32acc)",
    families=tuple(_MAKERS),
    reference=reference,
    conditioning=conditioning,
    element_inputs=element_inputs,
    reduction=("logits", -1),
    row_wise=True,
    reduces=True,
    logarithmic=True,
    causes=("absorbed",),
    integers=("target",),
    makers=_MAKERS,
)

#: The gradient's own families: an upstream g that only a gradient has.
_GRAD_MAKERS = {"ce_scaled_g": ("reduced losses with g other than 1: 2**-3, 65,536, 0.3", _scaled_g)}

CROSS_ENTROPY_GRAD = Kind(
    "cross_entropy_grad",
    "f(logits, target, g) -> dlogits, with cross_entropy's keywords",
    arguments=("logits", "target", "g"),
    keywords=(),
    outputs=("dlogits",),
    plain="cross_entropy_grad.saved_logp",
    standard=("cross_entropy_grad.saved_logp",),
    best="cross_entropy_grad.f32acc",
    best_practice="p - q in {wide} with 1 - p_y as the sum of the others, round once (cross_entropy_grad.f32acc)",
    families=(*_MAKERS, *_GRAD_MAKERS),
    reference=reference,
    conditioning=conditioning,
    element_inputs=element_inputs,
    upstream=upstream,
    reduction=("logits", -1),
    row_wise=True,
    reduces=False,
    logarithmic=False,
    causes=("subnormal",),
    scale_terms="the terms of p - q",
    integers=("target",),
    makers=_GRAD_MAKERS,
)
