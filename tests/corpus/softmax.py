"""Softmax implementations f(x, axis=-1): sound variants, precision trade-offs and defects."""

import math

import numpy as np

from ._util import BF16, f64, up, wide

LOG2E = 1.4426950408889634


def _shift(x, axis):
    (w,) = up(x)
    return w - w.max(axis=axis, keepdims=True)


# -- sound --------------------------------------------------------------------------------------------------------


def pairwise_wide(x, axis=-1):
    """Sound: exp(x - max) / sum in float32 for 16-bit inputs (the dtype otherwise), numpy's pairwise sum, rounded
    once."""
    e = np.exp(_shift(x, axis))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def float64_once(x, axis=-1):
    """Sound: the whole softmax in float64, rounded once to the dtype."""
    (w,) = f64(x)
    e = np.exp(w - w.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def reversed_sum(x, axis=-1):
    """Sound: the sum taken over the reversed row (another pairwise order)."""
    e = np.exp(_shift(x, axis))
    return (e / np.flip(e, axis=axis).sum(axis=axis, keepdims=True)).astype(x.dtype)


def blocked_sum(x, axis=-1):
    """Sound: the sum in blocks of 64 (each pairwise), then the block sums added: a tiled reduction."""
    e = np.moveaxis(np.exp(_shift(x, axis)), axis, -1)
    blocks = [e[..., i : i + 64].sum(axis=-1) for i in range(0, e.shape[-1], 64)]
    total = np.sum(np.stack(blocks, axis=-1), axis=-1, keepdims=True)
    return np.moveaxis(e / total, -1, axis).astype(x.dtype)


def float64_sum(x, axis=-1):
    """Sound: exp in the working precision, only the sum accumulated in float64 (rounded to it once)."""
    e = np.exp(_shift(x, axis))
    s = e.astype(np.float64).sum(axis=axis, keepdims=True).astype(e.dtype)
    return (e / s).astype(x.dtype)


def fsum(x, axis=-1):
    """Sound: the sum by math.fsum (exact, rounded once)."""
    e = np.moveaxis(np.exp(_shift(x, axis)), axis, -1)
    s = np.array([math.fsum(r) for r in e.reshape(-1, e.shape[-1]).tolist()], e.dtype).reshape(e.shape[:-1] + (1,))
    return np.moveaxis(e / s, -1, axis).astype(x.dtype)


def reciprocal(x, axis=-1):
    """Sound: p = e * (1 / s), one division per row."""
    e = np.exp(_shift(x, axis))
    return (e * (e.dtype.type(1) / e.sum(axis=axis, keepdims=True))).astype(x.dtype)


def via_lse(x, axis=-1):
    """Sound: p = exp(x - m - log s), division-free."""
    t = _shift(x, axis)
    return np.exp(t - np.log(np.exp(t).sum(axis=axis, keepdims=True))).astype(x.dtype)


def blas_sum(x, axis=-1):
    """Sound: the sum as a matrix-vector product with ones (BLAS), rows on the last axis."""
    e = np.moveaxis(np.exp(_shift(x, axis)), axis, -1)
    s = e @ np.ones((e.shape[-1], 1), e.dtype)
    return np.moveaxis(e / s, -1, axis).astype(x.dtype)


def exp2_right(x, axis=-1):
    """Sound: exp2((x - m) log2(e)) with log2(e) rounded to the working precision, as GPU kernels compute exp."""
    t = _shift(x, axis)
    e = np.exp2(t * t.dtype.type(LOG2E))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def online_tiled(x, axis=-1):
    """Sound: online softmax over blocks of 32 (Milakov & Gimelshein), the running sum rescaled when the max grows."""
    (w,) = up(np.moveaxis(x, axis, -1))
    m = np.full(w.shape[:-1] + (1,), -np.inf, w.dtype)
    s = np.zeros(w.shape[:-1] + (1,), w.dtype)
    with np.errstate(invalid="ignore"):
        for i in range(0, w.shape[-1], 32):
            block = w[..., i : i + 32]
            new = np.maximum(m, block.max(axis=-1, keepdims=True))
            s = s * np.exp(m - new) + np.exp(block - new).sum(axis=-1, keepdims=True)
            m = new
    return np.moveaxis(np.exp(w - m) / s, -1, axis).astype(x.dtype)


# -- precision trade-offs -----------------------------------------------------------------------------------------


def float16_in_dtype(x, axis=-1):
    """Trade-off: every step in float16, numpy's pairwise sum (a 16-bit kernel without an upcast)."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def float16_reciprocal(x, axis=-1):
    """Trade-off: e * (1 / s) with every step in float16."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e * (np.float16(1) / e.sum(axis=axis, keepdims=True))


def exp_rounded_to_dtype(x, axis=-1):
    """Trade-off: exp rounded to the 16-bit dtype (a kernel storing e), then sum and division in float32."""
    e = np.exp(_shift(x, axis)).astype(x.dtype).astype(np.float32)
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


# -- defects ------------------------------------------------------------------------------------------------------


def log2e_truncated(x, axis=-1):
    """Defect: exp2((x - m) * 1.4427), log2(e) truncated to 5 digits (3.4e-6 relative, 57 u of float32)."""
    t = _shift(x, axis)
    e = np.exp2(t * t.dtype.type(1.4427))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def ln2_truncated(x, axis=-1):
    """Defect: exp(t) computed as exp2(t / 0.6931), ln(2) truncated to 4 digits (6.8e-5 relative)."""
    t = _shift(x, axis)
    e = np.exp2(t / t.dtype.type(0.6931))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def running_sum_in_dtype(x, axis=-1):
    """Defect: the sum one term at a time in the 16-bit dtype: it stalls once it is 2**p times a term."""
    w = np.moveaxis(x, axis, -1)
    e = np.exp(w.astype(np.float32) - w.max(axis=-1, keepdims=True).astype(np.float32)).astype(x.dtype)
    s = np.zeros(w.shape[:-1], x.dtype)
    for j in range(w.shape[-1]):
        s = (s + e[..., j]).astype(x.dtype)
    return np.moveaxis((e.astype(np.float32) / s[..., None].astype(np.float32)).astype(x.dtype), -1, axis)


def bfloat16_numpy_sum(x, axis=-1):
    """Defect: exp(x - m) in bfloat16 summed by numpy's .sum, which for an ml_dtypes bfloat16 array is a running
    sum in bfloat16 (it stalls on long rows)."""
    e = np.exp(x - x.max(axis=axis, keepdims=True)).astype(BF16)
    return e / e.sum(axis=axis, keepdims=True)


def unshifted(x, axis=-1):
    """Defect: exp(x) / sum(exp(x)) with no max subtracted: exp overflows past log(max) (and underflows)."""
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x.astype(wide(x.dtype)))
        return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def float16_sum_overflow(x, axis=-1):
    """Defect: exp(x - m) in float32 but the sum kept in float16, where it overflows past 65504 (2**16 equal
    logits), so every probability comes out 0."""
    e = np.exp(_shift(x, axis))
    with np.errstate(over="ignore"):
        s = e.sum(axis=axis, keepdims=True).astype(np.float16).astype(np.float32)
    return (e / s).astype(x.dtype)


def schraudolph_exp(x, axis=-1):
    """Defect: exp by Schraudolph's bit trick (2**23 t / ln 2 + bias written as a float32's bits): a few percent
    off."""
    t = np.maximum(_shift(x, axis).astype(np.float32), -87)
    bits = (np.float32(2**23 / math.log(2)) * t + np.float32(127 * 2**23 - 486411)).astype(np.int32)
    e = bits.view(np.float32)
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def nan_to_num(x, axis=-1):
    """Defect: a sound softmax whose NaNs are hidden by np.nan_to_num (a NaN logit gives finite probabilities)."""
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(pairwise_wide(x, axis))


def online_no_rescale(x, axis=-1):
    """Defect: online softmax over blocks of 32 that does not rescale the running sum when the max grows."""
    (w,) = up(np.moveaxis(x, axis, -1))
    m = np.full(w.shape[:-1] + (1,), -np.inf, w.dtype)
    s = np.zeros(w.shape[:-1] + (1,), w.dtype)
    with np.errstate(invalid="ignore"):
        for i in range(0, w.shape[-1], 32):
            m = np.maximum(m, w[..., i : i + 32].max(axis=-1, keepdims=True))
            s = s + np.exp(w[..., i : i + 32] - m).sum(axis=-1, keepdims=True)  # missing: s * exp(m_old - m)
    return np.moveaxis(np.exp(w - m) / s, -1, axis).astype(x.dtype)
