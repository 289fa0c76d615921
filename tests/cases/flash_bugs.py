"""FlashAttention-style numpy attention kernels: one sound, the rest each with one known bug.

Every kernel walks the keys in blocks of 16 with an online softmax (a running max m, a running sum l and an
accumulator o, rescaled by exp(m_old - m_new) when the max grows), in float32 for 16-bit inputs, as FlashAttention
does on a GPU. They differ from `flash_sound` in exactly one place, named in their docstrings: the default suite's
attention families must fail every buggy one and pass the sound one (tests/cases/test_flash_bugs.py).
"""

from __future__ import annotations

import numpy as np

import softaudit

BLOCK = 16


def _causal_alignment(mask):
    """The diagonal offset of a 2-d causal mask (keys j <= i + offset kept), or None when the mask is not causal."""
    if mask is None or np.ndim(mask) != 2:
        return None
    lq, lk = np.shape(mask)
    for offset in range(-lq, lk + 1):
        if np.array_equal(mask, np.tril(np.ones((lq, lk), bool), k=offset)):
            return offset
    return None


def _flash(
    q,
    k,
    v,
    mask=None,
    *,
    scales=1,
    guard_max=True,
    max_from_zero=False,
    rescale_l=True,
    rescale_o=True,
    drop_tail=False,
    pad_tail=False,
    mask_after_max=False,
    causal_top_left=False,
    key_padding_only=False,
    zero_fully_masked=True,
    exp2=False,
):
    """The online softmax of FlashAttention over key blocks of 16; each keyword switches on one bug."""
    w = np.float64 if q.dtype == np.float64 else np.float32
    dtype = q.dtype
    q, k, v = (np.asarray(a, w) for a in (q, k, v))
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    shape = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]) + (lq,)
    if causal_top_left and _causal_alignment(mask) is not None:  # an is_causal fast path, aligned top-left
        mask = np.tril(np.ones((lq, lk), bool))
    keep = np.ones((lq, lk), bool) if mask is None else np.asarray(mask, bool)
    if key_padding_only:
        keep = keep[..., :1, :]
    keep = np.broadcast_to(keep, shape[:-1] + (lq, lk))
    scale = w(1 / np.sqrt(q.shape[-1])) ** scales
    m = np.full(shape + (1,), 0.0 if max_from_zero else -np.inf, w)
    l = np.zeros(shape + (1,), w)
    o = np.zeros(shape + (dv,), w)
    stop = lk - lk % BLOCK if drop_tail else lk
    with np.errstate(all="ignore"):
        for start in range(0, stop, BLOCK):
            kb, vb, kp = (
                k[..., start : start + BLOCK, :],
                v[..., start : start + BLOCK, :],
                keep[..., start : start + BLOCK],
            )
            if pad_tail and kb.shape[-2] < BLOCK:  # zero keys and values fill the tile, and nothing masks them
                extra = BLOCK - kb.shape[-2]
                kb = np.concatenate([kb, np.zeros(kb.shape[:-2] + (extra, kb.shape[-1]), w)], axis=-2)
                vb = np.concatenate([vb, np.zeros(vb.shape[:-2] + (extra, dv), w)], axis=-2)
                kp = np.concatenate([kp, np.ones(kp.shape[:-1] + (extra,), bool)], axis=-1)
            s = (q @ np.swapaxes(kb, -1, -2)) * scale
            if not mask_after_max:
                s = np.where(kp, s, -np.inf)
            new_m = np.maximum(m, s.max(axis=-1, keepdims=True))
            shift = np.where(np.isfinite(new_m), new_m, 0) if guard_max else new_m
            p = np.exp2(s - shift) if exp2 else np.exp(s - shift)
            if mask_after_max:
                p = np.where(kp, p, 0)
            if max_from_zero:  # the GPU's exp flushes results below the smallest normal to zero
                p = np.where(p < np.finfo(w).tiny, 0, p).astype(w)
            correction = np.exp(m - shift)
            l = (l * correction if rescale_l else l) + p.sum(axis=-1, keepdims=True)
            o = (o * correction if rescale_o else o) + p @ vb
            m = new_m
        if zero_fully_masked:
            return np.where(l > 0, o / np.where(l > 0, l, 1), 0).astype(dtype)
        return (o / l).astype(dtype)


@softaudit.candidate(kind="attention")
def flash_sound(q, k, v, mask=None):
    """Sound: blocks of 16 keys, a running max guarded against -inf (a fully masked block shifts by 0), l and o
    rescaled when the max grows, masked scores -inf before the max, zeros for a query with no key."""
    return _flash(q, k, v, mask)


@softaudit.candidate(kind="attention")
def flash_unguarded_max(q, k, v, mask=None):
    """(a) The running max is not guarded: while every key so far is masked it is -inf, exp(-inf - -inf) is NaN,
    and the final l > 0 test turns that NaN into zeros. A query whose first block of 16 keys is fully masked (left
    padding) comes out all zeros."""
    return _flash(q, k, v, mask, guard_max=False)


@softaudit.candidate(kind="attention")
def flash_max_from_zero(q, k, v, mask=None):
    """(b) The running max starts at 0, not -inf, and exp flushes subnormal results to zero (as a GPU's fast exp
    does): when every score of a query lies below about -87 (the log of float32's smallest normal) each exp is 0,
    l is 0 and the output is zeros. Any query with a score above that is right."""
    return _flash(q, k, v, mask, max_from_zero=True)


@softaudit.candidate(kind="attention")
def flash_l_not_rescaled(q, k, v, mask=None):
    """(c) The running sum l is not multiplied by exp(m_old - m_new) when the max grows: blocks before the new max
    keep weights relative to the old one, too large."""
    return _flash(q, k, v, mask, rescale_l=False)


@softaudit.candidate(kind="attention")
def flash_tail_dropped(q, k, v, mask=None):
    """(d) The loop runs over whole blocks only: the keys past the last multiple of 16 are ignored (all of them
    when Lk < 16)."""
    return _flash(q, k, v, mask, drop_tail=True)


@softaudit.candidate(kind="attention")
def flash_mask_after_max(q, k, v, mask=None):
    """(e) The mask is applied after the max: the shift is the max over masked keys too, so when a masked key's
    score lies far above every kept one, the kept keys' exp underflows and the query comes out zeros."""
    return _flash(q, k, v, mask, mask_after_max=True)


@softaudit.candidate(kind="attention")
def flash_causal_top_left(q, k, v, mask=None):
    """(f) A causal mask is recognised and replaced by the kernel's own causal path, aligned top-left (query i sees
    keys <= i) where the mask given is bottom-right (keys <= i + Lk - Lq, a KV cache): wrong when Lq != Lk."""
    return _flash(q, k, v, mask, causal_top_left=True)


@softaudit.candidate(kind="attention")
def flash_no_scale(q, k, v, mask=None):
    """(g) The scores are q k^T, without the 1/sqrt(d) scale."""
    return _flash(q, k, v, mask, scales=0)


@softaudit.candidate(kind="attention")
def flash_scale_twice(q, k, v, mask=None):
    """(h) The scale 1/sqrt(d) is applied twice (once to q by the caller's convention, once in the kernel)."""
    return _flash(q, k, v, mask, scales=2)


@softaudit.candidate(kind="attention")
def flash_o_not_rescaled(q, k, v, mask=None):
    """(i) The accumulator o is not multiplied by exp(m_old - m_new) when the max grows: the values of earlier
    blocks keep weights relative to the old max, too large."""
    return _flash(q, k, v, mask, rescale_o=False)


@softaudit.candidate(kind="attention")
def flash_fully_masked_nan(q, k, v, mask=None):
    """(j) The final o / l is not guarded: a query with no key to attend (l = 0) gives 0/0 = NaN, not zeros."""
    return _flash(q, k, v, mask, zero_fully_masked=False)


@softaudit.candidate(kind="attention")
def flash_tail_padded(q, k, v, mask=None):
    """(k) The last partial block is padded with zero keys and values to 16, and the padding is not masked: each
    padded key adds exp(0 - m) to l, shrinking the output when Lk is not a multiple of 16."""
    return _flash(q, k, v, mask, pad_tail=True)


@softaudit.candidate(kind="attention")
def flash_key_padding_only(q, k, v, mask=None):
    """(l) The mask is read as a key-padding mask: the first query's row is used for every query, right for padding
    masks, wrong for causal, sliding-window and random ones."""
    return _flash(q, k, v, mask, key_padding_only=True)


@softaudit.candidate(kind="attention")
def flash_exp2_unscaled(q, k, v, mask=None):
    """(m) exp2 in place of exp without folding log2(e) into the scale: the softmax of s ln 2, too flat."""
    return _flash(q, k, v, mask, exp2=True)


BUGGY = [name for name in dir() if name.startswith("flash_") and name != "flash_sound"]
