"""linear_cross_entropy and its gradient: the cross-entropy of logits x W^T + b that a fused kernel never writes out
(Liger-Kernel's fused_linear_cross_entropy, Cut Cross-Entropy's linear_cross_entropy).

f(x, weight, target, *, bias=None, cross_entropy's options) -> loss for hidden states x (N, H), a weight (V, H) and
integer targets (N,); the gradient kind returns (dx, dweight, dbias) for an upstream g (dbias: the gradient with
respect to the bias, at a zero bias where the case has none). The exact reference forms x W^T + b without rounding
(softaudit/reference/_linear_cross_entropy.py); the conditioning counts the product's (each logit's |x| |W|^T + |b|,
what rounding the inputs moves it by) and then cross-entropy's in the logits. A case carries its bias among its
arrays and its options in `Case.options`, as cross_entropy's.
"""

from __future__ import annotations

import math

import numpy as np

from ._kind import Kind
from .cross_entropy import OPTIONS, _options, row_parts

#: The vocabulary and hidden sizes of the families by suite (quick, default, full).
_SHAPES = {32: (67, 16), 128: (257, 64), 512: (4099, 512)}


def _shape(size) -> tuple[int, int]:
    return _SHAPES.get(size.n, (257, 64))


def reference(kind, inputs: dict, mask, dtype, **options) -> tuple:
    # (imported here: marking a candidate loads the registry and must not load the reference)
    from ..reference import evaluate_linear_cross_entropy, evaluate_linear_cross_entropy_grad

    args = (inputs["x"], inputs["weight"], inputs["target"])
    bias = inputs.get("bias")
    if kind.upstream is None:
        return (evaluate_linear_cross_entropy(*args, dtype=dtype, bias=bias, **options),)
    return evaluate_linear_cross_entropy_grad(*args, inputs["g"], dtype=dtype, bias=bias, **options)


def _bias(inputs: dict) -> np.ndarray:
    b = inputs.get("bias")
    return np.zeros(len(inputs["weight"])) if b is None else np.asarray(b, dtype=np.float64)


def _logits(inputs: dict) -> tuple[np.ndarray, np.ndarray]:
    """x W^T + b in float64 and the product's size |x| |W|^T + |b| (what rounding the inputs moves a logit by, in
    units of u): the conditioning's, not the reference's."""
    x = np.asarray(inputs["x"], dtype=np.float64)
    w = np.asarray(inputs["weight"], dtype=np.float64)
    b = _bias(inputs)
    with np.errstate(all="ignore"):
        return x @ w.T + b, np.abs(x) @ np.abs(w).T + np.abs(b)


def conditioning(kind, inputs: dict, mask, references, **options) -> tuple[dict, ...]:
    """The scale: |r| + what rounding x, W and b moves r by, to first order. The loss: W's and b's, sum_v |dL/dz_v|
    (|x| |W_v|^T + |b_v|) (the product's size, which holds its own condition: sum |x_h W_vh| over |x W_v^T|), x's,
    sum_h |sum_v dL/dz_v W_vh| |x_h|, and the sum's rounding, as cross_entropy's. The gradients: dz's scale S
    (cross_entropy_grad's, with each logit moved by up to 2 |x| |W_v|^T + |b_v| in place of |logit|), then
    dx = dz W moves by (S + |dz|) |W| (dz's and W's roundings), dW = dz^T x by (S + |dz|)^T |x|, db by sum_n S."""
    o = _options(options)
    logits, size = _logits(inputs)
    target = np.asarray(inputs["target"], np.int64)
    x = np.asarray(inputs["x"], dtype=np.float64)
    nan_rows = np.isnan(logits).any(axis=1) & (target != o["ignore_index"])
    if kind.upstream is not None:  # (dz's scale: every logit moved by x's rounding and W's, each up to size)
        with np.errstate(invalid="ignore"):  # (inf - inf where an input is infinite: that row is undefined)
            size = 2 * size - np.abs(_bias(inputs))
    kept, _, t2, a, factor, ax, ignored, _, _ = row_parts(logits, target, o, size)
    if kind.upstream is None:
        (ref,) = references
        exact = ref.hi if not ref.lo.any() else ref.hi + ref.lo
        with np.errstate(all="ignore"):
            # W's and b's rounding: sum_v |a_v| f_v size_v (ax); x's: sum_h |sum_v a_v f_v W_vh| |x_h|
            w = np.nan_to_num(np.asarray(inputs["weight"], dtype=np.float64))
            through_x = (np.abs(np.where(kept, a * factor, 0.0) @ w) * np.abs(np.nan_to_num(x))).sum(axis=1)
            per_row = np.where(ignored, 0.0, (np.abs(a) * ax).sum(axis=1) + through_x + 1 + np.abs(t2))
            if o["reduction"] == "none":
                return ({"undefined": ref.undefined, "kept_nan_rows": nan_rows, "scale": np.abs(exact) + per_row},)
            div = max(int((~ignored).sum()), 1) if o["reduction"] == "mean" else 1
            scale = np.abs(exact) + per_row.sum() / div
        return ({"undefined": ref.undefined, "kept_nan_rows": np.array([nan_rows.any()]), "scale": scale},)
    g = np.asarray(inputs["g"], dtype=np.float64)
    div = max(int((~ignored).sum()), 1) if o["reduction"] == "mean" else 1
    w = np.where(ignored, 0.0, np.broadcast_to(g, (len(x),)) / div)[:, None]
    with np.errstate(all="ignore"):
        dz = np.where(kept & ~ignored[:, None], w * a * factor, 0.0)
        s_dz = _dz_scale(logits, target, o, g, dz, size, np.asarray(inputs["x"]).dtype)
        weight = np.abs(np.nan_to_num(np.asarray(inputs["weight"], dtype=np.float64)))
        ax_in = np.abs(np.where(ignored[:, None], 0.0, np.nan_to_num(x)))
        both = s_dz + np.abs(dz)
        scales = (both @ weight, both.T @ ax_in, s_dz.sum(axis=0))
    out = []
    any_bad = np.array(bool(nan_rows.any()))
    for index, (ref, scale) in enumerate(zip(references, scales)):
        exact = ref.hi if not ref.lo.any() else ref.hi + ref.lo
        rows = nan_rows if index == 0 else np.broadcast_to(any_bad, ref.undefined.shape)
        out.append({"undefined": ref.undefined, "kept_nan_rows": rows, "scale": np.abs(exact) + scale})
    return tuple(out)


#: The gradient filters a candidate may declare (`conventions={"filter": ...}`, docs/policy.md): none (the default),
#: Cut Cross-Entropy's "auto" (its filter_eps="auto" and "high": the dtype's machine epsilon / 32, 2**-12 in
#: bfloat16, 2**-15 in float16, 2**-28 in float32), or a threshold that is a power of two.
FILTERS = ("none", "auto", *(f"2**-{k}" for k in range(1, 61)))


def filter_threshold(value: str, precision: int) -> float:
    """A declared filter's threshold in a dtype of `precision` significand bits (its epsilon is 2**(1 - p))."""
    return math.ldexp(1.0, -precision - 4) if value == "auto" else math.ldexp(1.0, -int(value.removeprefix("2**-")))


def filter_bound(kind, inputs: dict, options: dict, value: str, fmt) -> tuple[np.ndarray, ...]:
    """The bound B of a declared gradient filter, per output (dx, dweight, dbias), from the exact problem (float64's
    p and dz: a bound needs no correct rounding). An entry the filter may skip is one whose p (not the target's) or
    whose p - q (Cut Cross-Entropy tests |p - q|) is below twice the threshold: twice, since a kernel's own p is
    rounded and an entry near the threshold may fall on either side. B is what skipping every such entry moves
    the outputs by: sum_v |dz_nv| |W_vh| for dx, sum_n |dz_nv| |x_nh| for dweight, sum_n |dz_nv| for dbias, each
    at most the threshold's share of sum |W| or sum |g x| (docs/policy.md)."""
    o = _options(options)
    eps = 2 * filter_threshold(value, fmt.precision)
    logits, _ = _logits(inputs)
    target = np.asarray(inputs["target"], np.int64)
    kept, p, _, a, factor, _, ignored, y, _ = row_parts(logits, target, o)
    g = np.asarray(inputs["g"], dtype=np.float64)
    div = max(int((~ignored).sum()), 1) if o["reduction"] == "mean" else 1
    w = np.where(ignored, 0.0, np.broadcast_to(g, (len(logits),)) / div)[:, None]
    x = np.abs(np.nan_to_num(np.asarray(inputs["x"], dtype=np.float64)))
    weight = np.abs(np.nan_to_num(np.asarray(inputs["weight"], dtype=np.float64)))
    with np.errstate(all="ignore"):
        small_p = (p < eps) & (np.arange(p.shape[1])[None, :] != y[:, None])
        skipped = kept & ~ignored[:, None] & (small_p | (np.abs(a) < eps))
        dz = np.nan_to_num(np.where(skipped, np.abs(w * a * factor), 0.0))
        return dz @ weight, dz.T @ x, dz.sum(axis=0)


def _dz_scale(logits, target, o: dict, g, dz, size, dtype) -> np.ndarray:
    """cross_entropy_grad's scale of dz (less |dz| itself) with each logit's product size for |logit|."""
    from . import cross_entropy as _ce

    class _Ref:  # (the exact dz as cross_entropy_grad's conditioning reads it)
        hi, lo, undefined = dz, np.zeros_like(dz), np.zeros(len(dz), bool)

    inputs = {"logits": logits, "target": target, "g": g, "dtype": dtype}
    options = {k: v for k, v in o.items() if k in OPTIONS}
    fields = _ce.conditioning(_ce.CROSS_ENTROPY_GRAD, inputs, None, (_Ref,), size=size, **options)
    return np.maximum(fields[0]["scale"] - np.abs(dz), 0.0)


def element_inputs(kind, pc, position: tuple, output: int = 0) -> tuple[dict, None]:
    """The inputs behind one output element: for the loss and dx, its row (x's, the target's, g's) with the whole
    weight; for dweight and dbias, the whole case (every row reaches them)."""
    index = getattr(pc, "index", 0)
    inputs = pc.inputs
    if kind.upstream is not None and index > 0:
        return dict(inputs), None
    row = position[0] if position else 0
    found = {n: inputs[n] for n in ("weight", "bias") if n in inputs}
    found |= {"x": inputs["x"][row : row + 1], "target": inputs["target"][row : row + 1]}
    if "g" in inputs:
        g = inputs["g"]
        found["g"] = g[row : row + 1] if g.ndim else g
    return found, None


def upstream(kind, arrays: dict, mask, rng) -> np.ndarray:
    """A Gaussian g per row (the families give a scalar g for a mean or sum)."""
    return rng.standard_normal(len(arrays["x"]))


# -------------------------------------------------------------------------------------------------- families


def _case(kind, x, weight, target, description, rng, bias=None, g=None, **options):
    """One family entry: the arrays (with g for the gradient: Gaussian per row, else 1 or the g given), no mask."""
    arrays = {"x": np.asarray(x, np.float64), "weight": np.asarray(weight, np.float64)}
    arrays["target"] = np.asarray(target, np.int64)
    if bias is not None:
        arrays["bias"] = np.asarray(bias, np.float64)
    if kind == "linear_cross_entropy_grad":
        reduced = options.get("reduction", "none") != "none"
        default = np.array(1.0) if reduced else rng.standard_normal(len(arrays["x"]))
        arrays["g"] = default if g is None else np.asarray(g, np.float64)
    return arrays, None, description, {}, options


def _layer(rng, n, h, v, spread=2.0):
    """Hidden states N(0, 1) and a weight N(0, spread**2 / H): logits about N(0, spread**2), as a trained model's."""
    return rng.standard_normal((n, h)), rng.standard_normal((v, h)) * (spread / np.sqrt(h))


def _gaussian(kind, fmt, size, rng):
    v, h = _shape(size)
    x, w = _layer(rng, 4, h, v)
    t = rng.integers(0, v, 4)
    return [
        _case(kind, x, w, t, f"4 rows, H={h}, V={v}, logits about N(0, 4)", rng),
        _case(kind, x, w, t, f"the same, reduction='mean' (H={h}, V={v})", rng, reduction="mean"),
        _case(kind, x, w, t, f"the same with a bias N(0, 1) (H={h}, V={v})", rng, bias=rng.standard_normal(v)),
    ]


def _confident(kind, fmt, size, rng):
    """Each row's target weight row aligned with its x: logit gaps of 5 to 12 (p_y 0.99 to 0.99999)."""
    v, h = _shape(size)
    x, w = _layer(rng, 3, h, v, spread=0.5)
    t = rng.choice(v, 3, replace=False)
    for i, gap in enumerate((5.0, 8.0, 12.0)):
        w[t[i]] = x[i] * (gap / (x[i] @ x[i]))
    text = "the target's logit 5, 8, 12 above N(0, 1/4) others (Liger-Kernel PR #1329's regime)"
    return [_case(kind, x, w, t, f"{text}, H={h}, V={v}", rng)]


def _cancelling(kind, fmt, size, rng):
    """Logits that are small differences of large products: each weight row holds a block and its negation
    nudged by 2**-6, and x repeats its halves, so sum |x_h W_vh| is hundreds of times |x W_v^T|."""
    v, h = _shape(size)
    half = h // 2
    x = np.ones((4, h)) + rng.uniform(0, 0.05, (4, h))
    x[:, half : 2 * half] = x[:, :half]
    big = rng.uniform(1, 4, (v, half))
    nudged = big * (1 + rng.choice([2.0**-6, -(2.0**-6), 0.0], big.shape))
    w = np.zeros((v, h))
    w[:, :half], w[:, half : 2 * half] = big, -nudged
    t = rng.integers(0, v, 4)
    return [_case(kind, x, w, t, f"x W^T cancelling: sum |x_h W_vh| >> |x W_v^T|, H={h}, V={v}", rng)]


def _large_logits(kind, fmt, size, rng):
    """Logits past float16's largest value: two weights of 36,864 against x = 1 give rows 0 and 1 every logit an
    offset of 73,728, over N(0, 4) ones (the loss itself is small; row 2 has no offset): rounding the logits to
    float16 makes them inf, and to bfloat16 moves them by 256."""
    v, h = _shape(size)
    x, w = _layer(rng, 3, h, v)
    x[:2, :2], x[2, :2], w[:, :2] = 1.0, 0.0, 36864.0
    text = "rows 0 and 1: logits 73,728 + N(0, 4), past float16's largest; row 2 without the offset"
    return [_case(kind, x, w, rng.integers(0, v, 3), text, rng)]


def _ignored(kind, fmt, size, rng):
    v, h = _shape(size)
    x, w = _layer(rng, 4, h, v)
    t = rng.integers(0, v, 4)
    some = np.where(np.arange(4) % 2 == 1, -100, t)
    return [
        _case(kind, x, w, some, "rows 1 and 3 ignored (Liger #968: reduction='none' gave zero gradients)", rng),
        _case(kind, x, w, some, "rows 1 and 3 ignored, mean over the other 2", rng, reduction="mean"),
        _case(kind, x, w, np.full(4, -100), "every row ignored, reduction='sum': 0", rng, reduction="sum"),
    ]


def _options_family(kind, fmt, size, rng):
    v, h = _shape(size)
    x, w = _layer(rng, 4, h, v)
    t = rng.integers(0, v, 4)
    small_v = min(v, 257)  # (a softcapped row's reference is mpmath's: a tanh has no fast tier)
    return [
        _case(kind, x, w, t, "label smoothing 0.1, mean", rng, label_smoothing=0.1, reduction="mean"),
        _case(kind, x, w * 2, t, "z_loss 1e-4 (PaLM) on N(0, 16) logits", rng, z_loss=1e-4),
        _case(kind, x[:2], w[:small_v] * 8, t[:2] % small_v, f"softcap 30 (Gemma 2), V={small_v}", rng, softcap=30.0),
    ]


def _ties(kind, fmt, size, rng):
    """Duplicated weight rows (tied classes, equal logits) and rows of x that are 0: exact zeros in dx and dW."""
    v, h = _shape(size)
    x, w = _layer(rng, 4, h, v)
    w[1::2] = w[0::2][: len(w[1::2])]
    x[2] = 0.0
    return [_case(kind, x, w, rng.integers(0, v, 4), "every odd class ties with the one before; row 2's x is 0", rng)]


def _chunks(kind, fmt, size, rng):
    """Many rows, as a fused kernel chunks them: dweight sums over every row, so a sum across chunks rounded to a
    16-bit dtype loses a chunk's contribution (Liger-Kernel #1391)."""
    n = {32: 64, 128: 256}.get(size.n, 2048)
    v, h = 256, 8  # (a fused kernel's chunks are about V / H: 32 here, as for Llama 3's 128k x 4,096)
    x, w = _layer(rng, n, h, v)
    t = rng.integers(0, v, n)
    return [_case(kind, x, w, t, f"{n} rows, H={h}, V={v}, mean (the chunked-rows regime)", rng, reduction="mean")]


def _real_shapes(kind, fmt, size, rng):
    """A model's output layer at its real hidden size, two rows (more rows are the chunks family's business): the
    default suite's vocabulary is 257 (the main job's time: the reference's dweight, V x H exact sums, and the
    built-ins' products take minutes on a CPU at V = 32,000); the full suite's are Llama 2's and Llama 3's
    (32,000 with H = 4,096, 128,256 with H = 2,048: a GB in float64, minutes)."""
    shapes = {32: [(64, 1003)], 128: [(2048, 257)]}.get(size.n, [(4096, 32000), (2048, 128256)])
    out = []
    for h, v in shapes:
        x, w = _layer(rng, 2, h, v)
        out.append(_case(kind, x, w, rng.integers(0, v, 2), f"H={h}, V={v}: an output layer's hidden size", rng))
    return out


_MAKERS = {
    "lce_gaussian": ("Gaussian hidden states and weights: logits about N(0, 4), with a mean and a bias", _gaussian),
    "lce_confident": ("confident rows: the target's logit 5 to 12 above the others", _confident),
    "lce_cancelling": ("logits that cancel in the product x W^T", _cancelling),
    "lce_large_logits": ("logits past float16's largest value, far apart", _large_logits),
    "lce_ignored": ("ignore_index: some rows, every row, with a mean and a sum", _ignored),
    "lce_options": ("label smoothing, z-loss and a softcap on x W^T", _options_family),
    "lce_ties": ("tied classes (duplicated weight rows) and a zero hidden state", _ties),
    "lce_chunks": ("many rows, a mean: the regime of chunking over rows (Liger-Kernel #1391)", _chunks),
    "lce_real_shapes": (
        "real output layers: hidden 2,048 (default), vocabularies of 32,000 and more (full)",
        _real_shapes,
    ),
}


LINEAR_CROSS_ENTROPY = Kind(
    "linear_cross_entropy",
    "f(x, weight, target) -> loss, the cross-entropy of the logits x W^T + b, with the case's keywords of "
    "bias=None, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction='none'",
    arguments=("x", "weight", "target"),
    keywords=(),
    outputs=("loss",),
    plain="linear_cross_entropy.materialised",
    standard=("linear_cross_entropy.materialised",),
    best="linear_cross_entropy.f32_logits",
    best_practice="the logits x W^T + b in {wide}, then cross-entropy in {wide}, round once "
    "(linear_cross_entropy.f32_logits)",
    families=tuple(_MAKERS),
    reference=reference,
    conditioning=conditioning,
    element_inputs=element_inputs,
    reduction=("weight", 0),
    row_wise=False,
    reduces=True,
    logarithmic=True,
    causes=("absorbed",),
    scale_terms="the terms of x W^T and of the log-sum-exp",
    integers=("target",),
    extras={"bias": 0},
    makers=_MAKERS,
    batched=False,
)

LINEAR_CROSS_ENTROPY_GRAD = Kind(
    "linear_cross_entropy_grad",
    "f(x, weight, target, g) -> (dx, dweight, dbias), with linear_cross_entropy's keywords",
    arguments=("x", "weight", "target", "g"),
    keywords=(),
    outputs=("dx", "dweight", "dbias"),
    plain="linear_cross_entropy_grad.materialised",
    standard=("linear_cross_entropy_grad.materialised", "linear_cross_entropy_grad.chunked"),
    best="linear_cross_entropy_grad.f32_logits",
    best_practice="logits and p - q in {wide}, the products with W and x summed in {wide}, each rounded once "
    "(linear_cross_entropy_grad.f32_logits)",
    families=tuple(_MAKERS),
    reference=reference,
    conditioning=conditioning,
    element_inputs=element_inputs,
    upstream=upstream,
    reduction=("weight", 0),
    row_wise=False,
    reduces=False,
    logarithmic=False,
    causes=("subnormal",),
    scale_terms="the terms of dz W and dz^T x",
    fixes={
        "approximation": "declare no gradient filter, or a smaller threshold (Cut Cross-Entropy: filter_eps=None), "
        "where the gradient must be exact",
    },
    integers=("target",),
    extras={"bias": 0},
    batched=False,
    declarable={"filter": ("gradient filter", FILTERS)},
    approximations={"filter": filter_bound},
)
