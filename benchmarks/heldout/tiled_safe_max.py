"""A held-out kernel (written outside softaudit, as a user would): FlashAttention-2-style forward, tiles of 64
keys, running max and sum in float32, P rounded to the input dtype before P V.

Its defect: a fully masked tile's running max is clamped to 0 (so that exp never sees -inf - -inf) and the clamped
value is kept as the running max. After a fully masked first tile the next tiles are shifted by max(0, their max)
instead of their max: where every kept score of a query is far below 0, exp(s - 0) leaves the dtype's normal range
(P in float16 below e**-9.7; the float32 sums below e**-87) and the output loses its digits or comes out 0.
"""

import numpy as np

import softaudit

BLOCK = 64


@softaudit.candidate(kind="attention", name="heldout.tiled_safe_max")
def tiled_safe_max(q, k, v, mask=None):
    dtype = q.dtype
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    lq, lk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    keep = np.ones(batch + (lq, lk), bool) if mask is None else np.broadcast_to(mask, batch + (lq, lk))
    m = np.full(batch + (lq, 1), -np.inf, np.float32)
    total = np.zeros(batch + (lq, 1), np.float32)
    acc = np.zeros(batch + (lq, v.shape[-1]), np.float32)
    scale = np.float32(1 / np.sqrt(d))
    with np.errstate(all="ignore"):
        for start in range(0, lk, BLOCK):
            s = q32 @ np.swapaxes(k32[..., start : start + BLOCK, :], -1, -2) * scale
            s = np.where(keep[..., start : start + BLOCK], s, np.float32(-np.inf))
            new_m = np.maximum(m, s.max(axis=-1, keepdims=True))
            new_m = np.where(np.isfinite(new_m), new_m, np.float32(0))  # a fully masked tile: no -inf - -inf
            alpha = np.exp(m - new_m)
            p = np.exp(s - new_m)
            total = total * alpha + p.sum(axis=-1, keepdims=True)
            acc = acc * alpha + p.astype(dtype).astype(np.float32) @ v32[..., start : start + BLOCK, :]
            m = new_m
        o = np.where(total > 0, acc / np.where(total > 0, total, 1), 0)
    return o.astype(dtype)
