"""Attention backward implementations f(q, k, v, g, mask=None) -> (dq, dk, dv), g = dO: with P the where-masked
softmax of c q k^T (c = 1/sqrt(d), P = 0 for a query with nothing to attend), dV = P^T dO, dP = dO V^T,
D = rowsum(dO * O), dS = P (dP - D), dQ = c dS K, dK = c dS^T Q. A gradient is summed over the axes its input
was broadcast along (one K/V head shared by several query heads). With a tanh softcap the scores are
cap tanh(s / cap), and dS takes the cap's derivative 1 - tanh(s / cap)**2 as a factor."""

import math

import numpy as np

from ._util import f64, guarded_max, keep_of, safe_divide, unbroadcast, up


def _t(a):
    return np.swapaxes(a, -1, -2)


def _probabilities(q, k, mask, c, softcap=None):
    """(P, the cap's derivative 1 - tanh**2 of the scores, or 1 without a cap)."""
    s = q @ _t(k) * c
    sigma = 1
    if softcap is not None:
        t = np.tanh(s / softcap)
        s, sigma = softcap * t, 1 - t * t
    keep = keep_of(mask, s.shape)
    t = np.where(keep, s, -np.inf)
    e = np.where(keep, np.exp(t - guarded_max(t)), 0).astype(s.dtype)
    return safe_divide(e, e.sum(axis=-1, keepdims=True)), sigma


def _backward(
    q, k, v, g, mask, p_dtype=None, delta=None, c_dq=None, c_dk=None, p_of=None, softcap=None, derivative=True
):
    """The backward in q's dtype (the working precision), with the hooks the variants below change. softcap: P from
    the capped scores, and dS times the cap's derivative (without it where derivative is False: the defect
    softcap_derivative_dropped)."""
    c = q.dtype.type(1 / math.sqrt(q.shape[-1]))
    p, sigma = _probabilities(q, k, mask, c, softcap)
    if p_of is not None:
        p = p_of(p)
    p_v = p if p_dtype is None else p.astype(p_dtype).astype(p.dtype)
    dp = g @ _t(v)
    d = (dp * p).sum(axis=-1, keepdims=True) if delta is None else delta(p, dp, g, v)
    ds = p * (dp - d) * (sigma if derivative else 1)
    grads = (ds @ k * (c if c_dq is None else c_dq), _t(ds) @ q * (c if c_dk is None else c_dk), _t(p_v) @ g)
    return tuple(unbroadcast(a, b.shape) for a, b in zip(grads, (q, k, v)))


def _rounded(grads, dtype):
    return tuple(a.astype(dtype) for a in grads)


# -- sound --------------------------------------------------------------------------------------------------------


def float64_once(q, k, v, g, mask=None, *, softcap=None):
    """Sound: the whole backward in float64, each gradient rounded once."""
    return _rounded(_backward(*f64(q, k, v, g), mask, softcap=softcap), q.dtype)


def wide(q, k, v, g, mask=None, *, softcap=None):
    """Sound: the backward in float32 for 16-bit inputs (the dtype otherwise), BLAS matmuls."""
    return _rounded(_backward(*up(q, k, v, g), mask, softcap=softcap), q.dtype)


def delta_from_output(q, k, v, g, mask=None):
    """Sound: D = rowsum(dO * O) with O = P V recomputed (FlashAttention's form), in float32 for 16-bit inputs."""

    def delta(p, dp, g, v):
        return (g * (p @ v)).sum(axis=-1, keepdims=True)

    return _rounded(_backward(*up(q, k, v, g), mask, delta=delta), q.dtype)


# -- precision trade-off ------------------------------------------------------------------------------------------


def p_rounded_for_dv(q, k, v, g, mask=None):
    """Trade-off: the float32 backward with P rounded to the 16-bit dtype before dV = P^T dO (FlashAttention 2)."""
    return _rounded(_backward(*up(q, k, v, g), mask, p_dtype=q.dtype), q.dtype)


# -- defects ------------------------------------------------------------------------------------------------------


def missing_delta(q, k, v, g, mask=None):
    """Defect: dS = P dP, the -D term forgotten (dq and dk wrong; float64, rounded once)."""

    def delta(p, dp, g, v):
        return 0

    return _rounded(_backward(*f64(q, k, v, g), mask, delta=delta), q.dtype)


def dq_missing_scale(q, k, v, g, mask=None):
    """Defect: dQ = dS K without c = 1/sqrt(d) (float64, rounded once)."""
    return _rounded(_backward(*f64(q, k, v, g), mask, c_dq=1.0), q.dtype)


def scale_sqrt_d(q, k, v, g, mask=None):
    """Defect: dQ and dK multiplied by sqrt(d) instead of 1/sqrt(d) (float64, rounded once)."""
    root = math.sqrt(q.shape[-1])
    return _rounded(_backward(*f64(q, k, v, g), mask, c_dq=root, c_dk=root), q.dtype)


def softcap_derivative_dropped(q, k, v, g, mask=None, *, softcap=None):
    """Defect: with a tanh softcap, P from the capped scores but dS = P (dP - D) without the cap's derivative
    1 - tanh(s / cap)**2, the chain rule through the tanh forgotten (float64, rounded once): dq and dk wrong
    wherever the cap bends the scores; dv right."""
    return _rounded(_backward(*f64(q, k, v, g), mask, softcap=softcap, derivative=False), q.dtype)
