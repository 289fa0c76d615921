"""Built-in cross-entropy gradient candidates: f(logits, target, g, *, options) -> dlogits = w (p - q) per row,
q the (smoothed) one-hot target, w the row's g (g / n for a mean), with the z-loss and softcap terms where set.
Options as for `cross_entropy`."""

from __future__ import annotations

import numpy as np

from ..adapters import candidate
from ._ops import dtype_sum, exp, log, row_max, work_dtype
from .cross_entropy import capped, tanh, targets


def _weights(g, ignored, reduction, dtype):
    """Each row's weight in dtype: g per row, or g (over the rows not ignored, for a mean); 0 where ignored."""
    g = np.asarray(g).astype(dtype)
    if reduction == "none":
        w = g
    else:
        w = np.broadcast_to(g, ignored.shape)
        if reduction == "mean":
            w = w / np.array(max(int(np.count_nonzero(~ignored)), 1), dtype)
    return np.where(ignored, np.zeros((), dtype), w)


def _finish(dz, x, w, softcap, dtype, from_exp: bool = False):
    """dz times the row weights and, under a softcap, sech(x / c)**2, rounded to dtype: 1 - tanh**2 as kernels form
    it (Liger-Kernel's backward), whose cancellation loses every digit where the cap saturates (tanh rounds to 1:
    |x / c| past about 9 in float32, the exact factor 4e-8 there), or (from_exp) 4 e / (1 + e)**2 with
    e = exp(-2 |x / c|), a few roundings relative at every x."""
    d = dz.dtype
    out = dz * w[:, None]
    if softcap is not None:
        y = x.astype(d) / np.array(softcap, d)
        if from_exp:
            e = exp(np.array(-2, d) * np.abs(y))
            one_e = np.array(1, d) + e
            out = out * (np.array(4, d) * e / (one_e * one_e))
        else:
            t = tanh(y)
            out = out * (np.array(1, d) - t * t)
    return out.astype(dtype)


def _p_minus_q(p, y, v, label_smoothing, z_loss, lse, one_minus=None):
    """(1 + 2 zl lse) p - q in p's dtype; at y, p_y - (1 - eps) - eps / V, or where one_minus (1 - p_y) is given
    and p_y > eps (V - 1) / V, -(1 - p_y) + eps (V - 1) / V (+ the z-loss's term): of the two, the one whose
    roundings are the smaller (u (1 - p_y + eps (V - 1) / V) against u (p_y + q_y)). With label smoothing near 1
    the second would cancel where p_y is near eps / V, as the first does where p_y is near 1 without smoothing."""
    d = p.dtype
    rows = np.arange(len(p))
    eps = np.array(label_smoothing, d)
    a = p.copy()
    if z_loss:
        a = (np.array(1, d) + np.array(2 * z_loss, d) * lse)[:, None] * p
    a = a - eps / np.array(v, d)
    direct = a[rows, y] - (np.array(1, d) - eps)
    if one_minus is None:
        a[rows, y] = direct
    else:
        extra = np.array(2 * z_loss, d) * lse * p[rows, y] if z_loss else np.zeros(len(p), d)
        rest = np.array(label_smoothing * (v - 1) / v, d)
        a[rows, y] = np.where(p[rows, y] > rest, -one_minus + extra + rest, direct)
    return a


@candidate(kind="cross_entropy_grad", name="cross_entropy_grad.in_dtype")
def in_dtype(logits, target, g, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"):
    """softmax(x) - onehot(y) with p max-shifted and rounded to the dtype, as a fused kernel that keeps p in bf16
    (Liger-Kernel PR #1329). Weakness: p_y rounded to the dtype before 1 is subtracted: at p_y = 0.99 bf16's
    spacing (2**-8) is 20% of 1 - p_y, and p_y = 0.999 rounds to 1, a zero gradient."""
    ignored, y = targets(logits, target, ignore_index)
    with np.errstate(all="ignore"):
        x = capped(logits, softcap)
        m = row_max(x)
        e = exp(x - m)
        s = dtype_sum(e)
        p = e / s
        lse = (m + log(s))[:, 0]
        a = _p_minus_q(p, y, x.shape[1], label_smoothing, z_loss, lse)
        return _finish(a, logits, _weights(g, ignored, reduction, x.dtype), softcap, logits.dtype)


@candidate(kind="cross_entropy_grad", name="cross_entropy_grad.saved_logp")
def saved_logp(
    logits, target, g, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"
):
    """What autograd does for F.cross_entropy (log_softmax then nll_loss): log p computed in float32 for 16-bit
    dtypes and rounded to the dtype is saved, and the backward forms exp(log p) - q in float32, rounded once.
    Weakness: exp(log p_y) - 1 cancels: float32's rounding of p_y (6e-8) is all of 1 - p_y when p_y is within
    1e-7 of 1, and log p_y's rounding to a 16-bit dtype moves p_y by about |log p_y| u."""
    ignored, y = targets(logits, target, ignore_index)
    w = work_dtype(logits.dtype)
    with np.errstate(all="ignore"):
        x = capped(logits.astype(w), softcap)
        m = row_max(x)
        log_s = log(dtype_sum(exp(x - m)))
        logp = ((x - m) - log_s).astype(logits.dtype).astype(w)
        a = _p_minus_q(exp(logp), y, x.shape[1], label_smoothing, z_loss, (m + log_s)[:, 0])
        return _finish(a, logits, _weights(g, ignored, reduction, w), softcap, logits.dtype)


@candidate(kind="cross_entropy_grad", name="cross_entropy_grad.f32acc")
def f32acc(logits, target, g, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"):
    """Best practice: p in float32 for 16-bit dtypes (the dtype itself otherwise), 1 - p_y as the sum of the other
    p_j (no cancellation), times g and, under a softcap, sech(x / c)**2 from exp (no cancellation where the cap
    saturates), rounded once. Weakness: none known beyond the conditioning."""
    ignored, y = targets(logits, target, ignore_index)
    w = work_dtype(logits.dtype)
    with np.errstate(all="ignore"):
        x = capped(logits.astype(w), softcap)
        rows = np.arange(len(x))
        m = row_max(x)
        e = exp(x - m)
        s = dtype_sum(e)
        p = e / s
        others = p.copy()
        others[rows, y] = 0
        a = _p_minus_q(p, y, x.shape[1], label_smoothing, z_loss, (m + log(s))[:, 0], dtype_sum(others)[:, 0])
        out = _finish(a, logits, _weights(g, ignored, reduction, w), softcap, logits.dtype, from_exp=True)
        return np.where(ignored[:, None], np.zeros((), out.dtype), out)  # (an ignored row of NaN or -inf logits: 0)
