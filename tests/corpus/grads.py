"""Row backward implementations: softmax_grad f(x, g, axis=-1), log_softmax_grad f(x, g, axis=-1) and
masked_softmax_grad f(x, mask, g, axis=-1) (the vector-Jacobian products dx for an upstream gradient g)."""

import math

import numpy as np

from ._util import f64, guarded_max, safe_divide, up


def _p(w, axis=-1):
    e = np.exp(w - w.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _masked_p(w, mask, axis=-1):
    t = np.where(mask, w, -np.inf)
    e = np.where(mask, np.exp(t - guarded_max(t, axis)), 0).astype(w.dtype)
    return safe_divide(e, e.sum(axis=axis, keepdims=True))


def _fsum_rows(a):
    """Each row's sum by math.fsum, keepdims, rows on the last axis."""
    return np.array([math.fsum(r) for r in a.reshape(-1, a.shape[-1]).tolist()], a.dtype).reshape(a.shape[:-1] + (1,))


# -- softmax_grad: sound ------------------------------------------------------------------------------------------


def sg_float64_once(x, g, axis=-1):
    """Sound: p (g - <g, p>) in float64, rounded once."""
    w, gw = f64(x, g)
    p = _p(w, axis)
    return (p * (gw - (gw * p).sum(axis=axis, keepdims=True))).astype(x.dtype)


def sg_split_wide(x, g, axis=-1):
    """Sound: p g - p <g, p> (the products split) in float32 for 16-bit inputs (the dtype otherwise)."""
    w, gw = up(x, g)
    p = _p(w, axis)
    pg = p * gw
    return (pg - p * pg.sum(axis=axis, keepdims=True)).astype(x.dtype)


def sg_blas_dot(x, g, axis=-1):
    """Sound: <g, p> as a batched matrix product (np.matmul), rows on the last axis."""
    w, gw = up(x, g)
    p = _p(w)
    dot = (gw[..., None, :] @ p[..., :, None])[..., 0]
    return (p * (gw - dot)).astype(x.dtype)


def sg_fsum_dot(x, g, axis=-1):
    """Sound: <g, p> by math.fsum, rounded once; the rest in the working precision."""
    w, gw = up(x, g)
    p = _p(w)
    return (p * (gw - _fsum_rows(gw * p))).astype(x.dtype)


def sg_from_lse(x, g, axis=-1):
    """Sound: p = exp(x - m - log s) (as a saved log-softmax gives it), then p (g - <g, p>)."""
    w, gw = up(x, g)
    t = w - w.max(axis=axis, keepdims=True)
    p = np.exp(t - np.log(np.exp(t).sum(axis=axis, keepdims=True)))
    return (p * (gw - (gw * p).sum(axis=axis, keepdims=True))).astype(x.dtype)


def sg_reversed_dot(x, g, axis=-1):
    """Sound: <g, p> summed over the reversed row."""
    w, gw = up(x, g)
    p = _p(w, axis)
    return (p * (gw - np.flip(gw * p, axis=axis).sum(axis=axis, keepdims=True))).astype(x.dtype)


# -- softmax_grad: trade-off and defects --------------------------------------------------------------------------


def sg_float16_in_dtype(x, g, axis=-1):
    """Trade-off: p (g - <g, p>) with every step in float16 (pairwise sums)."""
    p = _p(x, axis)
    return p * (g - (g * p).sum(axis=axis, keepdims=True))


def sg_p_times_g(x, g, axis=-1):
    """Defect: p g, the -<g, p> term forgotten (wrong by p <g, p>)."""
    w, gw = f64(x, g)
    return (_p(w, axis) * gw).astype(x.dtype)


def sg_sum_g_not_dot(x, g, axis=-1):
    """Defect: p (g - sum(g)), the sum not weighted by p."""
    w, gw = f64(x, g)
    return (_p(w, axis) * (gw - gw.sum(axis=axis, keepdims=True))).astype(x.dtype)


def sg_nan_to_num(x, g, axis=-1):
    """Defect: a sound float64 backward whose NaNs are hidden by np.nan_to_num."""
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(sg_float64_once(x, g, axis))


# -- log_softmax_grad ---------------------------------------------------------------------------------------------


def lsg_float64_once(x, g, axis=-1):
    """Sound: g - p sum(g) in float64, rounded once."""
    w, gw = f64(x, g)
    return (gw - _p(w, axis) * gw.sum(axis=axis, keepdims=True)).astype(x.dtype)


def lsg_fsum(x, g, axis=-1):
    """Sound: g - p sum(g), sum(g) by math.fsum, the rest in the working precision."""
    w, gw = up(x, g)
    return (gw - _p(w) * _fsum_rows(gw)).astype(x.dtype)


def lsg_exp_logp(x, g, axis=-1):
    """Sound: p = exp(log_softmax(x)) (the saved output's exp, as autograd does), then g - p sum(g)."""
    w, gw = up(x, g)
    t = w - w.max(axis=axis, keepdims=True)
    p = np.exp(t - np.log(np.exp(t).sum(axis=axis, keepdims=True)))
    return (gw - p * gw.sum(axis=axis, keepdims=True)).astype(x.dtype)


def lsg_float16_in_dtype(x, g, axis=-1):
    """Trade-off: g - p sum(g) with every step in float16."""
    return g - _p(x, axis) * g.sum(axis=axis, keepdims=True)


def lsg_missing_p(x, g, axis=-1):
    """Defect: g - sum(g) / n (the mean), p replaced by the uniform distribution."""
    (gw,) = f64(g)
    return (gw - gw.mean(axis=axis, keepdims=True)).astype(x.dtype)


def lsg_softmax_formula(x, g, axis=-1):
    """Defect: the softmax's backward p (g - <g, p>) used for log-softmax."""
    return sg_float64_once(x, g, axis)


# -- masked_softmax_grad ------------------------------------------------------------------------------------------


def msg_where_float64_once(x, mask, g, axis=-1):
    """Sound: p over the kept entries (where), p (g - <g, p>) in float64, exact zeros on masked entries, rounded
    once."""
    w, gw = f64(x, g)
    p = _masked_p(w, mask, axis)
    return np.where(mask, p * (gw - (gw * p).sum(axis=axis, keepdims=True)), 0).astype(x.dtype)


def msg_split_wide(x, mask, g, axis=-1):
    """Sound: p g - p <g, p> over the kept entries in float32 for 16-bit inputs (the dtype otherwise)."""
    w, gw = up(x, g)
    pg = _masked_p(w, mask, axis) * gw
    return np.where(mask, pg - _masked_p(w, mask, axis) * pg.sum(axis=axis, keepdims=True), 0).astype(x.dtype)


def msg_float16_in_dtype(x, mask, g, axis=-1):
    """Trade-off: the where backward with every step in float16."""
    p = _masked_p(x, mask, axis)
    return np.where(mask, p * (g - (g * p).sum(axis=axis, keepdims=True)), 0).astype(x.dtype)


def msg_no_mask_on_output(x, mask, g, axis=-1):
    """Defect: the softmax of where(mask, x, -1e4) differentiated with no mask on the result: masked entries of a
    row with nothing kept get a gradient (exact: 0)."""
    w, gw = f64(x, g)
    p = _p(np.where(mask, w, -1e4), axis)
    return (p * (gw - (gw * p).sum(axis=axis, keepdims=True))).astype(x.dtype)


def msg_dot_over_all(x, mask, g, axis=-1):
    """Defect: <g, p> with p the unmasked softmax (masked entries' probability in the dot), the rest right."""
    w, gw = f64(x, g)
    p = _masked_p(w, mask, axis)
    with np.errstate(over="ignore", invalid="ignore"):
        everything = _p(np.where(np.isfinite(w), w, 0), axis)
    return np.where(mask, p * (gw - (gw * everything).sum(axis=axis, keepdims=True)), 0).astype(x.dtype)


# -- logsumexp_grad (g has x's shape without the axis) ------------------------------------------------------------


def lseg_float64_once(x, g, axis=-1):
    """Sound: softmax(x) g in float64, rounded once."""
    w, gw = f64(x, g)
    return (_p(w, axis) * np.expand_dims(gw, axis)).astype(x.dtype)


def lseg_exp_minus_lse(x, g, axis=-1):
    """Sound: exp(x - lse) g, lse = m + log(s), in float32 for 16-bit inputs (the dtype otherwise): autograd's
    form from a saved log-sum-exp."""
    w, gw = up(x, g)
    m = w.max(axis=axis, keepdims=True)
    lse = m + np.log(np.exp(w - m).sum(axis=axis, keepdims=True))
    return (np.exp(w - lse) * np.expand_dims(gw, axis)).astype(x.dtype)


def lseg_unnormalised(x, g, axis=-1):
    """Defect: exp(x - m) g, the division by the sum forgotten (the max's entry gets g, all others too much)."""
    w, gw = f64(x, g)
    return (np.exp(w - w.max(axis=axis, keepdims=True)) * np.expand_dims(gw, axis)).astype(x.dtype)


def lseg_exp_x(x, g, axis=-1):
    """Defect: exp(x) / sum(exp(x)) g with no max subtracted: overflows past log(max)."""
    (w,) = up(x)
    (gw,) = up(g)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(w)
        return (e / e.sum(axis=axis, keepdims=True) * np.expand_dims(gw, axis)).astype(x.dtype)
