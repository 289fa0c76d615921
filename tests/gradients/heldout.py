"""Held-out backward implementations for verdict tests: defective ones, each wrong for one stated reason, and sound
ones. None is a built-in. Each computes in float64 and rounds once to its inputs' dtype, so its only error beyond
that rounding is its defect. Calling conventions as the *_grad kinds'."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from softaudit.candidates import attention_grad, masked_softmax_grad, softmax_grad


def _f64(*arrays):
    return [np.asarray(a).astype(np.float64) for a in arrays]


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# --- sound -----------------------------------------------------------------------------------------------------


def sound_softmax_grad(x, g, axis=-1):
    """Sound: the float64 built-in formula, rounded once."""
    return softmax_grad.f32acc(*_f64(x, g), axis=axis).astype(x.dtype)


def sound_masked_softmax_grad(x, mask, g, axis=-1):
    """Sound: the where idiom in float64, rounded once (0 on masked entries and fully masked rows)."""
    return masked_softmax_grad.where(_f64(x)[0], mask, _f64(g)[0], axis=axis).astype(x.dtype)


def sound_attention_grad(q, k, v, g, mask=None):
    """Sound: the float64 backward, each gradient rounded once."""
    return tuple(a.astype(q.dtype) for a in attention_grad.upcast(*_f64(q, k, v, g), mask=mask))


# --- defective: row kinds ----------------------------------------------------------------------------------------


def softmax_grad_missing_dot(x, g, axis=-1):
    """Defect: p * g, the <g, p> term of p * (g - <g, p>) forgotten (wrong by p <g, p>)."""
    x, g = np.moveaxis(x, axis, -1), np.moveaxis(g, axis, -1)
    out = _softmax(x.astype(np.float64)) * g.astype(np.float64)
    return np.moveaxis(out, -1, axis).astype(x.dtype)


def masked_softmax_grad_nan_fully_masked(x, mask, g, axis=-1):
    """Defect: softmax(where(mask, x, -inf)) differentiated: NaN on every fully masked row (exact: 0)."""
    x64, g64 = _f64(x, g)
    with np.errstate(invalid="ignore"):
        return softmax_grad.f32acc(np.where(mask, x64, -np.inf), g64, axis=axis).astype(x.dtype)


def masked_softmax_grad_leaks(x, mask, g, axis=-1):
    """Defect: softmax(where(mask, x, finfo.min)) differentiated: a fully masked row is uniform, so its masked
    entries get gradient p (g - <g, p>) where the exact gradient is 0 (a leak into masked entries)."""
    x64, g64 = _f64(x, g)
    fill = float(ml_dtypes.finfo(x.dtype).min)
    return softmax_grad.f32acc(np.where(mask, x64, fill), g64, axis=axis).astype(x.dtype)


# --- defective: attention ------------------------------------------------------------------------------------


def _attention_parts(q, k, v, g, mask, scale):
    q, k, v, g = _f64(q, k, v, g)
    s = np.einsum("...id,...jd->...ij", q, k) * scale
    keep = np.ones(s.shape, bool) if mask is None else np.broadcast_to(mask, s.shape)
    m = np.where(keep, s, -np.inf).max(axis=-1, keepdims=True)
    e = np.where(keep, np.exp(s - np.where(np.isfinite(m), m, 0)), 0)
    total = e.sum(axis=-1, keepdims=True)
    p = np.where(total > 0, e / np.where(total > 0, total, 1), 0)
    dp = np.einsum("...id,...jd->...ij", g, v)
    return q, k, v, g, e, p, dp


def _grads(q, k, g, p, dp, d, c_q, c_k, dtype):
    ds = p * (dp - d)
    dq = c_q * np.einsum("...ij,...jd->...id", ds, k)
    dk = c_k * np.einsum("...ij,...id->...jd", ds, q)
    dv = np.einsum("...ij,...id->...jd", p, g)
    return dq.astype(dtype), dk.astype(dtype), dv.astype(dtype)


def attention_grad_scale_1_over_d(q, k, v, g, mask=None):
    """Defect: scale 1/d instead of 1/sqrt(d), in the forward recomputation and in dq, dk."""
    d = q.shape[-1]
    q64, k64, _, g64, _, p, dp = _attention_parts(q, k, v, g, mask, 1 / d)
    return _grads(q64, k64, g64, p, dp, (dp * p).sum(-1, keepdims=True), 1 / d, 1 / d, q.dtype)


def attention_grad_dk_missing_scale(q, k, v, g, mask=None):
    """Defect: dK = dS^T Q without the factor c = 1/sqrt(d) (dq and dv right)."""
    c = 1 / np.sqrt(q.shape[-1])
    q64, k64, _, g64, _, p, dp = _attention_parts(q, k, v, g, mask, c)
    return _grads(q64, k64, g64, p, dp, (dp * p).sum(-1, keepdims=True), c, 1.0, q.dtype)


def attention_grad_delta_rowsum_do(q, k, v, g, mask=None):
    """Defect: D = rowsum(dO) instead of rowsum(dO * O) (dv right, dq and dk wrong)."""
    c = 1 / np.sqrt(q.shape[-1])
    q64, k64, _, g64, _, p, dp = _attention_parts(q, k, v, g, mask, c)
    return _grads(q64, k64, g64, p, dp, g64.sum(-1, keepdims=True), c, c, q.dtype)


def attention_grad_delta_unnormalized_o(q, k, v, g, mask=None):
    """Defect: D = rowsum(dO * O~) with O~ = exp(S - m) V, FlashAttention's running accumulator before its final
    1 / l correction (dv right; dq, dk wrong by P (D~ - D))."""
    c = 1 / np.sqrt(q.shape[-1])
    q64, k64, v64, g64, e, p, dp = _attention_parts(q, k, v, g, mask, c)
    unnormalized = np.einsum("...ij,...jd->...id", e, v64)
    return _grads(q64, k64, g64, p, dp, (g64 * unnormalized).sum(-1, keepdims=True), c, c, q.dtype)


SOUND = [sound_softmax_grad, sound_masked_softmax_grad, sound_attention_grad]
DEFECTIVE = [
    softmax_grad_missing_dot,
    masked_softmax_grad_nan_fully_masked,
    masked_softmax_grad_leaks,
    attention_grad_scale_1_over_d,
    attention_grad_dk_missing_scale,
    attention_grad_delta_rowsum_do,
    attention_grad_delta_unnormalized_o,
]
