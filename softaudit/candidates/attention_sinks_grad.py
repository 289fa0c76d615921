"""Built-in backward candidates with learnable sinks: (dq, dk, dv, dsinks). dq, dk, dv are attention_grad's built-ins
with the sinks; the sink's gradient dz = -sum_i P_iz D_i (its value is 0, so its dP is 0) is summed over the queries
and over the batch axes the sinks were broadcast along, in the precision each says. Each takes attention_grad's
causal, window, bias, ALiBi slopes and softcap (the cap is on the keys' scores, not on the sink's logit).
"""

from __future__ import annotations

import numpy as np

from ..adapters import candidate
from . import attention_grad
from ._ops import dtype_sum, exp, work_dtype
from .attention_grad import _unbroadcast


def _dz(p_z, d, sinks, dtype):
    """-sum over the queries of P_z D (each (..., Lq, 1)) and over the axes the sinks were broadcast along, pairwise
    in `dtype`."""
    per_entry = dtype_sum((-(p_z * d))[..., 0].astype(dtype))[..., 0]
    return _unbroadcast(per_entry, np.shape(sinks))


@candidate(kind="attention_sinks_grad", name="attention_sinks_grad.naive")
def naive(q, k, v, g, sinks, mask=None, *, causal=False, window=None, bias=None, alibi_slopes=None, softcap=None):
    """attention_grad.naive with the sinks, and dz from its P_z and D in the dtype. Weakness: as
    attention_grad.naive; P_z and D carry the dtype's rounding, and D = sum_j P_j dP_j cancels where dP takes both
    signs."""
    with np.errstate(all="ignore"):
        grads, p_z, d = attention_grad.naive_parts(q, k, v, g, mask, causal, window, bias, alibi_slopes, sinks, softcap)
        return (*grads, _dz(p_z, d, sinks, q.dtype))


@candidate(kind="attention_sinks_grad", name="attention_sinks_grad.upcast")
def upcast(q, k, v, g, sinks, mask=None, *, causal=False, window=None, bias=None, alibi_slopes=None, softcap=None):
    """Best practice: attention_grad.upcast with the sinks, and dz from its P_z and D in float32 for 16-bit inputs,
    summed in float32; each gradient rounded once. Weakness: none known."""
    with np.errstate(all="ignore"):
        grads, p_z, d = attention_grad.upcast_parts(
            q, k, v, g, mask, causal, window, bias, alibi_slopes, sinks, softcap
        )
        dz = _dz(p_z, d, sinks, work_dtype(q.dtype))
        return tuple(a.astype(q.dtype) for a in (*grads, dz))


@candidate(kind="attention_sinks_grad", name="attention_sinks_grad.flash2_b64")
def flash2_b64(q, k, v, g, sinks, mask=None, *, causal=False, window=None, bias=None, alibi_slopes=None, softcap=None):
    """attention_grad.flash2_b64 with the sinks, and dz as FlashAttention's kernels with a learnable sink form it:
    P_z = exp(z - lse) from the saved float32 lse, D = rowsum(dO * O) from the stored O, dz = -sum P_z D in float32.
    Weakness: D from the rounded O (flash2_b64's), which P_z multiplies in every query."""
    w = work_dtype(q.dtype)
    with np.errstate(all="ignore"):
        grads, lse, d = attention_grad.flash2_parts(
            q, k, v, g, mask, 64, causal, window, bias, alibi_slopes, sinks, softcap
        )
        z = np.broadcast_to(np.asarray(sinks).astype(w)[..., None, None], lse.shape)
        return (*grads, _dz(exp(z - lse), d, sinks, w).astype(q.dtype))
