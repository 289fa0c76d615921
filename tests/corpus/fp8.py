"""FP8 kernels written apart from the built-ins and the reference: attention of FP8 inputs with float32 descales
(FlashAttention 3's convention), and the quantize step before it. Each is plain numpy and ml_dtypes, written from
the kinds' definitions (docs/fp8.md), not from softaudit's code."""

from __future__ import annotations

import ml_dtypes
import numpy as np

BLOCK = 128  # the rows of one head a per-block descale covers


def _per_query_head(descale, b, hq, hkv):
    """A descale (scalar, or one per (batch, KV head)) as (B, Hq, 1, 1): query head h reads KV head h // group's."""
    d = np.asarray(descale, np.float64)
    if d.ndim == 0:
        return np.full((b, hq, 1, 1), float(d))
    return np.repeat(d.reshape(b, hkv), hq // hkv, axis=1)[:, :, None, None]


def _attend(q8, k8, v8, descale_q, descale_k, descale_v, mask, use_descale_v=True):
    b, hq, _, d = q8.shape
    hkv = k8.shape[1]
    q = q8.astype(np.float64) * _per_query_head(descale_q, b, hq, hkv)
    k = np.repeat(k8.astype(np.float64), hq // hkv, axis=1) * _per_query_head(descale_k, b, hq, hkv)
    v = np.repeat(v8.astype(np.float64), hq // hkv, axis=1)
    if use_descale_v:
        v = v * _per_query_head(descale_v, b, hq, hkv)
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(d)
    keep = np.ones(s.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), s.shape)
    s = np.where(keep, s, -np.inf)
    top = s.max(axis=-1, keepdims=True)
    e = np.where(keep, np.exp(s - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    o = (e / np.where(total > 0, total, 1.0)) @ v  # (a query with no key: zeros)
    return o.astype(ml_dtypes.bfloat16)


def fp8_attention_float64(q8, k8, v8, descale_q, descale_k, descale_v, mask=None):
    """Sound: the inputs dequantized exactly, attention in float64 with the max shift, rounded once to bfloat16."""
    return _attend(q8, k8, v8, descale_q, descale_k, descale_v, mask)


def fp8_attention_descale_v_dropped(q8, k8, v8, descale_q, descale_k, descale_v, mask=None):
    """Defect (vLLM PR #51363's class): descale_v is never applied, so o is off by that factor wherever it is not 1."""
    return _attend(q8, k8, v8, descale_q, descale_k, descale_v, mask, use_descale_v=False)


def _groups(x, granularity):
    """amax of each group in the descale's shape, and a function spreading one value per group over x."""
    length = x.shape[2]
    a = np.abs(x)
    if granularity == "tensor":
        return a.max(initial=0.0), lambda per: np.broadcast_to(per, x.shape)
    if granularity == "head":
        return a.max(axis=(2, 3), initial=0.0), lambda per: np.broadcast_to(per[:, :, None, None], x.shape)
    blocks = -(-length // BLOCK)
    amax = np.stack([a[:, :, i * BLOCK : (i + 1) * BLOCK].max(axis=(2, 3), initial=0.0) for i in range(blocks)], -1)

    def spread(per):
        return np.broadcast_to(np.repeat(per, BLOCK, axis=-1)[..., :length, None], x.shape)

    return amax, spread


def _quantize(x, fmt, granularity, amax_of=None):
    x = np.asarray(x, np.float64)
    dtype = getattr(ml_dtypes, fmt)
    top = float(ml_dtypes.finfo(dtype).max)
    amax, spread = _groups(x, granularity)
    if amax_of is not None:
        amax = amax_of(x)
    with np.errstate(divide="ignore"):
        scale = np.where(amax > 0, (top / np.where(amax > 0, amax, 1.0)).astype(np.float32), np.float32(1))
    scale = np.minimum(scale.astype(np.float64), float(np.finfo(np.float32).max)).astype(np.float32)
    scaled = np.clip(x * spread(scale.astype(np.float64)), -top, top)  # (saturating, as cvt .satfinite)
    return scaled.astype(dtype), (1.0 / scale.astype(np.float64)).astype(np.float32)


def quantize_float64(x, fmt="float8_e4m3fn", granularity="tensor"):
    """Sound: amax per group, scale = fmt_max / amax rounded to float32 (1 for a zero amax), x scale in float64
    (exact), clipped to fmt_max and rounded once to the format; descale = 1 / scale rounded to float32."""
    return _quantize(x, fmt, granularity)


def quantize_amax_of_last_token(x, fmt="float8_e4m3fn", granularity="tensor"):
    """Defect: per head, amax taken over each head's last token only, so larger values elsewhere saturate."""
    if granularity != "head":
        return _quantize(x, fmt, granularity)
    return _quantize(x, fmt, granularity, amax_of=lambda v: np.abs(v[:, :, -1, :]).max(axis=-1))
