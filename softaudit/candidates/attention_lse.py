"""Built-in attention candidates that also return each query's log-sum-exp: f(q, k, v, mask=None, **modifiers) ->
(o, lse), as FlashAttention's forward does ("in the dtype" as in `attention`)."""

from __future__ import annotations

import numpy as np

from ..adapters import candidate
from ._ops import dtype_sum, exp, log, matmul, row_max
from .attention import _scores, _sink_weights, modified, online_with_lse, upcast_with_lse


@candidate(kind="attention_lse", name="attention_lse.naive")
def naive(q, k, v, mask=None, *, sinks=None, **modifiers):
    """Attention in the dtype (masked scores -inf), lse = max + log(sum exp(s - max)) in the dtype. Weakness: a
    query with no key gives max = -inf and -inf - -inf = NaN, for o and lse alike; o's P rounded to the dtype."""
    with np.errstate(all="ignore"):
        s, keep = modified(_scores(q, k), mask, **modifiers)
        if keep is not None:
            s = np.where(keep, s, np.array(-np.inf, s.dtype))
        if sinks is not None:
            e, sink, _ = _sink_weights(s, keep, sinks, s.dtype)
            m = np.maximum(row_max(s), np.asarray(sinks).astype(s.dtype)[..., None, None])
        else:
            m = row_max(s)
            e, sink = exp(s - m), np.zeros((), s.dtype)
        total = dtype_sum(e) + sink
        return matmul(e / total, v, q.dtype), (m + log(total))[..., 0]


@candidate(kind="attention_lse", name="attention_lse.upcast")
def upcast(q, k, v, mask=None, *, sinks=None, **modifiers):
    """Best practice: everything in float32 for 16-bit inputs, masked scores excluded with where, o = 0 and
    lse = -inf for a query with no key, each rounded once. Weakness: none known."""
    o, lse = upcast_with_lse(q, k, v, mask, sinks=sinks, **modifiers)
    return o, lse.astype(q.dtype)


@candidate(kind="attention_lse", name="attention_lse.upcast_running")
def upcast_running(q, k, v, mask=None, *, sinks=None, **modifiers):
    """Best practice in another order: `upcast` with every sum one term at a time (attention.upcast_running's
    arithmetic). In float32 and float64 its error widens best practice's. Weakness: none known."""
    o, lse = upcast_with_lse(q, k, v, mask, sinks=sinks, running=True, **modifiers)
    return o, lse.astype(q.dtype)


@candidate(kind="attention_lse", name="attention_lse.tiled_b64")
def tiled_b64(q, k, v, mask=None, **modifiers):
    """FlashAttention-style: key blocks of 64 with an online max and sum in float32, P rounded to the dtype before
    P V, lse = m + log(sum) from the running pair. Weakness: P in a 16-bit dtype (about one ulp per weight)."""
    return online_with_lse(q, k, v, mask, 64, **modifiers)
