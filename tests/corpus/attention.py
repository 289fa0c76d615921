"""Attention implementations f(q, k, v, mask=None) (mask True = the query may attend the key): sound,
trade-offs, defects."""

import math

import numpy as np

from ._util import f64, guarded_max, keep_of, safe_divide, up

LOG2E = 1.4426950408889634


def _t(a):
    return np.swapaxes(a, -1, -2)


def _softmax_pv(s, v, mask, p_dtype=None):
    """where-masked softmax of the scores s (a query with nothing kept gets P = 0), P optionally rounded to
    p_dtype, then P V, all in s's dtype."""
    keep = keep_of(mask, s.shape)
    t = np.where(keep, s, -np.inf)
    e = np.where(keep, np.exp(t - guarded_max(t)), 0).astype(s.dtype)
    p = safe_divide(e, e.sum(axis=-1, keepdims=True))
    if p_dtype is not None:
        p = p.astype(p_dtype).astype(s.dtype)
    return p @ v.astype(s.dtype)


# -- sound --------------------------------------------------------------------------------------------------------


def float64_once(q, k, v, mask=None):
    """Sound: scores, softmax and P V in float64, rounded once; where masking, zeros for a query with nothing kept."""
    q64, k64, v64 = f64(q, k, v)
    return _softmax_pv(q64 @ _t(k64) / math.sqrt(q.shape[-1]), v64, mask).astype(q.dtype)


def blas_wide(q, k, v, mask=None):
    """Sound: the same in float32 for 16-bit inputs (the dtype otherwise), BLAS matmuls (np.matmul)."""
    qw, kw, vw = up(q, k, v)
    return _softmax_pv(qw @ _t(kw) / qw.dtype.type(math.sqrt(q.shape[-1])), vw, mask).astype(q.dtype)


def pairwise_scores(q, k, v, mask=None):
    """Sound: scores as (q_i * k_j).sum(-1), numpy's pairwise sum instead of BLAS, q pre-scaled by 1/sqrt(d)."""
    qw, kw, vw = up(q, k, v)
    qs = qw * qw.dtype.type(1 / math.sqrt(q.shape[-1]))
    return _softmax_pv((qs[..., :, None, :] * kw[..., None, :, :]).sum(-1), vw, mask).astype(q.dtype)


def exp2_folded_scale(q, k, v, mask=None):
    """Sound: FlashAttention's exp2 form: scores times log2(e)/sqrt(d) (one constant in the working precision),
    exp2, then P V; dividing by the sum once."""
    qw, kw, vw = up(q, k, v)
    s = qw @ _t(kw) * qw.dtype.type(LOG2E / math.sqrt(q.shape[-1]))
    keep = keep_of(mask, s.shape)
    t = np.where(keep, s, -np.inf)
    e = np.where(keep, np.exp2(t - guarded_max(t)), 0).astype(s.dtype)
    return (safe_divide(e, e.sum(axis=-1, keepdims=True)) @ vw).astype(q.dtype)


def online_tiled(q, k, v, mask=None):
    """Sound: FlashAttention-style over key blocks of 32 in float32 (the dtype for float64): running max guarded
    (0 while a query's keys so far are all masked), l and the output rescaled when the max grows, P kept in the
    working precision, one division at the end."""
    qw, kw, vw = up(q, k, v)
    s = qw @ _t(kw) / qw.dtype.type(math.sqrt(q.shape[-1]))
    t = np.where(keep_of(mask, s.shape), s, -np.inf)
    m = np.full(t.shape[:-1] + (1,), -np.inf, t.dtype)
    l = np.zeros_like(m)
    acc = np.zeros(t.shape[:-1] + (vw.shape[-1],), t.dtype)
    for i in range(0, t.shape[-1], 32):
        new = np.maximum(m, t[..., i : i + 32].max(axis=-1, keepdims=True))
        safe = np.where(new == -np.inf, 0, new).astype(t.dtype)
        alpha = np.exp(m - safe)
        p = np.exp(t[..., i : i + 32] - safe)
        l = l * alpha + p.sum(axis=-1, keepdims=True)
        acc = acc * alpha + p @ vw[..., i : i + 32, :]
        m = new
    return safe_divide(acc, l).astype(q.dtype)


# -- precision trade-offs -----------------------------------------------------------------------------------------


def p_rounded_to_dtype(q, k, v, mask=None):
    """Trade-off: scores and softmax in float32, P rounded to the 16-bit dtype before P V (float32 accumulation),
    as FlashAttention 2 does."""
    qw, kw, vw = up(q, k, v)
    return _softmax_pv(qw @ _t(kw) / np.float32(math.sqrt(q.shape[-1])), vw, mask, q.dtype).astype(q.dtype)


def softmax_in_dtype(q, k, v, mask=None):
    """Trade-off: scores in float32 rounded to the 16-bit dtype, then softmax and P V in the dtype (float32
    accumulation for the matmul)."""
    qw, kw, _ = up(q, k, v)
    s = (qw @ _t(kw) / np.float32(math.sqrt(q.shape[-1]))).astype(q.dtype)
    keep = keep_of(mask, s.shape)
    t = np.where(keep, s, -np.inf).astype(q.dtype)
    e = np.where(keep, np.exp(t - guarded_max(t)), 0).astype(q.dtype)
    p = safe_divide(e, e.sum(axis=-1, keepdims=True))
    return (p.astype(np.float32) @ v.astype(np.float32)).astype(q.dtype)


# -- defects ------------------------------------------------------------------------------------------------------


def unscaled_scores(q, k, v, mask=None):
    """Defect: scores q k^T without 1/sqrt(d) (computed in float64, rounded once)."""
    q64, k64, v64 = f64(q, k, v)
    return _softmax_pv(q64 @ _t(k64), v64, mask).astype(q.dtype)


def times_sqrt_d(q, k, v, mask=None):
    """Defect: scores multiplied by sqrt(d) instead of divided (float64, rounded once)."""
    q64, k64, v64 = f64(q, k, v)
    return _softmax_pv(q64 @ _t(k64) * math.sqrt(q.shape[-1]), v64, mask).astype(q.dtype)


def log2e_truncated(q, k, v, mask=None):
    """Defect: the exp2 form with log2(e) as 1.4427 folded into the scale (otherwise sound, float32)."""
    qw, kw, vw = up(q, k, v)
    s = qw @ _t(kw) * qw.dtype.type(1.4427 / math.sqrt(q.shape[-1]))
    keep = keep_of(mask, s.shape)
    t = np.where(keep, s, -np.inf)
    e = np.where(keep, np.exp2(t - guarded_max(t)), 0).astype(s.dtype)
    return (safe_divide(e, e.sum(axis=-1, keepdims=True)) @ vw).astype(q.dtype)


def fill_neg1e4(q, k, v, mask=None):
    """Defect: masked scores set to -1e4 in float32 (no where): a query whose kept scores are far below -1e4
    attends masked keys, and a query with nothing kept averages v."""
    qw, kw, vw = up(q, k, v)
    s = qw @ _t(kw) / np.float32(math.sqrt(q.shape[-1]))
    s = np.where(keep_of(mask, s.shape), s, np.float32(-1e4)).astype(s.dtype)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True) @ vw).astype(q.dtype)


def tiled_unguarded_max(q, k, v, mask=None):
    """Defect: the online_tiled kernel without the guard: a query whose first block of 32 keys is fully masked
    has running max -inf and exp(-inf - -inf) = NaN."""
    qw, kw, vw = up(q, k, v)
    s = qw @ _t(kw) / qw.dtype.type(math.sqrt(q.shape[-1]))
    t = np.where(keep_of(mask, s.shape), s, -np.inf)
    m = np.full(t.shape[:-1] + (1,), -np.inf, t.dtype)
    l = np.zeros_like(m)
    acc = np.zeros(t.shape[:-1] + (vw.shape[-1],), t.dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        for i in range(0, t.shape[-1], 32):
            new = np.maximum(m, t[..., i : i + 32].max(axis=-1, keepdims=True))
            alpha = np.exp(m - new)
            p = np.exp(t[..., i : i + 32] - new)
            l = l * alpha + p.sum(axis=-1, keepdims=True)
            acc = acc * alpha + p @ vw[..., i : i + 32, :]
            m = new
        return (acc / l).astype(q.dtype)


def online_no_rescale(q, k, v, mask=None):
    """Defect: the online_tiled kernel that rescales the output accumulator but not l when the max grows."""
    qw, kw, vw = up(q, k, v)
    s = qw @ _t(kw) / qw.dtype.type(math.sqrt(q.shape[-1]))
    t = np.where(keep_of(mask, s.shape), s, -np.inf)
    m = np.full(t.shape[:-1] + (1,), -np.inf, t.dtype)
    l = np.zeros_like(m)
    acc = np.zeros(t.shape[:-1] + (vw.shape[-1],), t.dtype)
    for i in range(0, t.shape[-1], 32):
        new = np.maximum(m, t[..., i : i + 32].max(axis=-1, keepdims=True))
        safe = np.where(new == -np.inf, 0, new).astype(t.dtype)
        p = np.exp(t[..., i : i + 32] - safe)
        l = l + p.sum(axis=-1, keepdims=True)  # missing: l * exp(m_old - m_new)
        acc = acc * np.exp(m - safe) + p @ vw[..., i : i + 32, :]
        m = new
    return safe_divide(acc, l).astype(q.dtype)


def mask_after_softmax(q, k, v, mask=None):
    """Defect: softmax over every key, then masked weights zeroed without renormalising (float64, rounded once)."""
    q64, k64, v64 = f64(q, k, v)
    s = q64 @ _t(k64) / math.sqrt(q.shape[-1])
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    p = np.where(keep_of(mask, s.shape), e / e.sum(axis=-1, keepdims=True), 0)
    return (p @ v64).astype(q.dtype)
