"""A held-out kernel (written outside softaudit, as a user would): gpt-oss-style attention with a learned sink
logit per head, FlashAttention-style tiles of 64 keys, running max and sum in float32, P V in float32.

Its defect: the sink joins the softmax in the last tile's epilogue, written in the branch for a whole last tile;
the branch for a partial last tile (Lk not a multiple of 64) forgets it, so there the sink drops out of the
denominator and the weights sum to 1 without it.
"""

import numpy as np

import softaudit

BLOCK = 64


@softaudit.candidate(kind="attention", name="heldout.sink_attention")
def sink_attention(q, k, v, mask=None, *, sinks=None):
    dtype = q.dtype
    q, k, v = (a.astype(np.float32) for a in (q, k, v))
    lq, lk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    m = np.full(batch + (lq, 1), -np.inf, np.float32)
    total = np.zeros(batch + (lq, 1), np.float32)
    acc = np.zeros(batch + (lq, v.shape[-1]), np.float32)
    keep = None if mask is None else np.broadcast_to(mask, batch + (lq, lk))
    with np.errstate(all="ignore"):
        for start in range(0, lk, BLOCK):
            s = q @ np.swapaxes(k[..., start : start + BLOCK, :], -1, -2) / np.float32(np.sqrt(d))
            if keep is not None:
                s = np.where(keep[..., start : start + BLOCK], s, np.float32(-np.inf))
            new_m = np.maximum(m, s.max(axis=-1, keepdims=True))
            last_whole = start + BLOCK == lk
            if sinks is not None and last_whole:  # the sink, one more logit with a value of 0
                z = np.broadcast_to(np.asarray(sinks, np.float32)[..., None, None], new_m.shape)
                new_m = np.maximum(new_m, z)
            safe = np.where(np.isfinite(new_m), new_m, np.float32(0))
            alpha = np.exp(np.where(np.isfinite(m), m, safe) - safe)
            p = np.exp(s - safe)
            total = total * alpha + p.sum(axis=-1, keepdims=True)
            acc = acc * alpha + p @ v[..., start : start + BLOCK, :]
            if sinks is not None and last_whole:
                total = total + np.exp(z - safe)
            m = new_m
        o = np.where(total > 0, acc / np.where(total > 0, total, 1), 0)
    return o.astype(dtype)
