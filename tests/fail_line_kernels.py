"""Sound kernels written as a user would write them in numpy (tests/test_fail_line.py): each a textbook algorithm in
another summation order or form than the built-ins (numpy's own sums, left-to-right sums, the division before or
after P V, a reciprocal, exp of x - lse). None has a defect: the fail line must let each through, in every dtype.
16-bit inputs are computed in float32 and rounded once (16-bit kernels sum in float32); float32 and float64 in the
dtype itself."""

from __future__ import annotations

import numpy as np


def _work(x):
    return np.float32 if x.dtype.itemsize < 4 else x.dtype.type


def _shifted(x):
    """x in its working type and exp(x - max), the max guarded where a row has no finite entry."""
    y = x.astype(_work(x))
    with np.errstate(invalid="ignore"):
        m = y.max(axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0).astype(y.dtype)
        return y, m, np.exp(y - m)


def _left_to_right(a):
    """The sum along the last axis one term at a time, in a's dtype (recursive summation)."""
    return np.add.accumulate(a, axis=-1)[..., -1:]


# -- softmax -------------------------------------------------------------------------------------------------------


def sm_textbook(x, axis=-1):
    """np.exp(x - max) / np.sum: numpy's own sum (blocks of 8 interleaved accumulators)."""
    _, _, e = _shifted(x)
    return (e / np.sum(e, axis=-1, keepdims=True)).astype(x.dtype)


def sm_left_to_right(x, axis=-1):
    """The sum of the exponentials one term at a time."""
    _, _, e = _shifted(x)
    return (e / _left_to_right(e)).astype(x.dtype)


def sm_reciprocal(x, axis=-1):
    """e * (1 / s): one division per row."""
    _, _, e = _shifted(x)
    return (e * (1 / np.sum(e, axis=-1, keepdims=True))).astype(x.dtype)


def sm_exp_lse(x, axis=-1):
    """exp((x - m) - log(s)): division-free."""
    y, m, e = _shifted(x)
    return np.exp((y - m) - np.log(np.sum(e, axis=-1, keepdims=True))).astype(x.dtype)


# -- log_softmax and logsumexp -------------------------------------------------------------------------------------


def ls_textbook(x, axis=-1):
    """x - m - log(s), s by numpy's sum."""
    y, m, e = _shifted(x)
    return (y - m - np.log(np.sum(e, axis=-1, keepdims=True))).astype(x.dtype)


def ls_left_to_right(x, axis=-1):
    """x - m - log(s), s one term at a time."""
    y, m, e = _shifted(x)
    return (y - m - np.log(_left_to_right(e))).astype(x.dtype)


def lse_textbook(x, axis=-1):
    """m + log(s), s by numpy's sum."""
    _, m, e = _shifted(x)
    return (m + np.log(np.sum(e, axis=-1, keepdims=True)))[..., 0].astype(x.dtype)


def lse_left_to_right(x, axis=-1):
    """m + log(s), s one term at a time."""
    _, m, e = _shifted(x)
    return (m + np.log(_left_to_right(e)))[..., 0].astype(x.dtype)


# -- softmax_grad ----------------------------------------------------------------------------------------------------


def _p(x):
    _, _, e = _shifted(x)
    return e / np.sum(e, axis=-1, keepdims=True)


def sg_textbook(x, g, axis=-1):
    """p (g - <g, p>), the dot by numpy's sum."""
    p, gw = _p(x), g.astype(_work(x))
    return (p * (gw - np.sum(gw * p, axis=-1, keepdims=True))).astype(x.dtype)


def sg_left_to_right(x, g, axis=-1):
    """p (g - <g, p>), the dot and the softmax's sum one term at a time."""
    _, _, e = _shifted(x)
    p, gw = e / _left_to_right(e), g.astype(_work(x))
    return (p * (gw - _left_to_right(gw * p))).astype(x.dtype)


def sg_exp_lse(x, g, axis=-1):
    """p = exp((x - m) - log(s)) (as from a saved log-softmax), then p g - p <g, p> (the products split)."""
    y, m, e = _shifted(x)
    p = np.exp((y - m) - np.log(np.sum(e, axis=-1, keepdims=True)))
    gw = g.astype(y.dtype)
    return (p * gw - p * np.sum(gw * p, axis=-1, keepdims=True)).astype(x.dtype)


# -- attention -------------------------------------------------------------------------------------------------------


def _scores(q, k, mask):
    w = _work(q)
    s = np.matmul(q.astype(w), np.swapaxes(k.astype(w), -1, -2)) / np.sqrt(w(q.shape[-1]))
    keep = np.ones(s.shape, bool) if mask is None else np.broadcast_to(mask, s.shape)
    s = np.where(keep, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0).astype(w)
    return np.exp(s - m), w


def at_divide_before(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d)) V, the division before P V (BLAS matmuls), zeros for a query with nothing kept."""
    e, w = _scores(q, k, mask)
    total = np.sum(e, axis=-1, keepdims=True)
    p = np.where(total > 0, e / np.where(total > 0, total, 1), 0).astype(w)
    return np.matmul(p, v.astype(w)).astype(q.dtype)


def at_divide_after(q, k, v, mask=None):
    """(e V) / s: the division after P V, as FlashAttention does."""
    e, w = _scores(q, k, mask)
    total = np.sum(e, axis=-1, keepdims=True)
    o = np.matmul(e, v.astype(w))
    return np.where(total > 0, o / np.where(total > 0, total, 1), 0).astype(q.dtype)


def at_reciprocal_left_to_right(q, k, v, mask=None):
    """e (1 / s) V with s one term at a time."""
    e, w = _scores(q, k, mask)
    total = _left_to_right(e)
    inverse = np.where(total > 0, 1 / np.where(total > 0, total, 1), 0).astype(w)
    return np.matmul(e * inverse, v.astype(w)).astype(q.dtype)


SOUND = {
    "softmax": (sm_textbook, sm_left_to_right, sm_reciprocal, sm_exp_lse),
    "log_softmax": (ls_textbook, ls_left_to_right),
    "logsumexp": (lse_textbook, lse_left_to_right),
    "softmax_grad": (sg_textbook, sg_left_to_right, sg_exp_lse),
    "attention": (at_divide_before, at_divide_after, at_reciprocal_left_to_right),
}
