"""Case families for attention: q (Lq, d), k (Lk, d), v (Lk, dv), masks (Lq, Lk), as float64."""

from __future__ import annotations

import math

import numpy as np

from ._case import family


def _qkv(rng, lq, lk, d, dv=None, scale=1.0, batch=()):
    dv = d if dv is None else dv
    return {
        "q": rng.standard_normal(batch + (lq, d)) * scale,
        "k": rng.standard_normal(batch + (lk, d)) * scale,
        "v": rng.standard_normal(batch + (lk, dv)),
    }


@family("attn_gaussian", "Gaussian q, k, v with head dimension d from 16 to 256.")
def attn_gaussian(kind, fmt, size, rng):
    return [(_qkv(rng, size.lq, 128, d), None, f"d={d}, Lq={size.lq}, Lk=128", {"d": d}) for d in size.d]


@family("attn_shapes", "Lq != Lk, a single key, and batch and head dimensions.")
def attn_shapes(kind, fmt, size, rng):
    return [
        (_qkv(rng, 5, 37, 32, dv=8), None, "Lq=5, Lk=37, d=32, dv=8"),
        (_qkv(rng, size.lq, 1, 32), None, "a single key"),
        (_qkv(rng, 6, 6, 16, batch=(2, 3)), None, "batch 2, 3 heads"),
    ]


@family("attn_long", "Long key sequences (Lk 4096 in default).")
def attn_long(kind, fmt, size, rng):
    return [(_qkv(rng, 8, lk, 64), None, f"Lk={lk}, d=64", {"lk": lk}) for lk in sorted({128, 1024, size.lk})]


@family(
    "attn_large_activations",
    "Activations large enough that unscaled scores q.k pass the dtype's max, in dtypes narrower in range than float32"
    " (float16, float8): there an upcast to float32 is the cure; bfloat16 scores that large overflow float32 too.",
)
def attn_large_activations(kind, fmt, size, rng):
    if fmt.max_float > 1e10:
        return []
    top = fmt.max_float
    d = 64
    scale = 1.5 * math.sqrt(top / math.sqrt(d))  # q.k of random signs is about sqrt(d) scale**2: past the max
    return [(_qkv(rng, size.lq, 64, d, scale=scale), None, f"|q|, |k| ~ {scale:.3g}")]


@family("attn_masks", "Padding, causal and random masks, and queries with no key to attend.")
def attn_masks(kind, fmt, size, rng):
    lq = lk = max(size.lq, 8)
    causal = np.tril(np.ones((lq, lk), bool))
    padding = np.arange(lk) < rng.integers(1, lk + 1, lq)[:, None]
    random = rng.random((lq, lk)) < 0.5
    random[:, 0] = True
    fully = random.copy()
    fully[::3] = False
    return [
        (_qkv(rng, lq, lk, 32), causal, "causal"),
        (_qkv(rng, lq, lk, 32), padding, "padding"),
        (_qkv(rng, lq, lk, 32), random, "random"),
        (_qkv(rng, lq, lk, 32), fully, "every third query fully masked"),
    ]
