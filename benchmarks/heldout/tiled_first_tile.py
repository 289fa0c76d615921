"""A held-out kernel (written outside softaudit, as a user would): FlashAttention-2-style forward, tiles of 64
keys, running max and sum in float32, P rounded to the input dtype before P V.

Its defect: the running max is guarded (a fully masked tile's -inf replaced before exp) only on the first tile,
where the state is initialised; a later tile meets m = -inf when every tile before it was fully masked for a query
(a long left padding), and exp(-inf - -inf) is NaN: that query's output is lost (0).
"""

import numpy as np

import softaudit

BLOCK = 64


@softaudit.candidate(kind="attention", name="heldout.tiled_first_tile")
def tiled_first_tile(q, k, v, mask=None):
    dtype = q.dtype
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    lq, lk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    keep = np.ones(batch + (lq, lk), bool) if mask is None else np.broadcast_to(mask, batch + (lq, lk))
    scale = np.float32(1 / np.sqrt(d))
    with np.errstate(all="ignore"):
        for start in range(0, lk, BLOCK):
            s = q32 @ np.swapaxes(k32[..., start : start + BLOCK, :], -1, -2) * scale
            s = np.where(keep[..., start : start + BLOCK], s, np.float32(-np.inf))
            vb = v32[..., start : start + BLOCK, :]
            if start == 0:  # the state starts from the first tile; a fully masked one gives m = -inf, guarded
                m = s.max(axis=-1, keepdims=True)
                p = np.exp(s - np.where(np.isfinite(m), m, np.float32(0)))
                total = p.sum(axis=-1, keepdims=True)
                acc = p.astype(dtype).astype(np.float32) @ vb
                continue
            new_m = np.maximum(m, s.max(axis=-1, keepdims=True))
            alpha = np.exp(m - new_m)
            p = np.exp(s - new_m)
            total = total * alpha + p.sum(axis=-1, keepdims=True)
            acc = acc * alpha + p.astype(dtype).astype(np.float32) @ vb
            m = new_m
        o = np.where(total > 0, acc / np.where(total > 0, total, 1), 0)
    return o.astype(dtype)
