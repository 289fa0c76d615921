"""Log-softmax f(x, axis=-1) and log-sum-exp f(x, axis=-1) implementations: sound, trade-offs, defects."""

import math

import numpy as np

from ._util import f64, up


def _shift(x, axis):
    (w,) = up(x)
    return w - w.max(axis=axis, keepdims=True)


def _others_sum_terms(t, axis):
    """exp(t) with the max's term (t is shifted: that term is exp(0) = 1) set to 0, for log1p."""
    e = np.exp(t)
    np.put_along_axis(e, np.argmax(t, axis=axis, keepdims=True), 0, axis=axis)
    return e


def _others_sum(t, axis):
    """The sum of exp(t) without the max's term, for log1p."""
    return _others_sum_terms(t, axis).sum(axis=axis, keepdims=True)


# -- log_softmax: sound -------------------------------------------------------------------------------------------


def ls_float64_once(x, axis=-1):
    """Sound: x - m - log1p(sum of the others) in float64, rounded once."""
    (w,) = f64(x)
    t = w - w.max(axis=axis, keepdims=True)
    return (t - np.log1p(_others_sum(t, axis))).astype(x.dtype)


def ls_log1p_wide(x, axis=-1):
    """Sound: x - m - log1p(sum of the others), in float32 for 16-bit inputs (the dtype otherwise)."""
    t = _shift(x, axis)
    return (t - np.log1p(_others_sum(t, axis))).astype(x.dtype)


def ls_fsum(x, axis=-1):
    """Sound: x - m - log1p(sum of the others), that sum by math.fsum (exact, rounded once)."""
    t = np.moveaxis(_shift(x, axis), axis, -1)
    e = np.moveaxis(_others_sum_terms(np.moveaxis(t, -1, axis), axis), axis, -1)
    s = np.array([math.fsum(r) for r in e.reshape(-1, e.shape[-1]).tolist()], t.dtype).reshape(t.shape[:-1] + (1,))
    return np.moveaxis(t - np.log1p(s), -1, axis).astype(x.dtype)


def ls_blas_sum(x, axis=-1):
    """Sound: x - m - log1p(sum of the others), that sum as a matrix-vector product with ones (BLAS)."""
    t = np.moveaxis(_shift(x, axis), axis, -1)
    e = np.moveaxis(_others_sum_terms(np.moveaxis(t, -1, axis), axis), axis, -1)
    return np.moveaxis(t - np.log1p(e @ np.ones((t.shape[-1], 1), t.dtype)), -1, axis).astype(x.dtype)


# -- log_softmax: precision trade-offs ----------------------------------------------------------------------------


def ls_no_log1p(x, axis=-1):
    """Trade-off: x - m - log(s) in float32 (no log1p): results below u next to a dominant entry come out 0."""
    t = _shift(x, axis)
    return (t - np.log(np.exp(t).sum(axis=axis, keepdims=True))).astype(x.dtype)


def ls_float16_in_dtype(x, axis=-1):
    """Trade-off: x - m - log(s) with every step in float16 (pairwise sum)."""
    t = x - x.max(axis=axis, keepdims=True)
    return t - np.log(np.exp(t).sum(axis=axis, keepdims=True))


# -- log_softmax: defects -----------------------------------------------------------------------------------------


def ls_log_of_softmax(x, axis=-1):
    """Defect: log(softmax(x)): -inf where p underflows (the exact result is finite), error past u near p = 1."""
    t = _shift(x, axis)
    e = np.exp(t)
    with np.errstate(divide="ignore"):
        return np.log(e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def ls_unshifted(x, axis=-1):
    """Defect: x - log(sum(exp(x))) with no max subtracted: exp overflows past log(max)."""
    (w,) = up(x)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return (w - np.log(np.exp(w).sum(axis=axis, keepdims=True))).astype(x.dtype)


def ls_ln2_truncated(x, axis=-1):
    """Defect: log(s) computed as log2(s) * 0.6931, ln(2) truncated to 4 digits (6.8e-5 relative)."""
    t = _shift(x, axis)
    return (t - np.log2(np.exp(t).sum(axis=axis, keepdims=True)) * t.dtype.type(0.6931)).astype(x.dtype)


def ls_float16_sum_overflow(x, axis=-1):
    """Defect: the sum of exp(x - m) kept in float16 (pairwise): it overflows to inf past 65504 (2**16 equal
    logits) and every output is -inf."""
    t = _shift(x, axis)
    with np.errstate(over="ignore"):
        s = np.exp(t).sum(axis=axis, keepdims=True).astype(np.float16)
    return (t - np.log(s.astype(np.float32))).astype(x.dtype)


# -- logsumexp: sound ---------------------------------------------------------------------------------------------


def lse_float64_once(x, axis=-1):
    """Sound: m + log1p(sum of the others) in float64, rounded once."""
    (w,) = f64(x)
    m = w.max(axis=axis, keepdims=True)
    out = m + np.log1p(_others_sum(w - m, axis))
    return np.squeeze(out, axis).astype(x.dtype)


def lse_reversed_sum(x, axis=-1):
    """Sound: m + log(s) in the working precision, s summed over the reversed row."""
    (w,) = up(x)
    m = w.max(axis=axis, keepdims=True)
    s = np.flip(np.exp(w - m), axis=axis).sum(axis=axis, keepdims=True)
    return np.squeeze(m + np.log(s), axis).astype(x.dtype)


def lse_fsum(x, axis=-1):
    """Sound: m + log(s), s by math.fsum."""
    (w,) = up(np.moveaxis(x, axis, -1))
    m = w.max(axis=-1)
    e = np.exp(w - m[..., None])
    s = np.array([math.fsum(r) for r in e.reshape(-1, e.shape[-1]).tolist()], w.dtype).reshape(m.shape)
    return (m + np.log(s)).astype(x.dtype)


def lse_online(x, axis=-1):
    """Sound: a streaming log-sum-exp over blocks of 32, the running sum rescaled when the max grows."""
    (w,) = up(np.moveaxis(x, axis, -1))
    m = np.full(w.shape[:-1], -np.inf, w.dtype)
    s = np.zeros(w.shape[:-1], w.dtype)
    with np.errstate(invalid="ignore"):
        for i in range(0, w.shape[-1], 32):
            new = np.maximum(m, w[..., i : i + 32].max(axis=-1))
            step = np.where(np.isfinite(new), new, 0)
            s = s * np.exp(m - step) + np.exp(w[..., i : i + 32] - step[..., None]).sum(axis=-1)
            m = new
        return (m + np.log(s)).astype(x.dtype)


# -- logsumexp: precision trade-off and defects -------------------------------------------------------------------


def lse_float16_in_dtype(x, axis=-1):
    """Trade-off: m + log(s) with every step in float16 (pairwise sum)."""
    m = x.max(axis=axis, keepdims=True)
    return np.squeeze(m + np.log(np.exp(x - m).sum(axis=axis, keepdims=True)), axis)


def lse_unshifted(x, axis=-1):
    """Defect: log(sum(exp(x))) with no max subtracted: overflows past log(max), -inf below."""
    (w,) = up(x)
    with np.errstate(over="ignore", divide="ignore"):
        return np.log(np.exp(w).sum(axis=axis)).astype(x.dtype)


def lse_online_no_rescale(x, axis=-1):
    """Defect: a streaming log-sum-exp over blocks of 32 that does not rescale the running sum when the max grows."""
    (w,) = up(np.moveaxis(x, axis, -1))
    m = np.full(w.shape[:-1], -np.inf, w.dtype)
    s = np.zeros(w.shape[:-1], w.dtype)
    with np.errstate(invalid="ignore"):
        for i in range(0, w.shape[-1], 32):
            m = np.maximum(m, w[..., i : i + 32].max(axis=-1))
            s = s + np.exp(w[..., i : i + 32] - m[..., None]).sum(axis=-1)  # missing: s * exp(m_old - m)
        return (m + np.log(s)).astype(x.dtype)


def lse_running_sum_in_dtype(x, axis=-1):
    """Defect: m + log(s) with s summed one term at a time in the 16-bit dtype (it stalls on long rows)."""
    w = np.moveaxis(x, axis, -1)
    m = w.max(axis=-1).astype(np.float32)
    e = np.exp(w.astype(np.float32) - m[..., None]).astype(x.dtype)
    s = np.zeros(w.shape[:-1], x.dtype)
    for j in range(w.shape[-1]):
        s = (s + e[..., j]).astype(x.dtype)
    return (m + np.log(s.astype(np.float32))).astype(x.dtype)


def lse_missing_max(x, axis=-1):
    """Defect: log(sum(exp(x - m))) that forgets to add m back."""
    t = _shift(x, axis)
    return np.log(np.exp(t).sum(axis=axis)).astype(x.dtype)
