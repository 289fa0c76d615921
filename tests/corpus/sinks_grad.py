"""Attention backward implementations with learned sinks, f(q, k, v, g, sinks, mask=None, *, causal=False) ->
(dq, dk, dv, dsinks), written apart from the built-ins: each head's sink is one more key of value 0 whose score is
its logit z, P the softmax over the kept keys and the sink, D = rowsum(dP * P), dS = P (dP - D) over the keys,
dz = -sum_i P_iz D_i summed over the queries and the axes the sinks were broadcast along."""

import math

import numpy as np

from ._util import f64, keep_of, unbroadcast, up


def _t(a):
    return np.swapaxes(a, -1, -2)


def _backward(q, k, v, g, sinks, mask, causal, sink_in_d=True):
    """The backward in q's dtype (the working precision); with sink_in_d False, D is formed from the keys' weights
    renormalised without the sink (a defect below)."""
    lq, lk = q.shape[-2], k.shape[-2]
    c = q.dtype.type(1 / math.sqrt(q.shape[-1]))
    s = q @ _t(k) * c
    keep = keep_of(mask, s.shape)
    if causal:
        keep = keep & (np.arange(lk)[None, :] <= np.arange(lq)[:, None] + lk - lq)
    z = np.broadcast_to(np.asarray(sinks, s.dtype)[..., None, None], s.shape[:-1] + (1,))
    m = np.maximum(np.where(keep, s, -np.inf).max(axis=-1, keepdims=True), z)
    e = np.where(keep, np.exp(s - m), 0).astype(s.dtype)
    e_z = np.exp(z - m)
    total = e.sum(axis=-1, keepdims=True) + e_z
    p, p_z = e / total, e_z / total
    dp = g @ _t(v)
    d = (dp * p).sum(axis=-1, keepdims=True)
    ds = p * (dp - d)
    d_z = d if sink_in_d else d / (1 - p_z)
    dz = -(p_z * d_z)[..., 0].sum(axis=-1)
    grads = (ds @ k * c, _t(ds) @ q * c, _t(p) @ g, dz)
    return tuple(unbroadcast(a, np.shape(b)) for a, b in zip(grads, (q, k, v, sinks)))


def _rounded(grads, dtype):
    return tuple(np.asarray(a).astype(dtype) for a in grads)


# -- sound --------------------------------------------------------------------------------------------------------


def float64_once(q, k, v, g, sinks, mask=None, *, causal=False):
    """Sound: the whole backward in float64, each gradient rounded once."""
    return _rounded(_backward(*f64(q, k, v, g, sinks), mask, causal), q.dtype)


def wide(q, k, v, g, sinks, mask=None, *, causal=False):
    """Sound: the backward in float32 for 16-bit inputs (the dtype otherwise), BLAS matmuls."""
    return _rounded(_backward(*up(q, k, v, g, sinks), mask, causal), q.dtype)


# -- defects ------------------------------------------------------------------------------------------------------


def sink_sign_flipped(q, k, v, g, sinks, mask=None, *, causal=False):
    """Defect: dz = +sum_i P_iz D_i (float64, rounded once)."""
    *grads, dz = _backward(*f64(q, k, v, g, sinks), mask, causal)
    return _rounded((*grads, -dz), q.dtype)


def sink_d_without_sink(q, k, v, g, sinks, mask=None, *, causal=False):
    """Defect: dz from D over the keys' weights renormalised without the sink, D / (1 - P_z) (float64, rounded
    once): off by the factor 1 / (1 - P_z), large where the sink takes most of the weight."""
    return _rounded(_backward(*f64(q, k, v, g, sinks), mask, causal, sink_in_d=False), q.dtype)
