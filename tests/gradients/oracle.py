"""Vector-Jacobian products in float64 numpy, written independently of the built-ins (plain formulas, numpy's own
exp and sums: float64 is ample for judging 16-bit and float32 gradients), mpmath ones for small cases, and central
finite differences of the forwards, which check the formulas themselves."""

from __future__ import annotations

import math

import mpmath
import numpy as np


def softmax(x, mask=None):
    """float64 softmax along the last axis; masked entries and fully masked rows 0."""
    x = np.asarray(x, np.float64)
    keep = np.ones(x.shape, bool) if mask is None else np.broadcast_to(mask, x.shape)
    m = np.where(keep, x, -np.inf).max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.where(keep, np.exp(x - np.where(np.isfinite(m), m, 0)), 0)
    total = e.sum(axis=-1, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1), 0)


def softmax_vjp(x, g, mask=None):
    p = softmax(x, mask)
    g = np.where(p > 0, np.asarray(g, np.float64), 0)  # (g on masked entries never counts)
    return p * (g - (g * p).sum(axis=-1, keepdims=True))


def log_softmax_vjp(x, g):
    g = np.asarray(g, np.float64)
    return g - softmax(x) * g.sum(axis=-1, keepdims=True)


def logsumexp_vjp(x, g):
    return softmax(x) * np.asarray(g, np.float64)[..., None]


def attention(q, k, v, mask=None):
    """float64 attention output and P; a query with no key to attend gives 0."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = np.einsum("...id,...jd->...ij", q, k) / math.sqrt(q.shape[-1])
    p = softmax(s, None if mask is None else np.broadcast_to(mask, s.shape))
    return np.einsum("...ij,...jd->...id", p, v), p


def attention_vjp(q, k, v, g, mask=None):
    """(dq, dk, dv) in float64, from P: dS = P (dP - rowsum(dP P)); batch axes equal (no broadcasting)."""
    q, k, v, g = (np.asarray(a, np.float64) for a in (q, k, v, g))
    _, p = attention(q, k, v, mask)
    dp = np.einsum("...id,...jd->...ij", g, v)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    c = 1 / math.sqrt(q.shape[-1])
    return (
        c * np.einsum("...ij,...jd->...id", ds, k),
        c * np.einsum("...ij,...id->...jd", ds, q),
        np.einsum("...ij,...id->...jd", p, g),
    )


def mp_softmax_vjp(row, grad, dps: int = 50):
    """softmax's VJP of one row in mpmath at `dps` digits, as floats."""
    with mpmath.workdps(dps):
        x = [mpmath.mpf(float(t)) for t in row]
        g = [mpmath.mpf(float(t)) for t in grad]
        m = max(x)
        e = [mpmath.exp(t - m) for t in x]
        total = mpmath.fsum(e)
        p = [t / total for t in e]
        dot = mpmath.fsum(a * b for a, b in zip(g, p))
        return np.array([float(pi * (gi - dot)) for pi, gi in zip(p, g)])


def central_difference(forward, x, g, h=1e-6):
    """The gradient of <g, forward(x)> with respect to x by central differences, entry by entry (float64)."""
    x = np.array(x, np.float64)
    out = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[index] += h
        down[index] -= h
        out[index] = (np.sum(g * forward(up)) - np.sum(g * forward(down))) / (2 * h)
    return out


def normwise(got, exact) -> float:
    """||got - exact|| / ||exact|| over all entries (float64); inf when got has a NaN or an inf."""
    got, exact = np.asarray(got, np.float64), np.asarray(exact, np.float64)
    if not np.isfinite(got).all():
        return math.inf
    scale = np.linalg.norm(exact)
    return float(np.linalg.norm(got - exact) / (scale if scale > 0 else 1))
