"""Masked softmax implementations f(x, mask, axis=-1) (mask True = kept): sound, a trade-off, defects."""

import numpy as np

from ._util import f64, guarded_max, safe_divide, up


def _kept_exp(w, mask, axis):
    t = np.where(mask, w, -np.inf)
    return np.where(mask, np.exp(t - guarded_max(t, axis)), 0).astype(w.dtype)


# -- sound --------------------------------------------------------------------------------------------------------


def where_float64_once(x, mask, axis=-1):
    """Sound: exp only where kept (max over the kept entries), in float64, zeros for a row with nothing kept,
    rounded once."""
    e = _kept_exp(*f64(x), mask, axis)
    return safe_divide(e, e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def where_wide(x, mask, axis=-1):
    """Sound: the same in float32 for 16-bit inputs (the dtype otherwise), numpy's pairwise sum."""
    e = _kept_exp(*up(x), mask, axis)
    return safe_divide(e, e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def exp_times_mask(x, mask, axis=-1):
    """Sound: exp(where(mask, x, -inf) - guarded max) * mask, then a guarded division (a multiplicative mask on
    exp, after the masked scores are excluded from the max)."""
    (w,) = up(x)
    t = np.where(mask, w, -np.inf)
    e = np.exp(t - guarded_max(t, axis)) * mask
    return safe_divide(e, e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def reciprocal_blas(x, mask, axis=-1):
    """Sound: kept exps times 1 / s, s as a matrix-vector product with ones (BLAS); rows on the last axis."""
    e = np.moveaxis(_kept_exp(*up(x), mask, axis), axis, -1)
    s = e @ np.ones((e.shape[-1], 1), e.dtype)
    with np.errstate(divide="ignore"):
        inv = np.where(s > 0, e.dtype.type(1) / np.where(s > 0, s, 1), 0).astype(e.dtype)
    return np.moveaxis(e * inv, -1, axis).astype(x.dtype)


# -- precision trade-off ------------------------------------------------------------------------------------------


def where_float16_in_dtype(x, mask, axis=-1):
    """Trade-off: the where idiom with every step in float16."""
    e = _kept_exp(x, mask, axis)
    return safe_divide(e, e.sum(axis=axis, keepdims=True))


# -- defects ------------------------------------------------------------------------------------------------------


def fill_neg1e4(x, mask, axis=-1):
    """Defect: masked logits set to -1e4 in float32: a kept logit below about -1e4 + log(n) gives way to masked
    entries, and a row with nothing kept is uniform."""
    (w,) = up(x)
    t = np.where(mask, w, np.float32(-1e4)).astype(w.dtype)
    e = np.exp(t - t.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def mask_after_softmax(x, mask, axis=-1):
    """Defect: softmax over every entry, then masked entries zeroed without renormalising (rows sum below 1)."""
    (w,) = up(x)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(w - w.max(axis=axis, keepdims=True))
        return np.where(mask, e / e.sum(axis=axis, keepdims=True), 0).astype(x.dtype)


def sum_includes_masked(x, mask, axis=-1):
    """Defect: exp only where kept in the numerator, but the sum taken over every entry's exp (masked ones too),
    with the max over the kept entries."""
    (w,) = up(x)
    t = np.where(mask, w, -np.inf)
    with np.errstate(over="ignore", invalid="ignore"):
        m = guarded_max(t, axis)
        s = np.exp(np.minimum(w - m, 80)).sum(axis=axis, keepdims=True)
        return safe_divide(np.where(mask, np.exp(t - m), 0).astype(w.dtype), s).astype(x.dtype)


def finfo_min_fill(x, mask, axis=-1):
    """Defect: masked logits set to the dtype's most negative value: a row with nothing kept comes out uniform
    (every entry equals the fill), not zeros."""
    (w,) = up(x)
    t = np.where(mask, w, np.finfo(w.dtype).min)
    e = np.exp(t - t.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def nan_to_num_masked(x, mask, axis=-1):
    """Defect: a -inf fill whose 0 / 0 rows are cleaned by np.nan_to_num: right for fully masked rows, but a NaN
    among the kept logits is hidden too."""
    (w,) = up(x)
    t = np.where(mask, w, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(t - t.max(axis=axis, keepdims=True))
        return np.nan_to_num(e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)
