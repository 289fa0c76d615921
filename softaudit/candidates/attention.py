"""Built-in attention candidates: o = softmax(q k^T / sqrt(d), masked) v.

"In the dtype" means elementwise work rounded to the dtype (exp the portable one of `_ops`, sums pairwise in the
dtype) and matrix products accumulated in float32 (float64 for float64) and rounded once to the dtype, as tensor
cores and cuBLAS do by default; `_ops.matmul` adds the products pairwise, the same bits on every CPU.
"""

from __future__ import annotations

import numpy as np

from ..adapters import candidate
from ._ops import const, dtype_sum, exp, log, matmul, row_max, running_matmul, running_sum, work_dtype
from .cross_entropy import tanh


def _scores(q, k):
    scale = const(1 / np.sqrt(q.shape[-1]), q.dtype)
    return matmul(q, np.swapaxes(k, -1, -2), q.dtype) * scale


def modified(s, mask, *, bias=None, alibi_slopes=None, softcap=None, causal=False, window=None):
    """The score modifiers (softaudit.kinds' attention MODIFIERS) on scores s (..., Lq, Lk) in s's dtype: the cap
    c tanh(s / c), then the bias and ALiBi's -slope |i + Lk - Lq - j|; and the keys each query may attend (mask,
    causal and window, bottom-right aligned), or None for all."""
    d = s.dtype
    lq, lk = s.shape[-2], s.shape[-1]
    offset = np.arange(lk)[None, :] - (np.arange(lq)[:, None] + lk - lq)
    if softcap is not None:
        s = cap_scores(s, softcap)[0]
    if bias is not None:
        s = s + np.asarray(bias).astype(d)
    if alibi_slopes is not None:
        s = s - np.asarray(alibi_slopes).astype(d)[:, None, None] * np.abs(offset).astype(d)
    return s, kept_keys(mask, lq, lk, causal, window)


def cap_scores(s, softcap):
    """(c tanh(s / c), the tanh) in s's dtype, c = softcap rounded to it: the cap as `modified` applies it, and the
    tanh from which a backward forms the cap's derivative (FlashAttention's keeps it for that)."""
    c = const(softcap, s.dtype)
    t = tanh(s / c)
    return c * t, t


def kept_keys(mask, lq: int, lk: int, causal=False, window=None):
    """The keys each of lq queries may attend among lk: the mask with causal and window (bottom-right aligned: key j
    against query i + Lk - Lq), or None for all."""
    offset = np.arange(lk)[None, :] - (np.arange(lq)[:, None] + lk - lq)
    keep = None if mask is None else np.asarray(mask, bool)
    if causal:
        keep = offset <= 0 if keep is None else keep & (offset <= 0)
    if window is not None:
        left, right = window
        inside = ((offset >= -left) | (left < 0)) & ((offset <= right) | (right < 0))
        keep = inside if keep is None else keep & inside
    return keep


def _sink_weights(s, keep, sinks, d):
    """exp(s - m) over the kept scores, the sink's exp(z - m), and m, the largest of both (0 for none)."""
    kept = np.ones(s.shape, bool) if keep is None else np.broadcast_to(keep, s.shape)
    # (-inf in the dtype: a Python float beside bfloat16 would make every step below float64)
    m = np.where(kept, s, const(-np.inf, d)).max(axis=-1, keepdims=True, initial=const(-np.inf, d))
    z = None if sinks is None else np.broadcast_to(np.asarray(sinks).astype(d)[..., None, None], m.shape)
    if z is not None:
        m = np.maximum(m, z)
    m = np.where(np.isfinite(m), m, np.zeros((), d))
    e = np.where(kept, exp(s - m), np.zeros((), d))
    return e, (np.zeros(m.shape, d) if z is None else exp(z - m)), m


def naive_attention(fill, name: str, weakness: str):
    """Attention in the dtype with masked scores set to `fill` (written in the dtype; "finfo_min" allowed)."""

    def attend(q, k, v, mask=None, **modifiers):
        with np.errstate(all="ignore"):
            s, keep = modified(_scores(q, k), mask, **{n: a for n, a in modifiers.items() if n != "sinks"})
            if keep is not None:
                s = np.where(keep, s, const(fill if fill == "finfo_min" else float(fill), s.dtype))
            if modifiers.get("sinks") is not None:
                e, sink, _ = _sink_weights(s, None, modifiers["sinks"], s.dtype)
                return matmul(e / (dtype_sum(e) + sink), v, q.dtype)
            e = exp(s - row_max(s))
            return matmul(e / dtype_sum(e), v, q.dtype)

    attend.__name__ = attend.__qualname__ = name
    attend.__doc__ = f"Attention in the dtype, masked scores set to {fill}. Weakness: {weakness}"
    return candidate(attend, kind="attention", name=f"attention.{name}")


naive = naive_attention(
    "-inf",
    "naive",
    "scores q.k can overflow a 16-bit dtype (|q||k| d above 65504 in float16); a fully masked row gives NaN.",
)
naive_fill_neg1e9 = naive_attention("-1e9", "naive_fill_neg1e9", "-1e9 is -inf in float16: fully masked rows give NaN.")
naive_fill_neg1e4 = naive_attention(
    "-1e4", "naive_fill_neg1e4", "scores below about -1e4 lose probability to masked keys; fully masked rows average v."
)
naive_fill_finfo_min = naive_attention(
    "finfo_min", "naive_fill_finfo_min", "fully masked rows average v (every score equals the fill)."
)


@candidate(kind="attention", name="attention.upcast")
def upcast(q, k, v, mask=None, *, sinks=None, **modifiers):
    """Best practice: everything in float32 for 16-bit inputs, masked scores excluded with where, zeros for a
    fully masked row, rounded once; every modifier (softcap, bias, ALiBi, causal, window, sinks). Weakness: none
    known."""
    return upcast_with_lse(q, k, v, mask, sinks=sinks, **modifiers)[0]


@candidate(kind="attention", name="attention.upcast_running")
def upcast_running(q, k, v, mask=None, *, sinks=None, **modifiers):
    """Best practice in another order: `upcast` with the scores, the softmax's sum and P V each added one term at a
    time (as a loop kernel adds them), in float32 for 16-bit inputs and in the dtype otherwise. In float32 and float64
    its error widens best practice's (softaudit.prepare.PRACTICE_BITS): one summation order's luck is no trade-off.
    Weakness: none known."""
    return upcast_with_lse(q, k, v, mask, sinks=sinks, running=True, **modifiers)[0]


def upcast_with_lse(q, k, v, mask=None, *, sinks=None, running=False, **modifiers):
    """`upcast`'s output (rounded to q's dtype) and each query's lse = m + log(sum) in the working dtype (-inf for
    a query with no key), from the same weights; running: every sum one term at a time (`upcast_running`)."""
    w = work_dtype(q.dtype)
    q32, k32, v32 = (a.astype(w) for a in (q, k, v))
    product, add = (running_matmul, running_sum) if running else (matmul, dtype_sum)
    with np.errstate(all="ignore"):
        s = product(q32, np.swapaxes(k32, -1, -2), w) / np.sqrt(w.type(q.shape[-1]))
        s, keep = modified(s, mask, **modifiers)
        e, sink, m = _sink_weights(s, keep, sinks, w)
        total = add(e) + sink
        p = np.where(total > 0, e / np.where(total > 0, total, 1), 0)
        lse = np.where(total > 0, m + log(np.where(total > 0, total, 1)), -np.inf)[..., 0]
        return product(p, v32, q.dtype), lse


def tiled_attention(block: int = 64):
    """FlashAttention-style attention over key blocks of `block`, with an online softmax."""

    def tiled(q, k, v, mask=None, **modifiers):
        """FlashAttention-style: key blocks of {block}, running max and sum in float32, P rounded to the input dtype
        before the P V product (as FlashAttention 2 does), zeros for fully masked rows; every modifier. Weakness: P
        in a 16-bit dtype adds about one ulp of the dtype per weight."""
        return _online(q, k, v, mask, block, **modifiers)

    tiled.__doc__ = tiled.__doc__.format(block=block)
    tiled.__name__ = tiled.__qualname__ = f"tiled_b{block}"
    return candidate(tiled, kind="attention", name=f"attention.tiled_b{block}")


tiled_b64 = tiled_attention(64)


@candidate(kind="attention", name="attention.split_kv")
def split_kv(q, k, v, mask=None, *, num_splits=None):
    """tiled_b64's arithmetic with each query's keys cut into num_splits blocks, by default 16 // (batch x heads)
    (at least one), as split-KV (flash-decoding) heuristics choose them to fill the machine. Weakness: not
    batch-invariant, nor split-invariant: in another batch, or with another num_splits, a query's keys are reduced
    in other blocks, and its output moves by an ulp or so (FlashAttention #1897); accurate otherwise."""
    items = int(np.prod(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])))
    splits = num_splits or max(1, 16 // max(items, 1))
    return _online(q, k, v, mask, max(1, -(-k.shape[-2] // splits)))


def _online(q, k, v, mask, block: int, sinks=None, **modifiers):
    """Attention over key blocks of `block` with an online softmax (tiled_attention's kernel); a sink starts the
    running max and sum (score z, value 0)."""
    o, _ = online_with_lse(q, k, v, mask, block, sinks, **modifiers)
    return o


def online_with_lse(q, k, v, mask, block: int, sinks=None, **modifiers):
    """(o, lse) of `_online`'s kernel: lse = m + log(sum) from its running max and sum, in float32 for 16-bit
    inputs (-inf for a query with no key)."""
    w = work_dtype(q.dtype)
    q32, k32, v32 = (a.astype(w) for a in (q, k, v))
    lq, lk = q.shape[-2], k.shape[-2]
    shape = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]) + (lq,)
    m = np.full(shape + (1,), -np.inf, w)
    total = np.zeros(shape + (1,), w)
    if sinks is not None:
        m = np.broadcast_to(np.asarray(sinks).astype(w)[..., None, None], m.shape).copy()
        total = np.ones(shape + (1,), w)
    acc = np.zeros(shape + (v.shape[-1],), w)
    keep_all = np.ones(shape[:-1] + (lq, lk), bool) if mask is None else np.broadcast_to(mask, shape[:-1] + (lq, lk))
    cap = modifiers.pop("softcap", None)
    with np.errstate(all="ignore"):
        # the bias (with ALiBi's) and the causal and window limits over every key, cut into the blocks below
        extra, limits = modified(np.zeros(shape[:-1] + (lq, lk), w), None, **modifiers) if modifiers else (None, None)
        if limits is not None:
            keep_all = keep_all & limits
        for start in range(0, lk, block):
            kb, vb = k32[..., start : start + block, :], v32[..., start : start + block, :]
            s = matmul(q32, np.swapaxes(kb, -1, -2), w) / np.sqrt(w.type(q.shape[-1]))
            if cap is not None:
                c = w.type(cap)
                s = c * tanh(s / c)
            if extra is not None:
                s = s + extra[..., start : start + block]
            s = np.where(keep_all[..., start : start + block], s, -np.inf)
            new_m = np.maximum(m, s.max(axis=-1, keepdims=True))
            safe_m = np.where(np.isfinite(new_m), new_m, 0)
            p = exp(s - safe_m)
            correction = exp(np.where(np.isfinite(m), m, safe_m) - safe_m)
            total = total * correction + dtype_sum(p)
            acc = acc * correction + matmul(p.astype(q.dtype), vb, w)
            m = new_m
        o = np.where(total > 0, acc / np.where(total > 0, total, 1), 0).astype(q.dtype)
        lse = np.where(total > 0, m + log(np.where(total > 0, total, 1)), -np.inf)[..., 0]
        return o, lse.astype(q.dtype)
