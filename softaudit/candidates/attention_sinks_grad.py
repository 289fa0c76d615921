"""Built-in backward candidates with learnable sinks: (dq, dk, dv, dsinks). dq, dk, dv are attention_grad's built-ins
with the sinks; the sink's gradient dz = -sum_i P_iz D_i (its value is 0, so its dP is 0) is summed over the queries
and over the batch axes the sinks were broadcast along, in the precision each says. Each takes attention_grad's
causal, window, bias and ALiBi slopes.
"""

from __future__ import annotations

import numpy as np

from ..adapters import candidate
from . import attention_grad
from ._ops import dtype_sum, exp, matmul, work_dtype
from .attention_grad import _saved_lse, _t, _unbroadcast, flash2_delta


def _dz(p_z, d, sinks, dtype):
    """-sum over the queries of P_z D (each (..., Lq, 1)) and over the axes the sinks were broadcast along, pairwise
    in `dtype`."""
    per_entry = dtype_sum((-(p_z * d))[..., 0].astype(dtype))[..., 0]
    return _unbroadcast(per_entry, np.shape(sinks))


@candidate(kind="attention_sinks_grad", name="attention_sinks_grad.naive")
def naive(q, k, v, g, sinks, mask=None, *, causal=False, window=None, bias=None, alibi_slopes=None):
    """attention_grad.naive with the sinks, and dz from P_z and D in the dtype. Weakness: as attention_grad.naive;
    P_z and D carry the dtype's rounding, and D = sum_j P_j dP_j cancels where dP takes both signs."""
    modifiers = {"causal": causal, "window": window, "bias": bias, "alibi_slopes": alibi_slopes}
    grads = attention_grad.naive(q, k, v, g, mask, sinks=sinks, **modifiers)
    with np.errstate(all="ignore"):
        p, p_z, _ = attention_grad.naive_weights(q, k, mask, sinks=sinks, **modifiers)
        dp = matmul(g.astype(q.dtype), _t(v), q.dtype)
        return (*grads, _dz(p_z, dtype_sum(dp * p), sinks, q.dtype))


@candidate(kind="attention_sinks_grad", name="attention_sinks_grad.upcast")
def upcast(q, k, v, g, sinks, mask=None, *, causal=False, window=None, bias=None, alibi_slopes=None):
    """Best practice: attention_grad.upcast with the sinks, and dz from P_z and D in float32 for 16-bit inputs,
    summed in float32 and rounded once. Weakness: none known."""
    modifiers = {"causal": causal, "window": window, "bias": bias, "alibi_slopes": alibi_slopes}
    grads = attention_grad.upcast(q, k, v, g, mask, sinks=sinks, **modifiers)
    w = work_dtype(q.dtype)
    with np.errstate(all="ignore"):
        p, p_z, _ = attention_grad.upcast_weights(q, k, mask, sinks=sinks, **modifiers)
        dp = matmul(g.astype(w), _t(v.astype(w)), w)
        return (*grads, _dz(p_z, dtype_sum(dp * p), sinks, w).astype(q.dtype))


@candidate(kind="attention_sinks_grad", name="attention_sinks_grad.flash2_b64")
def flash2_b64(q, k, v, g, sinks, mask=None, *, causal=False, window=None, bias=None, alibi_slopes=None):
    """attention_grad.flash2_b64 with the sinks, and dz as FlashAttention's kernels with a learnable sink form it:
    P_z = exp(z - lse) from the saved float32 lse, D = rowsum(dO * O) from the stored O, dz = -sum P_z D in float32.
    Weakness: D from the rounded O (flash2_b64's), which P_z multiplies in every query."""
    modifiers = {"causal": causal, "window": window, "bias": bias, "alibi_slopes": alibi_slopes}
    grads = attention_grad.flash2_b64(q, k, v, g, mask, sinks=sinks, **modifiers)
    w = work_dtype(q.dtype)
    with np.errstate(all="ignore"):
        extra, keep = attention_grad.additive(q, k, mask, causal, window, bias, alibi_slopes)
        lse = _saved_lse(q, k, keep, 64, extra, sinks)
        d = flash2_delta(q, k, v, g, keep, 64, bias=bias, alibi_slopes=alibi_slopes, sinks=sinks)
        z = np.broadcast_to(np.asarray(sinks).astype(w)[..., None, None], lse.shape)
        return (*grads, _dz(exp(z - lse), d, sinks, w).astype(q.dtype))
