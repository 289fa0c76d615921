"""FP8 exactly: conversion to float8_e4m3fn / float8_e5m2 with or without saturation, the quantize step people
write before an FP8 kernel, and the exact attention of FP8 inputs with their descale factors.

Every rounding here is one rounding of an exact value: an FP8 value times a float32 one is exact in float64 (4 + 24
significand bits), so are x times a float32 scale for x of at most 24 bits; the scale's quotient fmt_max / amax and
the descale's reciprocal are rounded from rationals. Conventions (TransformerEngine's and FlashAttention 3's):
scale = RN32(fmt_max / amax), x8 = RN_fmt(x scale) with saturation at fmt_max, descale = RN32(1 / scale); a zero
amax gives scale = descale = 1 (x8 all zero), and a quotient past float32's largest value gives that value.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np

from ._formats import format_of, round_array, round_fraction

#: The FP8 formats an FP8 kernel takes, by name.
FORMATS = ("float8_e4m3fn", "float8_e5m2")
#: How a quantize step groups the values that share one scale: the whole tensor, each (batch, head) of a
#: (batch, heads, L, d) tensor (FlashAttention 3's descales), or each block of BLOCK rows of one head.
GRANULARITIES = ("tensor", "head", "block")
BLOCK = 128

_F32 = format_of("float32")
_F32_MAX = float(np.finfo(np.float32).max)


def fmt_max(fmt: str) -> float:
    """The largest finite value of an FP8 format (448 for e4m3fn, 57344 for e5m2)."""
    return float(ml_dtypes.finfo(_fp8(fmt)).max)


def _fp8(fmt: str) -> np.dtype:
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return np.dtype(getattr(ml_dtypes, fmt))


def to_fp8(values, fmt: str, saturate: bool = True) -> np.ndarray:
    """float64 values rounded once to nearest-even in the FP8 format, in its dtype. saturate: a finite value or an
    infinity past fmt_max becomes +-fmt_max (PTX's cvt .satfinite, what FP8 kernels and TransformerEngine's casts
    do); otherwise an overflow is NaN in e4m3fn (it has no infinity) and inf in e5m2 (ml_dtypes' and torch's cast).
    NaN stays NaN."""
    dt = _fp8(fmt)
    v = np.asarray(values, dtype=np.float64)
    if saturate:
        top = fmt_max(fmt)
        v = np.where(np.isnan(v), v, np.clip(v, -top, top))
    return round_array(v, format_of(dt))


def _groups(x: np.ndarray, granularity: str) -> tuple[np.ndarray, tuple]:
    """x as (groups, members) and the shape of one descale per group."""
    if granularity == "tensor":
        return x.reshape(1, -1), ()
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}")
    if x.ndim != 4:
        raise ValueError(f"per-{granularity} scaling takes x of shape (batch, heads, L, d), got shape {x.shape}")
    b, h, length, d = x.shape
    if granularity == "head":
        return x.reshape(b * h, length * d), (b, h)
    blocks = -(-length // BLOCK)
    padded = np.zeros((b, h, blocks * BLOCK, d))
    padded[:, :, :length] = x
    return padded.reshape(b * h * blocks, BLOCK * d), (b, h, blocks)


def spread(per_group: np.ndarray, x_shape: tuple, granularity: str) -> np.ndarray:
    """One value per group broadcast back onto x's elements."""
    if granularity == "tensor":
        return np.full(x_shape, per_group.reshape(()))
    b, h, length, _ = x_shape
    if granularity == "head":
        return np.broadcast_to(per_group.reshape(b, h, 1, 1), x_shape)
    rows = np.repeat(per_group.reshape(b, h, -1), BLOCK, axis=-1)[..., :length]
    return np.broadcast_to(rows[..., None], x_shape)


def scales(amax: np.ndarray, fmt: str, power_of_two: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(scale, descale) float32 for each amax: RN32(fmt_max / amax) and RN32(1 / scale), or with power_of_two the
    largest power of two at most fmt_max / amax and its exact inverse. A zero amax gives 1 and 1; a quotient past
    float32's range its largest value; a NaN or infinite amax NaN (the group is undefined)."""
    top = Fraction(fmt_max(fmt))
    scale, descale = np.empty(amax.shape), np.empty(amax.shape)
    for i, a in enumerate(np.asarray(amax, np.float64).flat):
        if not math.isfinite(a):
            scale.flat[i] = descale.flat[i] = math.nan
            continue
        if a == 0:
            scale.flat[i] = descale.flat[i] = 1.0
            continue
        quotient = top / Fraction(a)
        if power_of_two:
            e = math.floor(math.log2(quotient))  # (then corrected exactly: log2 rounds)
            while Fraction(2) ** (e + 1) <= quotient:
                e += 1
            while Fraction(2) ** e > quotient:
                e -= 1
            e = min(e, 127)
            s = math.ldexp(1.0, e)
        else:
            s = min(_rounded32(quotient), _F32_MAX)
        scale.flat[i] = s
        descale.flat[i] = _rounded32(1 / Fraction(s))
    return scale.astype(np.float32), descale.astype(np.float32)


def _rounded32(value: Fraction) -> float:
    from mpmath import libmp

    mag, negative = round_fraction(value, _F32)
    return -libmp.to_float(mag) if negative else libmp.to_float(mag)


def amax_of(x, granularity: str) -> np.ndarray:
    """The largest |x| of each group (exact), in the descale's shape."""
    x = np.asarray(x, dtype=np.float64)
    groups, shape = _groups(x, granularity)
    with np.errstate(invalid="ignore"):
        return np.abs(groups).max(axis=1, initial=0.0).reshape(shape)


def quantize(x, fmt: str, granularity: str = "tensor", power_of_two: bool = False) -> tuple:
    """The exact quantize step: (x8, descale), x8 = RN_fmt(x scale) with saturation, scale and descale per group as
    `scales` gives them (float32, in the descale's shape: () per tensor, (batch, heads) per head, (batch, heads,
    blocks) per block of BLOCK rows). A group with a NaN or infinite value is NaN throughout (undefined)."""
    x = np.asarray(x, dtype=np.float64)
    amax = amax_of(x, granularity)
    scale, descale = scales(amax, fmt, power_of_two)
    per = spread(scale.astype(np.float64), x.shape, granularity)
    with np.errstate(invalid="ignore"):
        x8 = to_fp8(x * per, fmt)  # (x of at most 24 bits times a float32: exact in float64)
    return x8, descale


def dequantize(x8, descale, heads_axis_groups: int = 1) -> np.ndarray:
    """x8 x descale exactly, in float64, for x8 (batch, heads, L, d) and descale () or (batch, KV heads): query head
    h takes KV head h // heads_axis_groups's descale (grouped-query attention, FlashAttention 3's convention)."""
    x = np.asarray(x8).astype(np.float64)
    d = np.asarray(descale).astype(np.float64)
    if d.ndim == 0:
        return x * d
    if d.ndim != 2 or x.ndim != 4 or d.shape[0] != x.shape[0] or d.shape[1] * heads_axis_groups != x.shape[1]:
        raise ValueError(f"a descale of shape {d.shape} does not fit an input of shape {x.shape}")
    return x * np.repeat(d, heads_axis_groups, axis=1)[:, :, None, None]


def attention(q8, k8, v8, descale_q, descale_k, descale_v, mask=None, *, dtype, causal=False, window=None):
    """The exact attention of the dequantized inputs as given, rounded once to `dtype` (o's): a Result (softaudit's
    attention reference on q8 descale_q, k8 descale_k, v8 descale_v, each exact in float64), and the dequantized
    (q, k, v, mask) it computed, k and v repeated over the query heads of each KV head. causal: bottom-right aligned
    (FlashAttention's); window: (left, right) keys either side of the diagonal, -1 for unbounded."""
    from . import evaluate_attention

    q8, k8 = np.asarray(q8), np.asarray(k8)
    hq, hk = q8.shape[1], k8.shape[1]
    if hq % hk:
        raise ValueError(f"q's heads ({hq}) must be a multiple of k's ({hk})")
    group = hq // hk
    q = dequantize(q8, descale_q, group)
    k = np.repeat(dequantize(k8, descale_k), group, axis=1)
    v = np.repeat(dequantize(v8, descale_v), group, axis=1)
    mask = keep_mask(q.shape[-2], k.shape[-2], mask, causal, window)
    with np.errstate(invalid="ignore"):
        return evaluate_attention(q, k, v, mask, dtype=dtype), (q, k, v, mask)


def keep_mask(lq: int, lk: int, mask=None, causal: bool = False, window=None):
    """The boolean keep mask of a causal (bottom-right) or sliding-window case, anded with `mask`; None for none."""
    if not causal and window is None:
        return mask
    i = np.arange(lq)[:, None] + (lk - lq)
    j = np.arange(lk)[None, :]
    keep = np.ones((lq, lk), bool)
    left, right = (-1, 0 if causal else -1) if window is None else window
    if causal:
        right = 0 if right < 0 else min(right, 0)
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    return keep if mask is None else keep & mask
