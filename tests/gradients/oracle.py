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


def capped_attention_vjp(q, k, v, g, softcap, keep=None, bias=None, sinks=None, derivative=True):
    """(dq, dk, dv, and dsinks with sinks) in float64 of attention with a tanh softcap, from the plain formulas:
    s = c q.k, f = cap tanh(s / cap) + bias, P the softmax of f over the kept keys (and the sink: one more key of
    value 0 and score z), dP = g v^T, D = rowsum(P dP), dS = sigma P (dP - D) with sigma = sech(s / cap)**2,
    dq = c dS k, dk = c dS^T q, dv = P^T g, dz = -sum_i P_iz D_i. Batch axes equal, sinks of the batch's shape; a
    query with nothing to attend gives 0. derivative=False drops sigma (the defect the tests must tell apart)."""
    q, k, v, g = (np.asarray(a, np.float64) for a in (q, k, v, g))
    c = 1 / math.sqrt(q.shape[-1])
    s = np.einsum("...id,...jd->...ij", q, k) * c
    f = softcap * np.tanh(s / softcap) + (0 if bias is None else bias)
    keep = np.broadcast_to(True if keep is None else keep, f.shape)
    m = np.where(keep, f, -np.inf).max(axis=-1, keepdims=True)
    z = None if sinks is None else np.asarray(sinks, np.float64)[..., None, None]
    if z is not None:
        m = np.maximum(m, z)
    m = np.where(np.isfinite(m), m, 0)
    e = np.where(keep, np.exp(f - m), 0)
    e_z = 0 if z is None else np.exp(z - m)
    total = e.sum(axis=-1, keepdims=True) + e_z
    p, p_z = e / np.where(total > 0, total, 1), e_z / np.where(total > 0, total, 1)
    dp = np.einsum("...id,...jd->...ij", g, v)
    d = (p * dp).sum(axis=-1, keepdims=True)
    ds = p * (dp - d) * (1 / np.cosh(s / softcap) ** 2 if derivative else 1)
    grads = (
        c * np.einsum("...ij,...jd->...id", ds, k),
        c * np.einsum("...ij,...id->...jd", ds, q),
        np.einsum("...ij,...id->...jd", p, g),
    )
    return grads if z is None else (*grads, -(p_z * d).sum(axis=(-2, -1)))


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


def _mp_queries(q, k, v, g, keep, bias, sink):
    """Per query of one batch entry, at mpmath's working precision: (i, its kept keys, P over them, the sink's
    share P_z (0 without one), dP over them, c and the inputs as mpf rows Q, K, G) from the plain formulas: P over
    the kept keys and the sink of c q.k + b, dP = g v^T (the sink's value, 0, gives dP 0)."""
    lq, d = np.shape(q)
    lk = np.shape(k)[0]
    keep = np.ones((lq, lk), bool) if keep is None else np.asarray(keep, bool)
    c = 1 / mpmath.sqrt(d)
    Q, K, V, G = ([[mpmath.mpf(float(x)) for x in row] for row in np.asarray(a, np.float64)] for a in (q, k, v, g))
    for i in range(lq):
        cols = [j for j in range(lk) if keep[i, j]]
        s = {j: c * mpmath.fsum(a * b for a, b in zip(Q[i], K[j])) for j in cols}
        if bias is not None:
            s = {j: s[j] + mpmath.mpf(float(bias[i][j])) for j in cols}
        e = {j: mpmath.exp(s[j]) for j in cols}
        sink_e = 0 if sink is None else mpmath.exp(mpmath.mpf(float(sink)))
        total = mpmath.fsum(e.values()) + sink_e
        if not total:
            continue
        p = {j: e[j] / total for j in cols}
        dp = {j: mpmath.fsum(a * b for a, b in zip(G[i], V[j])) for j in cols}
        yield i, cols, p, sink_e / total, dp, c, (Q, K, G)


def mp_attention_vjp(q, k, v, g, keep=None, bias=None, sinks=None, dps: int = 60):
    """attention's (dq, dk, dv) of one batch entry in mpmath at `dps` digits, as float64 (q (Lq, d), k and v (Lk, .),
    keep and bias (Lq, Lk), sinks a scalar logit: one more key of value 0 every query attends): dS = P (dP - sum P
    dP), dq = c dS k, dk = c dS^T q, dv = P^T g. A query with nothing kept gives 0."""
    lq, d = np.shape(q)
    lk, dv_width = np.shape(k)[0], np.shape(v)[1]
    with mpmath.workdps(dps):
        dq = [[mpmath.mpf(0)] * d for _ in range(lq)]
        dk = [[mpmath.mpf(0)] * d for _ in range(lk)]
        dv = [[mpmath.mpf(0)] * dv_width for _ in range(lk)]
        for i, cols, p, _, dp, c, (Q, K, G) in _mp_queries(q, k, v, g, keep, bias, sinks):
            mean = mpmath.fsum(p[j] * dp[j] for j in cols)  # the sink's dP is 0
            for j in cols:
                ds = p[j] * (dp[j] - mean)
                for t in range(d):
                    dq[i][t] += c * ds * K[j][t]
                    dk[j][t] += c * ds * Q[i][t]
                for t in range(dv_width):
                    dv[j][t] += p[j] * G[i][t]
        return tuple(np.array([[float(x) for x in row] for row in a]) for a in (dq, dk, dv))


def mp_sinks_vjp(q, k, v, g, sink, keep=None, bias=None, dps: int = 60):
    """d L / d z for one batch entry's sink logit z in mpmath at `dps` digits, as a float64: each query's
    dS_iz = P_iz (0 - sum_j P_ij dP_ij) (its dP is 0), summed."""
    with mpmath.workdps(dps):
        total = mpmath.fsum(
            p_z * (0 - mpmath.fsum(p[j] * dp[j] for j in cols))
            for _, cols, p, p_z, dp, _, _ in _mp_queries(q, k, v, g, keep, bias, sink)
        )
        return float(total)
