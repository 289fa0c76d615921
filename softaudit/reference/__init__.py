"""Ground truth: softmax, log-softmax, log-sum-exp, masked softmax and attention, exact and correctly rounded.

Every input element is the exact binary number it holds. With `dtype=D` each result is the exact value rounded to
D (to nearest, ties to even, with gradual underflow and IEEE overflow); with `dtype=None` it is an mpmath value,
the exact result correctly rounded to `prec` bits. A row without a defined result (a NaN or +inf logit, or nothing
kept) gives NaN, and `undefined_rows` says which rows those are. docs/reference.md holds the guarantee and its proof.

`method="auto"` computes in vectorised float64 or double-double with a proven error bound and falls back to mpmath
only where that bound cannot decide the rounding; `method="mpmath"` uses mpmath for every element. Both give the
same bits.

(Longer than the house's 400 lines: it is the reference's public face, one short entry per kind and per gradient calling
into the tiers, and reads as one table that grows by a kind at a time.)
"""

from __future__ import annotations

import numpy as np

from . import _cross_entropy, _grad_rows, _linear_cross_entropy, _rows
from ._attention import prepare, round_attention, round_lse
from ._engine import TIER_NAMES as TIER_NAMES
from ._engine import Result as Result
from ._engine import round_rows
from ._exact import PrecisionExhausted as PrecisionExhausted
from ._formats import DTYPE_NAMES as DTYPE_NAMES
from ._formats import Format as Format
from ._formats import format_of as format_of
from ._formats import round_array
from ._grad_broadcast import attention_grad as _attention_grad
from ._grad_broadcast import with_sinks as with_sinks
from ._grad_rows import round_rows as round_grad_rows
from ._grad_sinks import sink_grad as _sink_grad
from ._validate import axis_index, bool_mask, float_array, scale_value, target

__all__ = [
    "DTYPE_NAMES",
    "TIER_NAMES",
    "Format",
    "PrecisionExhausted",
    "Result",
    "attention",
    "attention_grad",
    "attention_undefined_rows",
    "cross_entropy",
    "cross_entropy_grad",
    "evaluate",
    "evaluate_attention",
    "evaluate_attention_lse",
    "evaluate_cross_entropy",
    "evaluate_cross_entropy_grad",
    "evaluate_grad",
    "evaluate_linear_cross_entropy",
    "evaluate_linear_cross_entropy_grad",
    "evaluate_sinks_grad",
    "format_of",
    "linear_cross_entropy",
    "linear_cross_entropy_grad",
    "log_softmax",
    "log_softmax_grad",
    "logsumexp",
    "logsumexp_grad",
    "masked_softmax",
    "masked_softmax_grad",
    "round_to",
    "sinks_grad",
    "softmax",
    "softmax_grad",
    "undefined_rows",
    "with_sinks",
]

#: The row kinds by the name the public API takes, forward and VJP: each one's formula object (reference/_rows.py,
#: _grad_rows.py) and whether it needs a mask. A masked kind is its unmasked formula over the entries its mask keeps.
#: The one place the reference reads a row kind's name.
_ROW_FORMULAS = {
    "softmax": (_rows.SOFTMAX, False),
    "log_softmax": (_rows.LOG_SOFTMAX, False),
    "logsumexp": (_rows.LOGSUMEXP, False),
    "masked_softmax": (_rows.SOFTMAX, True),
}
_GRAD_FORMULAS = {
    "softmax_grad": (_grad_rows.SOFTMAX_GRAD, False),
    "log_softmax_grad": (_grad_rows.LOG_SOFTMAX_GRAD, False),
    "logsumexp_grad": (_grad_rows.LOGSUMEXP_GRAD, False),
    "masked_softmax_grad": (_grad_rows.SOFTMAX_GRAD, True),
}
_METHODS = ("auto", "mpmath")


def softmax(x, axis=-1, *, dtype=None, prec=113, method="auto") -> np.ndarray:
    """exp(x_i) / sum_j exp(x_j) along `axis`; -inf entries get exactly 0."""
    return _evaluate("softmax", x, None, axis, dtype, prec, method, detail=False)


def log_softmax(x, axis=-1, *, dtype=None, prec=113, method="auto") -> np.ndarray:
    """x_i - log(sum_j exp(x_j)) along `axis`; -inf entries get exactly -inf."""
    return _evaluate("log_softmax", x, None, axis, dtype, prec, method, detail=False)


def logsumexp(x, axis=-1, *, dtype=None, prec=113, method="auto") -> np.ndarray:
    """log(sum_j exp(x_j)) along `axis` (removed); -inf for an empty or all -inf row, +inf with a +inf entry."""
    return _evaluate("logsumexp", x, None, axis, dtype, prec, method, detail=False)


def masked_softmax(x, mask, axis=-1, *, dtype=None, prec=113, method="auto") -> np.ndarray:
    """softmax of the entries where `mask` is True; masked entries get exactly 0 whatever they hold."""
    return _evaluate("masked_softmax", x, mask, axis, dtype, prec, method, detail=False)


def attention(
    q,
    k,
    v,
    mask=None,
    *,
    scale=None,
    bias=None,
    softcap=None,
    sinks=None,
    dtype=None,
    prec=113,
    method="auto",
    device="auto",
) -> np.ndarray:
    """softmax(scale * q k^T, masked) v for q (..., Lq, d), k (..., Lk, d), v (..., Lk, dv).

    `mask` is boolean, broadcastable to (..., Lq, Lk), True = may attend. `scale=None` is the real 1/sqrt(d).
    Score modifiers, in this order: `softcap` c makes each score s into c tanh(s / c); `bias` (broadcastable to
    (..., Lq, Lk); an ALiBi bias is slope (j - i)) is added, -inf masking that score; then the mask. `sinks` (one
    logit z per batch entry, broadcastable to the batch shape) adds a key of score exactly z and value 0 that every
    query attends (a learnable sink; z = 0 is softmax1, "off by one"). A softcapped problem is computed by tier C
    (mpmath) for float64 targets, and for what tier A leaves.
    `device`: where the float64 tier runs for targets of at most 24 bits: "auto" (a CUDA GPU through torch when
    one is present and the problem has at least 2**24 scores; $SOFTAUDIT_REFERENCE_DEVICE overrides), "numpy", or
    a torch device name ("cuda", "cuda:1", "cpu"). The values are the same bits on every device.
    """
    problem = prepare(q, k, v, mask, scale_value(scale), bias, softcap, sinks)
    return round_attention(problem, target(dtype, prec), _method(method), detail=False, device=device).value


def softmax_grad(x, g, axis=-1, *, dtype=None, prec=113, method="auto") -> np.ndarray:
    """The vector-Jacobian product of softmax: p_i (g_i - <g, p>) along `axis`; exactly +0 where p_i = 0."""
    return _evaluate_grad("softmax_grad", x, None, g, axis, dtype, prec, method, detail=False)


def log_softmax_grad(x, g, axis=-1, *, dtype=None, prec=113, method="auto") -> np.ndarray:
    """The vector-Jacobian product of log-softmax: g_i - p_i sum_k g_k along `axis`, the sum over every entry: at a
    -inf logit p_i = 0, so dx_i = g_i (y_i = x_i - lse(x)), as autograd gives. A row of -inf only is undefined."""
    return _evaluate_grad("log_softmax_grad", x, None, g, axis, dtype, prec, method, detail=False)


def logsumexp_grad(x, g, axis=-1, *, dtype=None, prec=113, method="auto") -> np.ndarray:
    """The vector-Jacobian product of log-sum-exp: p_i g, g of x's shape without `axis`."""
    return _evaluate_grad("logsumexp_grad", x, None, g, axis, dtype, prec, method, detail=False)


def masked_softmax_grad(x, mask, g, axis=-1, *, dtype=None, prec=113, method="auto") -> np.ndarray:
    """softmax_grad over the entries where `mask` is True; masked entries, and fully masked rows, get exactly +0."""
    return _evaluate_grad("masked_softmax_grad", x, mask, g, axis, dtype, prec, method, detail=False)


def evaluate_grad(kind, x, g, mask=None, axis=-1, *, dtype=None, prec=113, method="auto") -> Result:
    """The full `Result` of a row gradient kind (softmax_grad, log_softmax_grad, logsumexp_grad,
    masked_softmax_grad); `undefined` per row."""
    return _evaluate_grad(kind, x, mask, g, axis, dtype, prec, method, detail=True)


def _evaluate_grad(kind, x, mask, g, axis, dtype, prec, method, detail: bool):
    """Rows with no kept entry have gradient 0 (nothing depends on them); a row is undefined (NaN at its kept
    entries, 0 at its masked and -inf ones as in any row; NaN throughout for log_softmax_grad, which reads g there)
    when a kept x is NaN or +inf, or a kept g is not finite."""
    formula = _formula(_GRAD_FORMULAS, kind, mask, check_mask=True)
    fmt = target(dtype, prec)
    method = _method(method)
    x2, removed2, moved_shape, ax = _as_rows(x, mask, axis)
    g = float_array(g, "g", min_ndim=0)
    if formula.g_per_row:
        if g.shape != moved_shape[:-1]:
            raise ValueError(f"g must have x's shape without the axis, {moved_shape[:-1]}, got {g.shape}")
        g2 = g.reshape(-1)
    else:
        if g.shape != np.shape(x):
            raise ValueError(f"g must have x's shape {np.shape(x)}, got {g.shape}")
        g2 = np.moveaxis(g, ax, -1).reshape(x2.shape)
    undefined = formula.undefined(x2, g2, removed2)
    out = round_grad_rows(formula, x2, g2, removed2, undefined, fmt, method, detail)

    def restore(a):
        return np.moveaxis(a.reshape(moved_shape), -1, ax)

    if not detail:
        return restore(out.array())
    parts = (out.array(), out.hi, out.lo, out.err, out.tier)
    fine = None if out.fine is None else restore(out.fine)
    return Result(*(restore(a) for a in parts), undefined.reshape(moved_shape[:-1]), fine)


def attention_grad(
    q, k, v, g, mask=None, *, scale=None, bias=None, sinks=None, softcap=None, dtype=None, prec=113, method="auto"
) -> tuple:
    """(dq, dk, dv): the vector-Jacobian product of `attention` for the upstream gradient g (the output's shape).

    Scale and mask as for `attention`. k and v may broadcast against q along batch axes (one K/V head shared by
    several query heads; both along the same axes): dq has q's shape, dk and dv have k's and v's, and a shared
    head's gradient is the sum over every query head sharing it (what autograd gives for expand), correctly rounded
    as one sum. A query that may attend no key gets dq = 0 and adds nothing; a key no query may attend gets
    dk = dv = 0 (so with no query or no key at all, an axis of size 0, every gradient is 0). A query with a NaN or
    infinity in q, g, or a key or value it attends makes its dq and the dk, dv of the keys it attends NaN.

    `bias` and `sinks` as for `attention` (the scores' additive bias, -inf removing a score; one sink logit per
    batch entry, a key of value 0 every query attends) and `softcap` as for `attention` (each score s becomes
    softcap tanh(s / softcap) before the bias): the gradients with respect to q, k and v of that attention.
    """
    fmt, method = target(dtype, prec), _method(method)
    scale = scale_value(scale)
    return _attention_grad(q, k, v, g, mask, scale, fmt, method, bias=bias, sinks=sinks, softcap=softcap)


def evaluate_attention_grad(
    q,
    k,
    v,
    g,
    mask=None,
    *,
    scale=None,
    bias=None,
    sinks=None,
    softcap=None,
    dtype=None,
    prec=113,
    method="auto",
    softcap_derivative=True,
) -> tuple:
    """The full `Result` of each of attention_grad's (dq, dk, dv) (undefined: per query for dq, per key for dk,
    dv). softcap_derivative False gives what a backward that leaves out the cap's derivative computes (the
    convention check's neighbour, `kinds._grads.attention_conventions`)."""
    fmt, method = target(dtype, prec), _method(method)
    extras = {"bias": bias, "sinks": sinks, "softcap": softcap, "derivative": softcap_derivative}
    return _attention_grad(q, k, v, g, mask, scale_value(scale), fmt, method, detail=True, **extras)


def sinks_grad(
    q, k, v, g, sinks, mask=None, *, scale=None, bias=None, softcap=None, dtype=None, prec=113, method="auto"
):
    """The gradient of `attention` with `sinks` with respect to each sink's logit, for the upstream gradient g (the
    output's shape), correctly rounded, of sinks' shape: dz = -sum_i P_i,z D_i over the queries of every batch entry
    that shares the sink (P_i,z its weight, D_i = sum_j P_ij dP_ij; its value being 0, its dP is 0). NaN where a
    query of those entries is undefined for `attention_grad`. Mask, scale, bias and softcap as for `attention` (the
    sink's logit is not capped)."""
    return evaluate_sinks_grad(
        q, k, v, g, sinks, mask, scale=scale, bias=bias, softcap=softcap, dtype=dtype, prec=prec, method=method
    ).value


def evaluate_sinks_grad(
    q, k, v, g, sinks, mask=None, *, scale=None, bias=None, softcap=None, dtype=None, prec=113, method="auto"
):
    """The full `Result` of `sinks_grad` (undefined: per sink)."""
    fmt, method = target(dtype, prec), _method(method)
    return _sink_grad(q, k, v, g, mask, scale_value(scale), fmt, method, bias=bias, sinks=sinks, softcap=softcap)


def cross_entropy(logits, target, *, dtype, **options) -> np.ndarray:
    """The cross-entropy loss of logits (N, V) for integer targets (N,), correctly rounded to `dtype` (a float
    format of at most 53 bits). Options as torch.nn.functional.cross_entropy's (ignore_index=-100,
    label_smoothing=0.0, reduction="none" | "mean" | "sum") plus z_loss (zl lse**2 added per row) and softcap (the
    logits become c tanh(x / c) first). An ignored row's loss is 0; a row with a NaN or +inf logit, or every logit
    -inf, is undefined (NaN), and so is the mean of no rows."""
    value = evaluate_cross_entropy(logits, target, dtype=dtype, **options).value
    return value if options.get("reduction", "none") == "none" else value[0]


def evaluate_cross_entropy(logits, target, *, dtype, **options) -> Result:
    """The full `Result` of `cross_entropy` (undefined: per row; a mean or sum as an array of one value)."""
    return _cross_entropy.loss(logits, target, dtype, _cross_entropy.Options(**options))


def cross_entropy_grad(logits, target, g, *, dtype, **options) -> np.ndarray:
    """The gradient of `cross_entropy` with respect to the logits for the upstream gradient g (one per row for
    reduction="none", a scalar otherwise), correctly rounded: g ((1 + 2 z_loss lse) p - q) per row, q the
    smoothed one-hot target (times sech(x / c)**2 under a softcap, and over the rows kept for a mean); exactly +0
    for an ignored row."""
    return evaluate_cross_entropy_grad(logits, target, g, dtype=dtype, **options).value


def evaluate_cross_entropy_grad(logits, target, g, *, dtype, **options) -> Result:
    """The full `Result` of `cross_entropy_grad` (undefined: per row)."""
    return _cross_entropy.gradient(logits, target, g, dtype, _cross_entropy.Options(**options))


def linear_cross_entropy(x, weight, target, *, dtype, bias=None, **options) -> np.ndarray:
    """The cross-entropy loss of the logits x W^T + b (x (N, H), weight (V, H), bias (V,) or None), never rounded,
    correctly rounded to `dtype` (a format of at most 53 bits); options as `cross_entropy`'s."""
    value = evaluate_linear_cross_entropy(x, weight, target, dtype=dtype, bias=bias, **options).value
    return value if options.get("reduction", "none") == "none" else value[0]


def evaluate_linear_cross_entropy(x, weight, target, *, dtype, bias=None, **options) -> Result:
    """The full `Result` of `linear_cross_entropy` (undefined: per row; a mean or sum as an array of one value)."""
    return _linear_cross_entropy.loss(x, weight, target, dtype, _cross_entropy.Options(**options), bias)


def linear_cross_entropy_grad(x, weight, target, g, *, dtype, bias=None, **options) -> tuple:
    """(dx, dweight, dbias) of `linear_cross_entropy` for the upstream g (one per row for reduction="none", a
    scalar otherwise), each correctly rounded; dbias is the gradient with respect to the bias (at a zero bias where
    there is none): the column sums of dloss/dlogits."""
    found = evaluate_linear_cross_entropy_grad(x, weight, target, g, dtype=dtype, bias=bias, **options)
    return tuple(r.value for r in found)


def evaluate_linear_cross_entropy_grad(x, weight, target, g, *, dtype, bias=None, **options) -> tuple:
    """The full `Result`s of `linear_cross_entropy_grad` (dx undefined per row; dweight and dbias wholly where any
    row is)."""
    return _linear_cross_entropy.gradient(x, weight, target, g, dtype, _cross_entropy.Options(**options), bias)


def evaluate_attention_lse(
    q, k, v, mask=None, *, scale=None, bias=None, softcap=None, sinks=None, dtype=None, prec=113
) -> Result:
    """The correctly rounded log-sum-exp of each query's scores (..., Lq), as FlashAttention and FlashInfer return
    it beside o: log sum_j e**s_j over the kept keys, with `attention`'s modifiers (a sink's e**z included). -inf for
    a query with nothing kept (no key and no sink); NaN where `attention` is undefined. Only formats of at most 53
    bits (`dtype`); prec is unused otherwise."""
    problem = prepare(q, k, v, mask, scale_value(scale), bias, softcap, sinks)
    fmt = target(dtype, prec)
    if fmt.dtype is None or fmt.precision > 53:
        raise ValueError(f"dtype must be a format of at most 53 bits for the attention lse reference, not {fmt.name}")
    return round_lse(problem, fmt)


def round_to(values, dtype) -> np.ndarray:
    """float64 values (or anything numpy makes float64 exactly) correctly rounded to `dtype`, in that dtype.

    Unlike a cast, this rounds once from the exact value (ml_dtypes' float64 -> bfloat16 cast rounds twice).
    """
    return round_array(values, format_of(dtype))


def _method(method) -> str:
    if method not in _METHODS:
        raise ValueError(f"method must be one of {', '.join(_METHODS)}, got {method!r}")
    return method


def _as_rows(x, mask, axis):
    """x and its removed entries as 2-D arrays with the reduced axis last, and the shape to restore."""
    x = float_array(x, "x")
    ax = axis_index(axis, x.ndim)
    removed = x == -np.inf
    if mask is not None:
        removed = removed | ~bool_mask(mask, "mask", x.shape)
    moved = np.moveaxis(x, ax, -1)
    flat = (int(np.prod(moved.shape[:-1])), moved.shape[-1])  # explicit: reshape(-1, 0) is ambiguous
    return moved.reshape(flat), np.moveaxis(removed, ax, -1).reshape(flat), moved.shape, ax


def undefined_rows(x, mask=None, axis=-1, *, kind="softmax") -> np.ndarray:
    """Boolean array (x's shape without `axis`): True where `kind` has no defined result for the row.

    For softmax, log_softmax and masked_softmax: a NaN or +inf among the kept entries, or no kept entry.
    For logsumexp only a NaN (an all -inf row gives -inf, a +inf entry gives +inf).
    """
    formula = _formula(_ROW_FORMULAS, kind)
    x2, removed2, moved_shape, _ = _as_rows(x, mask, axis)
    return formula.undefined(x2, removed2).reshape(moved_shape[:-1])


def evaluate(kind, x, mask=None, axis=-1, *, dtype=None, prec=113, method="auto") -> Result:
    """The full `Result` of a row kind: rounded values with the approximation, tier and undefined rows."""
    return _evaluate(kind, x, mask, axis, dtype, prec, method, detail=True)


def _formula(table: dict, kind, mask=None, check_mask=False):
    """The formula of the row kind named `kind` in `table` (_ROW_FORMULAS or _GRAD_FORMULAS), with one clear error
    for an unknown name or, where `check_mask`, for a masked kind given no mask."""
    if kind not in table:
        raise ValueError(f"kind must be one of {', '.join(table)}, got {kind!r}")
    formula, masked = table[kind]
    if check_mask and masked and mask is None:
        raise TypeError(f"{kind} needs a mask")
    return formula


def _evaluate(kind, x, mask, axis, dtype, prec, method, detail: bool):
    """A `Result` (detail True) or just the rounded values."""
    formula = _formula(_ROW_FORMULAS, kind, mask, check_mask=True)
    fmt = target(dtype, prec)
    method = _method(method)
    x2, removed2, moved_shape, ax = _as_rows(x, mask, axis)
    undefined = formula.undefined(x2, removed2)
    out = round_rows(formula, x2, removed2, undefined, fmt, method, detail)
    shape = moved_shape[:-1] if formula.reduces else moved_shape

    def restore(a):
        a = a.reshape(shape)
        return a if formula.reduces else np.moveaxis(a, -1, ax)

    if not detail:
        return restore(out.array())
    parts = (out.array(), out.hi, out.lo, out.err, out.tier)
    fine = None if out.fine is None else restore(out.fine)
    return Result(*(restore(a) for a in parts), undefined.reshape(moved_shape[:-1]), fine)


def attention_undefined_rows(q, k, v, mask=None) -> np.ndarray:
    """Boolean array (..., Lq): True where a query has no defined output.

    That is: no key it may attend, or a NaN or infinity in the query or in a key or value it may attend.
    """
    return prepare(q, k, v, mask, None).undefined


def evaluate_attention(
    q,
    k,
    v,
    mask=None,
    *,
    scale=None,
    bias=None,
    softcap=None,
    sinks=None,
    dtype=None,
    prec=113,
    method="auto",
    device="auto",
) -> Result:
    """The full `Result` of attention (per query row: undefined); modifiers and `device` as for `attention`."""
    problem = prepare(q, k, v, mask, scale_value(scale), bias, softcap, sinks)
    return round_attention(problem, target(dtype, prec), _method(method), detail=True, device=device)
