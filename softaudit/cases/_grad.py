"""Upstream gradients and backward-bug families for the *_grad kinds: plain functions, and the families made of them.

Each takes a numpy Generator, shapes and returns float64 arrays (the runner rounds them to the audited dtype, as
for the forward families); each docstring names its source. Upstream gradients have the forward output's shape
(x's shape for the row kinds, x's without the axis for logsumexp, (..., Lq, dv) for attention).
"""

from __future__ import annotations

import numpy as np

from .._libm import exp
from ._case import family
from ._rows import _kept


def gaussian_g(rng, shape):
    """Standard Gaussian upstream gradient: the generic case."""
    return rng.standard_normal(shape)


def cross_entropy_g(rng, x, *, log_softmax: bool = False):
    """The upstream gradient of a mean cross-entropy loss at random targets, so that the exact VJP is
    (p - onehot) / rows, the gradient every classifier trains on: -onehot / rows at a log-softmax output
    (log_softmax=True), -onehot / (p rows) at a softmax output. Rows are the leading axes."""
    x = np.asarray(x, np.float64)
    rows = int(np.prod(x.shape[:-1])) or 1
    onehot = np.zeros(x.shape)
    np.put_along_axis(onehot, rng.integers(0, x.shape[-1], x.shape[:-1])[..., None], 1.0, axis=-1)
    if log_softmax:
        return -onehot / rows
    p = exp(x - x.max(axis=-1, keepdims=True))  # (portable: numpy's own exp differs on AVX-512, and so the cases)
    p /= p.sum(axis=-1, keepdims=True)
    return -onehot / np.where(onehot > 0, p, 1) / rows


def onehot_g(rng, shape):
    """One-hot upstream gradient (one entry 1 per row): the VJP is p_k (e_k - p), one row of the Jacobian."""
    g = np.zeros(shape)
    np.put_along_axis(g, rng.integers(0, shape[-1], shape[:-1])[..., None], 1.0, axis=-1)
    return g


def constant_g(rng, shape, value: float = 1.0):
    """g constant along the row: softmax's exact VJP is 0 (the sum of p is constant), so any nonzero output is
    pure rounding error; an implementation must not amplify it."""
    return np.full(shape, value)


def wide_range_g(rng, shape, decades: int = 8):
    """g with magnitudes spread over `decades` decades (random signs): small entries beside large ones, where the
    dot <g, p> in a narrow dtype swallows the small ones."""
    return rng.choice([-1.0, 1.0], shape) * 10.0 ** rng.uniform(-decades / 2, decades / 2, shape)


# --- attention backward bug families ------------------------------------------------------------------------


def _attention(rng, q, k, dv):
    lk = k.shape[-2]
    v = rng.standard_normal(q.shape[:-2] + (lk, dv))
    g = rng.standard_normal(q.shape[:-1] + (dv,))
    return {"q": q, "k": k, "v": v, "g": g}


def similar_low_rank(rng, heads=4, lq=64, lk=128, d=64, eps=1e-4):
    """q_i = a + eps n_i, k_j = b + eps m_j (rank one plus noise, per head): after rounding to bfloat16 most scores
    sit just below their row's maximum, and FlashAttention's bfloat16 P rounds them up to 1, biasing
    D = rowsum(dO * O) (Qiu & Yao, arXiv 2510.04212). Returns q, k, v, g and no mask."""
    q = rng.standard_normal((heads, 1, d)) + eps * rng.standard_normal((heads, lq, d))
    k = rng.standard_normal((heads, 1, d)) + eps * rng.standard_normal((heads, lk, d))
    return _attention(rng, q, k, d), None


def keys_64_mod_128(rng, lq=32, lks=(64, 192, 320), d=64):
    """Key lengths of 64 mod 128 with an explicit boolean padding mask: cuDNN's SDPA backward returned NaN in
    grad_q there (PyTorch issue #196678). One case per key length: (arrays, mask)."""
    out = []
    for lk in lks:
        q, k = rng.standard_normal((1, lq, d)), rng.standard_normal((1, lk, d))
        mask = np.arange(lk) < rng.integers(lk // 2, lk + 1, lq)[:, None]
        out.append((_attention(rng, q, k, d), mask))
    return out


def constant_1000(rng, lq=16, lk=64, d=64):
    """q, k and v all the constant 1000: memory-efficient SDPA's backward gave NaN (PyTorch issue #125674). Scores
    of 1000**2 * sqrt(d) overflow float16 and bfloat16 before any shift; the exact gradient is finite (every score
    equal: uniform P, dS = 0, so dq = dk = 0 and dv = g's column sums / Lk)."""
    q, k = np.full((1, lq, d), 1000.0), np.full((1, lk, d), 1000.0)
    arrays = _attention(rng, q, k, d)
    arrays["v"] = np.full((1, lk, d), 1000.0)
    return arrays, None


def head_dim_256_causal(rng, heads=2, length=128, d=256):
    """Head dimension 256 with a causal mask: a configuration whose fused backward has been wrong (NVIDIA
    TransformerEngine issue #3216). Returns q, k, v, g and the lower-triangular mask."""
    q, k = rng.standard_normal((heads, length, d)), rng.standard_normal((heads, length, d))
    return _attention(rng, q, k, d), np.tril(np.ones((length, length), bool))


# --- the families (registered for the kinds that list them, each in its module of softaudit/kinds/) --------------
# Every forward family runs for the gradient kinds too, with a Gaussian g (Kind.upstream); these add the upstream
# gradients whose structure matters, on Gaussian logits, and the attention backward bugs above.


def _logits(kind, size, rng, scale: float = 3.0):
    x = rng.standard_normal((size.rows, size.n)) * scale
    return x, _kept(kind, rng, x)


@family("g_onehot", "One-hot upstream gradients: each row of dx is one row of softmax's Jacobian.")
def g_onehot(kind, fmt, size, rng):
    x, mask = _logits(kind, size, rng)
    return [({"x": x, "g": onehot_g(rng, x.shape)}, mask, "g one-hot")]


@family("g_cross_entropy", "g of a mean cross-entropy loss through softmax: the exact dx is (p - onehot) / rows.")
def g_cross_entropy(kind, fmt, size, rng):
    x, mask = _logits(kind, size, rng, scale=1.0)  # (p >= e**-6 / n, so 1 / (p rows) stays within float16)
    return [({"x": x, "g": cross_entropy_g(rng, x)}, mask, "g = -onehot / (p rows)")]


@family("g_constant", "g constant along each row: softmax's exact VJP is exactly 0, every nonzero is error.")
def g_constant(kind, fmt, size, rng):
    x, mask = _logits(kind, size, rng)
    return [
        ({"x": x, "g": constant_g(rng, x.shape, value)}, mask, f"g = {value:g}", {"g": value})
        for value in (1.0, 0.3, -7.5)
    ]


@family(
    "g_wide",
    "g spanning 8 decades with random signs: a narrow dot <g, p> swallows the small entries; in float16, g whose row "
    "sum overflows the dtype.",
)
def g_wide(kind, fmt, size, rng):
    x, mask = _logits(kind, size, rng)
    out = [({"x": x, "g": wide_range_g(rng, x.shape)}, mask, "|g| from 1e-4 to 1e4")]
    if fmt.name == "float16":
        # Positive g of 1/64 of float16's max: sum(g) over a row of 128 overflows float16, while the exact gradient
        # g - p sum(g) stays finite (an upstream g kept in float16 for the sum gives inf; float32 holds it).
        big = rng.uniform(0.5, 1.5, x.shape) * (fmt.max_float / 64)
        out.append(({"x": x, "g": big}, mask, "g of about float16's max / 64: its row sum overflows float16"))
    return out


@family(
    "attn_similar_low_rank",
    "Similar low-rank q and k (rank one plus 1e-4 noise): FlashAttention's bfloat16 D is "
    "biased (Qiu & Yao, arXiv 2510.04212).",
)
def attn_similar_low_rank(kind, fmt, size, rng):
    arrays, mask = similar_low_rank(rng, heads=4, lq=size.lq, lk=128, d=64)
    return [(arrays, mask, f"4 heads, Lq={size.lq}, Lk=128, d=64, eps=1e-4")]


@family(
    "attn_keys_64_mod_128",
    "Key lengths 64 mod 128 with an explicit padding mask (PyTorch #196678: cuDNN backward NaN in grad_q).",
)
def attn_keys_64_mod_128(kind, fmt, size, rng):
    return [
        (arrays, mask, f"Lk={arrays['k'].shape[-2]}, padding mask") for arrays, mask in keys_64_mod_128(rng, lq=size.lq)
    ]


@family(
    "attn_constant_1000",
    "q, k and v all 1000 (PyTorch #125674: memory-efficient backward NaN); every score equal, so dq = dk = 0 exactly.",
)
def attn_constant_1000(kind, fmt, size, rng):
    arrays, mask = constant_1000(rng, lq=size.lq)
    return [(arrays, mask, "q = k = v = 1000, Lk=64, d=64")]


@family("attn_d256_causal", "Head dimension 256 with a causal mask (TransformerEngine #3216: a wrong fused dQ).")
def attn_d256_causal(kind, fmt, size, rng):
    arrays, mask = head_dim_256_causal(rng, heads=2, length=max(size.lq, 64), d=256)
    return [(arrays, mask, f"2 heads, L={max(size.lq, 64)}, d=256, causal")]
