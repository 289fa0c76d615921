"""Built-in attention backward candidates: (dq, dk, dv) for o = softmax(c q k^T, masked) v, c = 1/sqrt(d).

With g = dO: dV = P^T dO, dP = dO V^T, D = rowsum(dP * P) (= rowsum(dO * O)), dS = P * (dP - D), dQ = c dS K,
dK = c dS^T Q. A query row with no key to attend has output 0 (the forward built-ins' `upcast` and `tiled`), so its
exact gradient is 0 and it adds nothing to dK and dV. Batch axes broadcast as in the forward (one K/V head shared by
several query heads: multi-query, grouped-query); a gradient is summed over the axes its input was broadcast along,
in the precision each candidate says (`_unbroadcast`), and has its input's shape.

"In the dtype" as in `attention`: elementwise work rounded to the dtype, matrix products accumulated in float32
(float64 for float64) and rounded once to the dtype (`_ops.matmul`). Each takes attention's causal and window
(bottom-right aligned, `attention.kept_keys`), folded into the mask: they choose the keys, the backward is the same;
and its bias, ALiBi slopes and sinks, which change P only: a sink is a key of value 0 (its dP is 0), so dS, dq, dk
and dv keep their formulas over the other keys, with P from the modified scores (`attention.modified`, the forward
built-ins' `_sink_weights`). A tanh softcap changes dS too: with the capped score f = cap tanh(s / cap) (+ the bias),
dS = sigma P (dP - D), sigma = df/ds = 1 - tanh(s / cap)**2 over the keys (`capped`).
"""

from __future__ import annotations

import numpy as np

from ..adapters import candidate
from ._ops import const, dtype_sum, exp, log, matmul, row_max, work_dtype
from .attention import _sink_weights, cap_scores, modified, tiled_attention, tiled_b64


def _t(a):
    return np.swapaxes(a, -1, -2)


def _unbroadcast(grad, shape):
    """grad summed (pairwise, in grad's dtype) over the axes along which an input of `shape` was broadcast."""
    extra = grad.ndim - len(shape)
    axes = list(range(extra)) + [extra + i for i, n in enumerate(shape) if n == 1 and grad.shape[extra + i] != 1]
    if not axes:
        return grad
    moved = np.moveaxis(grad, axes, list(range(-len(axes), 0)))
    return dtype_sum(moved.reshape(moved.shape[: -len(axes)] + (-1,))).reshape(shape)


def _keep(mask, shape):
    return np.ones(shape, bool) if mask is None else np.broadcast_to(mask, shape)


def _backward(q, k, v, g, p, dp, d, c, sigma=None):
    """dq, dk, dv from P, dP = dO V^T and D, in p's dtype (its products as `matmul` forms them for that dtype),
    each summed over the axes its input was broadcast along, in p's dtype too; sigma: the cap's derivative, which
    multiplies dS (None without a cap)."""
    w = p.dtype
    ds = p * (dp - d)
    if sigma is not None:
        ds = ds * sigma
    grads = (matmul(ds, k, w) * c, matmul(_t(ds), q, w) * c, matmul(_t(p), g, w))
    return tuple(_unbroadcast(grad, a.shape) for grad, a in zip(grads, (q, k, v)))


def capped(s, softcap):
    """(the capped scores cap tanh(s / cap), their derivative sigma) in s's dtype, as `attention.modified` caps
    them; (s, None) without a cap.

    sigma = 1 - t * t from the cap's own tanh t, as kernels form it (FlashAttention 2's backward, PR #1033: dtanh
    from the scores right after the cap, multiplied into dS): not sech(s / cap)**2 from a cosh, which no kernel
    computes. Where the cap saturates (|s| several times cap) t's rounding is most of 1 - t * t, so sigma is
    relatively inexact there, but it is small there and so is dS: the realistic error, which the audit should
    see."""
    if softcap is None:
        return s, None
    f, t = cap_scores(s, softcap)
    return f, np.array(1, s.dtype) - t * t


def _modified(s, mask, causal, window, bias, alibi_slopes, softcap=None):
    """The scores capped (in s's dtype), with the bias and ALiBi's added, the keys each query attends (None: all),
    and the cap's derivative (None without a cap)."""
    s, sigma = capped(s, softcap)
    return (*modified(s, mask, bias=bias, alibi_slopes=alibi_slopes, causal=causal, window=window), sigma)


def naive_weights(q, k, mask, causal=False, window=None, bias=None, alibi_slopes=None, sinks=None, softcap=None):
    """(P, the sink's share P_z, c, the cap's derivative sigma) as `naive` forms them, in q's dtype: masked scores
    -inf, the row's max shifted out (P_z is 0 without a sink, sigma None without a cap)."""
    dtype = q.dtype
    c = const(1 / np.sqrt(q.shape[-1]), dtype)
    s, mask, sigma = _modified(matmul(q, _t(k), dtype) * c, mask, causal, window, bias, alibi_slopes, softcap)
    if mask is not None:
        s = np.where(mask, s, const(-np.inf, dtype))
    if sinks is None:
        e = exp(s - row_max(s))
        total, sink = dtype_sum(e), np.zeros((), dtype)
    else:
        e, sink, _ = _sink_weights(s, None, sinks, dtype)
        total = dtype_sum(e) + sink
    return e / total, sink / total, c, sigma


@candidate(kind="attention_grad", name="attention_grad.naive")
def naive(q, k, v, g, mask=None, *, causal=False, window=None, bias=None, alibi_slopes=None, sinks=None, softcap=None):
    """Attention backward in the dtype, masked scores set to -inf, P and every intermediate rounded to the dtype
    (a softcap's tanh and 1 - tanh**2 too). Weakness: P, dP, D and dS carry the dtype's rounding (D's pairwise sum
    about log2(Lk) ulps), and a fully masked query row is NaN in P, which spreads through P^T dO and dS^T Q to every
    entry of dK and dV."""
    return naive_parts(q, k, v, g, mask, causal, window, bias, alibi_slopes, sinks, softcap)[0]


def naive_parts(
    q, k, v, g, mask=None, causal=False, window=None, bias=None, alibi_slopes=None, sinks=None, softcap=None
):
    """`naive`'s ((dq, dk, dv), the sink's share P_z, D), in q's dtype."""
    dtype = q.dtype
    g = g.astype(dtype)
    with np.errstate(all="ignore"):
        p, p_z, c, sigma = naive_weights(q, k, mask, causal, window, bias, alibi_slopes, sinks, softcap)
        dp = matmul(g, _t(v), dtype)
        d = dtype_sum(dp * p)
        # A shared K/V head's dk and dv: each query head's rounded to the dtype, summed pairwise in the dtype.
        return _backward(q, k, v, g, p, dp, d, c, sigma), p_z, d


def upcast_weights(q, k, mask, causal=False, window=None, bias=None, alibi_slopes=None, sinks=None, softcap=None):
    """(P, the sink's share P_z, c, the cap's derivative sigma) as `upcast` forms them, in the working dtype
    (float32 for 16-bit q): masked keys excluded with where, P = 0 for a query with nothing to attend (sigma None
    without a cap)."""
    w = work_dtype(q.dtype)
    c = 1 / np.sqrt(w.type(q.shape[-1]))
    s = matmul(q.astype(w), _t(k.astype(w)), w) * c
    s, mask, sigma = _modified(s, mask, causal, window, bias, alibi_slopes, softcap)
    e, sink, _ = _sink_weights(s, _keep(mask, s.shape), sinks, w)
    total = dtype_sum(e) + sink
    safe = np.where(total > 0, total, 1)
    return np.where(total > 0, e / safe, 0), np.where(total > 0, sink / safe, 0), c, sigma


@candidate(kind="attention_grad", name="attention_grad.upcast")
def upcast(q, k, v, g, mask=None, *, causal=False, window=None, bias=None, alibi_slopes=None, sinks=None, softcap=None):
    """Best practice: the backward in float32 for 16-bit inputs (a softcap's tanh and 1 - tanh**2 too), masked keys
    excluded with where, zeros for a fully masked query row, each gradient rounded once. Weakness: none known."""
    grads, _, _ = upcast_parts(q, k, v, g, mask, causal, window, bias, alibi_slopes, sinks, softcap)
    return tuple(grad.astype(q.dtype) for grad in grads)


def upcast_parts(
    q, k, v, g, mask=None, causal=False, window=None, bias=None, alibi_slopes=None, sinks=None, softcap=None
):
    """`upcast`'s ((dq, dk, dv), the sink's share P_z, D), in the working dtype (not yet rounded to q's)."""
    w = work_dtype(q.dtype)
    q32, k32, v32, g32 = (a.astype(w) for a in (q, k, v, g))
    with np.errstate(all="ignore"):
        p, p_z, c, sigma = upcast_weights(q, k, mask, causal, window, bias, alibi_slopes, sinks, softcap)
        dp = matmul(g32, _t(v32), w)
        d = dtype_sum(dp * p)
        # A shared K/V head's dk and dv: the query heads' float32 gradients summed in float32, rounded once.
        return _backward(q32, k32, v32, g32, p, dp, d, c, sigma), p_z, d


def additive(q, k, mask, causal=False, window=None, bias=None, alibi_slopes=None):
    """(the bias with ALiBi's in the working dtype, None without either; the keys each query attends, None for
    all), as FlashAttention 2's kernels take them."""
    scores = np.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + (q.shape[-2], k.shape[-2])
    extra, mask, _ = _modified(np.zeros(scores, work_dtype(q.dtype)), mask, causal, window, bias, alibi_slopes)
    return (None if bias is None and alibi_slopes is None else extra), mask


def _saved_lse(q, k, mask, block, extra=None, sinks=None, softcap=None):
    """The log-sum-exp of each row of scores that FlashAttention 2's forward saves: a running max and rescaled sum
    in float32 over key blocks, lse = m + log(l); +inf for a row with no key (so that P = exp(s - lse) is 0). extra:
    the bias (with ALiBi's) in float32, added to the scores after the cap; a sink starts the max and the sum (score
    z, e**0)."""
    w = work_dtype(q.dtype)
    q32, k32 = q.astype(w), k.astype(w)
    shape = np.broadcast_shapes(q.shape[:-2], k.shape[:-2]) + (q.shape[-2], k.shape[-2])
    keep = _keep(mask, shape)
    m = np.full(shape[:-1] + (1,), -np.inf, w)
    total = np.zeros(shape[:-1] + (1,), w)
    if sinks is not None:
        m = np.broadcast_to(np.asarray(sinks).astype(w)[..., None, None], m.shape).copy()
        total = np.ones(m.shape, w)
    for start in range(0, k.shape[-2], block):
        s = capped(matmul(q32, _t(k32[..., start : start + block, :]), w) / np.sqrt(w.type(q.shape[-1])), softcap)[0]
        if extra is not None:
            s = s + extra[..., start : start + block]
        s = np.where(keep[..., start : start + block], s, -np.inf)
        new_m = np.maximum(m, row_max(s))
        safe_m = np.where(np.isfinite(new_m), new_m, 0)
        total = total * exp(np.where(np.isfinite(m), m, safe_m) - safe_m) + dtype_sum(exp(s - safe_m))
        m = new_m
    return np.where(total > 0, m + log(np.where(total > 0, total, 1)), np.inf)


#: The forward FlashAttention-style built-ins by block size, made once (a candidate is marked where it is made).
_TILED = {64: tiled_b64}


def _tiled(block: int):
    if block not in _TILED:
        _TILED[block] = tiled_attention(block)
    return _TILED[block]


def flash2_delta(q, k, v, g, mask=None, block: int = 64, **modifiers):
    """D = rowsum(dO * O) as FlashAttention 2's backward computes it (its preprocessing kernel): O the forward's
    output as FA2 stores it (P rounded to the dtype before P V, O rounded to the dtype), dO and O upcast to
    float32, the sum in float32. Returns float32 (float64 for float64), with the row axis kept (length 1).
    modifiers: the forward's (bias, ALiBi, sinks, softcap)."""
    w = work_dtype(q.dtype)
    o = _tiled(block)(q, k, v, mask, **{n: a for n, a in modifiers.items() if a is not None})
    return dtype_sum(g.astype(q.dtype).astype(w) * o.astype(w))


def flash2_parts(
    q, k, v, g, mask, block, causal=False, window=None, bias=None, alibi_slopes=None, sinks=None, softcap=None
):
    """FlashAttention 2's backward over key blocks of `block` (`flash2_backward`'s): ((dq, dk, dv) in q's dtype,
    the saved lse and D in the working dtype)."""
    w, dtype = work_dtype(q.dtype), q.dtype
    q32, k32, v32, g32 = (a.astype(w) for a in (q, k, v, g.astype(dtype)))
    lk = k.shape[-2]
    with np.errstate(all="ignore"):
        c = 1 / np.sqrt(w.type(q.shape[-1]))
        extra, mask = additive(q, k, mask, causal, window, bias, alibi_slopes)
        lse = _saved_lse(q, k, mask, block, extra, sinks, softcap)
        d = flash2_delta(q, k, v, g, mask, block, bias=bias, alibi_slopes=alibi_slopes, sinks=sinks, softcap=softcap)
        keep = _keep(mask, lse.shape[:-1] + (lk,))
        dq = np.zeros(np.broadcast_shapes(q32.shape, lse.shape[:-1] + (q.shape[-1],)), w)
        dks, dvs = [], []
        for start in range(0, lk, block):
            kb, vb = k32[..., start : start + block, :], v32[..., start : start + block, :]
            # (the cap's derivative from the tanh, before the mask and the bias, as FA2's backward forms it)
            s, sigma = capped(matmul(q32, _t(kb), w) * c, softcap)
            if extra is not None:
                s = s + extra[..., start : start + block]
            p = np.where(keep[..., start : start + block], exp(s - lse), 0)
            p_low = p.astype(dtype)
            dvs.append(matmul(_t(p_low), g32, w))
            ds = p * (matmul(g32, _t(vb), w) - d)
            ds = (ds if sigma is None else ds * sigma).astype(dtype)
            dq = dq + matmul(ds, kb, w)
            dks.append(matmul(_t(ds), q32, w))
        dk = np.concatenate(dks, axis=-2) * c if dks else np.zeros(k.shape, w)
        dv = np.concatenate(dvs, axis=-2) if dvs else np.zeros(v.shape, w)
        # A shared K/V head (MQA, GQA) as FA2's mha_bwd sums it: each query head's dk and dv written in the dtype
        # (dk_expanded, dv_expanded), then summed over the group with float32 accumulation (at::sum_out) and
        # rounded once. Without broadcast the round trip through the dtype changes nothing.
        dk, dv = (a.astype(dtype).astype(w) for a in (dk, dv))
        grads = ((dq * c, q), (dk, k), (dv, v))
        return tuple(_unbroadcast(grad, a.shape).astype(dtype) for grad, a in grads), lse, d


def flash2_backward(block: int = 64):
    """FlashAttention 2's backward (Dao 2023, Algorithm 2) over key blocks of `block`."""

    def flash2(
        q, k, v, g, mask=None, *, causal=False, window=None, bias=None, alibi_slopes=None, sinks=None, softcap=None
    ):
        """FlashAttention-2 style backward, key blocks of {block}: P recomputed in float32 from the saved
        log-sum-exp, D = rowsum(dO * O) with O rounded to the dtype as FA2 stores it, P and dS rounded to the dtype
        before the tensor-core products P^T dO, dS K and dS^T Q (accumulated in float32), the scale applied in
        float32 at the end; a softcap's derivative 1 - tanh**2 multiplies dS in float32 before its rounding; a K/V
        head shared by several query heads gets the sum of their dk, dv as stored in the dtype, accumulated in
        float32. Weakness: D comes from the rounded O, not from P and dP, so it does not match the P it is
        subtracted against: dS = P (dP - D) carries D's rounding error in every entry of the row (biased in bfloat16
        on similar low-rank q, k: Qiu & Yao 2025); P and dS in the dtype add an ulp per entry."""
        return flash2_parts(q, k, v, g, mask, block, causal, window, bias, alibi_slopes, sinks, softcap)[0]

    flash2.__doc__ = flash2.__doc__.format(block=block)
    flash2.__name__ = flash2.__qualname__ = f"flash2_b{block}"
    return candidate(flash2, kind="attention_grad", name=f"attention_grad.flash2_b{block}")


flash2_b64 = flash2_backward(64)
