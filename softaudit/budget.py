"""What rounding in the dtype can cost: per output, a first-order bound of the error of the kind's standard
algorithm with every intermediate rounded to the dtype, in units of u (the rounding budget).

The conditioning scale (conditioning.py) is what rounding the inputs costs; an algorithm also rounds its
intermediates (p, the row's sum, the dot <g, p>, the scores, P before P V), and those roundings can move an output
by far more than its scale: g_i - <g, p> cancels, and a rounding of <g, p> in bfloat16 is then hundreds of times
the scale. The causes (causes.py) call an error a wrong term only past this budget, so that no rounding in the
dtype, however it is ordered, can be taken for a missing term.

Each function returns T (one array per output) such that |y - r| <= u T to first order for every ordering of the
standard algorithm, with `sums(n)` roundings for a sum of n terms: ceil(log2 n) for a pairwise sum, n - 1 for a
running one (`PAIRWISE`, `RUNNING`), and `tiny`, the dtype's smallest normal: a rounding below the normal range is
off by up to u tiny whatever the value (a p that underflows in float16 loses all of p g). The bounds are generous
(every rounding at its worst, every constant rounded up): a budget is a yardstick for causes, never a fail line.
docs/policy.md says how the causes read them.
"""

from __future__ import annotations

import math

import numpy as np

from . import kinds
from .conditioning import _summed_to, _weights


def PAIRWISE(n):
    """The roundings a pairwise sum of n terms passes each term through: ceil(log2 n)."""
    return np.ceil(np.log2(np.maximum(n, 1)))


def RUNNING(n):
    """The roundings a running (recursive) sum of n terms passes its first term through: n - 1."""
    return np.maximum(np.asarray(n, dtype=np.float64) - 1, 0)


def of(kind: str, inputs: dict, mask, exact: tuple, sums=PAIRWISE, tiny: float = 0.0) -> tuple[np.ndarray, ...] | None:
    """The rounding budget T of each output of `kind` on a case (inputs in the dtype, the exact results), for a
    dtype whose smallest normal is `tiny`; None for a kind `BUDGETS` has no formula for (its budget is unknown)."""
    entry, formula = kinds.get(kind), BUDGETS.get(kind)
    return None if formula is None else formula(entry, inputs, mask, exact, sums, tiny)


def _row(x, mask, sums):
    """The row quantities every row kind's budget reads: kept, p, log of the shifted sum, and E, the relative
    error coefficient of p (the shift x - m rounded: |x - m|; the sum: its terms' errors and sums(n); exp, the
    division: a few roundings more; exp(x - lse) with lse rounded: |lse|) for every way of forming p (e / s,
    e (1 / s), exp(x - m - log s), exp(x - lse), exp of a saved log-softmax)."""
    x = np.asarray(x, dtype=np.float64)
    kept = np.isfinite(x) if mask is None else np.isfinite(x) & np.broadcast_to(mask, x.shape)
    t = np.where(kept, x, -np.inf)
    m = t.max(axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    d = np.where(kept, np.abs(t - m), 0.0)
    e = np.where(kept, np.exp(-d), 0.0)
    s = e.sum(axis=-1, keepdims=True)
    p = e / np.where(s > 0, s, 1.0)
    spread = (p * d).sum(axis=-1, keepdims=True)
    n = kept.sum(axis=-1, keepdims=True)
    log_s = np.log(np.where(s > 0, s, 1.0))
    big_e = np.where(kept, d + spread + sums(n) + 4 + np.abs(m + log_s), 0.0)
    return kept, p, log_s, m, big_e


def rows(kind, inputs: dict, mask, exact: tuple, sums, tiny) -> tuple[np.ndarray]:
    """softmax and masked_softmax: p E; log_softmax: |r| + |x - m| + log s + sum p |x - m| + sums(n) + 4 (the shift,
    the log of a sum that carries its terms' errors, the subtraction); logsumexp: the same about m + log s."""
    with np.errstate(all="ignore"):
        x = np.asarray(inputs["x"], dtype=np.float64)
        kept, p, log_s, m, big_e = _row(x, mask, sums)
        r = np.abs(np.asarray(exact[0], dtype=np.float64))
        if kind.reduces:
            return ((np.abs(m) + log_s + big_e.max(axis=-1, keepdims=True))[..., 0] + r + tiny,)
        if kind.logarithmic:
            return (np.where(kept, r + log_s + big_e + tiny, 0.0),)
        return (np.where(kept, p * big_e + 2 * tiny, 0.0),)


def softmax_grad(kind, inputs: dict, mask, exact: tuple, sums, tiny) -> tuple[np.ndarray]:
    """dx = p (g - <g, p>): p_i's error (p E + tiny) times |g_i - gbar|; the dot's, p_i sum_k (p_k |g_k| (E_k +
    sums(n) + 1) + tiny (|g_k| + 1)) (each product p_k g_k carries p_k's error and its own, and the sum its own,
    with sum(p) != 1 in it); the subtraction and the products, p_i (|g_i| + |gbar|) and |r_i| (p g - p gbar rounds
    both)."""
    with np.errstate(all="ignore"):
        x = np.asarray(inputs["x"], dtype=np.float64)
        kept, p, _, _, big_e = _row(x, mask, sums)
        g = np.where(kept, np.asarray(inputs["g"], dtype=np.float64), 0.0)
        ag = np.abs(g)
        gbar = (p * g).sum(axis=-1, keepdims=True)
        n = kept.sum(axis=-1, keepdims=True)
        dot = (p * ag * (big_e + sums(n) + 1) + tiny * (ag + 1)).sum(axis=-1, keepdims=True)
        terms = (p * big_e + tiny) * np.abs(g - gbar) + p * (ag + np.abs(gbar) + dot)
        return (np.where(kept, terms + np.abs(exact[0]) + 3 * tiny, 0.0),)


def log_softmax_grad(kind, inputs: dict, mask, exact: tuple, sums, tiny) -> tuple[np.ndarray]:
    """dx = g - p sum(g): p_i's error (p E + tiny) times |sum(g)|; the sum's, p_i sums(n) sum |g|; the product and the
    subtraction, |g_i| and |r_i|. At a -inf logit (p = 0) dx = g exactly: 2 |g_i| covers a g - 0 too."""
    with np.errstate(all="ignore"):
        x = np.asarray(inputs["x"], dtype=np.float64)
        kept, p, _, _, big_e = _row(x, mask, sums)
        read = kept | (x == -np.inf) if mask is None else kept
        g = np.where(read, np.asarray(inputs["g"], dtype=np.float64), 0.0)
        total = np.abs(g.sum(axis=-1, keepdims=True))
        n = read.sum(axis=-1, keepdims=True)
        pe = p * big_e + tiny
        terms = np.abs(g) + pe * total + p * (total + sums(n) * np.abs(g).sum(axis=-1, keepdims=True))
        return (np.where(read, terms + np.abs(exact[0]) + 3 * tiny, 0.0),)


def logsumexp_grad(kind, inputs: dict, mask, exact: tuple, sums, tiny) -> tuple[np.ndarray]:
    """dx = p g (g one value per row): p_i's error and the product's, (p_i (E_i + 1) + tiny) |g|, and |r_i|."""
    with np.errstate(all="ignore"):
        x = np.asarray(inputs["x"], dtype=np.float64)
        kept, p, _, _, big_e = _row(x, mask, sums)
        ag = np.abs(np.asarray(inputs["g"], dtype=np.float64))[..., None]
        return (np.where(kept, (p * (big_e + 1) + tiny) * ag + np.abs(exact[0]) + 2 * tiny, 0.0),)


def _attention_weights(q, k, keep, sums, tiny):
    """P, the scores' |q| |k| c (a), and P E + tiny, P's absolute error coefficient: each score is a dot of d terms
    rounded sums(d) + 2 times (its error at most that many u of a_j, and of sum_l P_l a_l through the row's shift
    and sum), then a row kind's E over the scores (with |lse| for exp(s - lse))."""
    c = 1 / math.sqrt(q.shape[-1])
    kt = np.swapaxes(k, -1, -2)
    p = _weights(q, kt, keep, c)
    a = np.where(keep, (np.abs(q) @ np.abs(kt)) * c, 0.0)
    s = np.where(keep, (q @ kt) * c, -np.inf)
    m = s.max(axis=-1, keepdims=True, initial=-np.inf)
    d = np.where(keep, np.abs(s - np.where(np.isfinite(m), m, 0.0)), 0.0)
    n = keep.sum(axis=-1, keepdims=True)
    total = np.where(keep, np.exp(-d), 0.0).sum(axis=-1, keepdims=True)
    lse = np.abs(np.where(np.isfinite(m), m, 0.0) + np.log(np.where(total > 0, total, 1.0)))
    dots = sums(q.shape[-1]) + 2
    spread = (p * d).sum(axis=-1, keepdims=True)
    big_e = dots * (a + (p * a).sum(axis=-1, keepdims=True)) + d + spread + sums(n) + 4 + lse
    return p, np.where(keep, p * big_e + tiny, 0.0), n, c


def _setting(inputs: dict, mask):
    q, k, v = (np.nan_to_num(np.asarray(inputs[n], dtype=np.float64), posinf=0.0, neginf=0.0) for n in "qkv")
    scores_shape = np.broadcast_shapes(q.shape[:-1] + (k.shape[-2],), k.shape[:-2] + (1, 1))
    keep = np.broadcast_to(True if mask is None else mask, scores_shape)
    return q, k, v, keep


def attention(kind, inputs: dict, mask, exact: tuple, sums, tiny) -> tuple[np.ndarray]:
    """o = P V: each P_j's error and the sum's, sum_j (P_j E_j + tiny + P_j (sums(n) + 2)) |v_j|, each product's
    floor, and |o|."""
    with np.errstate(all="ignore"):
        q, k, v, keep = _setting(inputs, mask)
        p, pe, n, _ = _attention_weights(q, k, keep, sums, tiny)
        o = np.abs(np.asarray(exact[0], dtype=np.float64))
        return ((pe + p * (sums(n) + 2)) @ np.abs(v) + o + (n + 2) * tiny,)


def attention_grad(kind, inputs: dict, mask, exact: tuple, sums, tiny) -> tuple[np.ndarray, ...]:
    """dS = P (dP - D), dP = g v^T (b = |g| |v|^T), D = sum_j P_j dP_j (or rowsum(dO o O): the same terms):
    dS's error coefficient sigma = (P E + tiny) |dP - D| + P (sums(dv) b + delta_D + |dP| + |D|) + |dS|, with
    delta_D = sum_j (P_j E_j + tiny + P_j (sums(n) + sums(dv) + 3)) (|dP_j| + b_j); then dq = c dS k and
    dk = c dS^T q add their own sums (sigma + (sums + 1) |dS|), and dv = P^T g, P's error and the sum over queries.
    Inputs broadcast along batch axes get the sum over them, as their gradients do."""
    with np.errstate(all="ignore"):
        q, k, v, keep = _setting(inputs, mask)
        g = np.asarray(inputs["g"], dtype=np.float64)
        p, pe, n, c = _attention_weights(q, k, keep, sums, tiny)
        vt = np.swapaxes(v, -1, -2)
        dp = np.where(keep, g @ vt, 0.0)
        b = np.where(keep, np.abs(g) @ np.abs(vt), 0.0)
        dd = (p * dp).sum(axis=-1, keepdims=True)
        ds = p * (dp - dd)
        width = sums(v.shape[-1])
        delta = ((pe + p * (sums(n) + width + 3)) * (np.abs(dp) + b)).sum(axis=-1, keepdims=True) + n * tiny
        sigma = pe * np.abs(dp - dd) + p * (width * b + delta + np.abs(dp) + np.abs(dd)) + np.abs(ds) + 3 * tiny
        queries = sums(q.shape[-2])
        dq = c * ((sigma + (sums(n) + 1) * np.abs(ds)) @ np.abs(k))
        dk = c * (np.swapaxes(sigma + (queries + 1) * np.abs(ds), -1, -2) @ np.abs(q))
        dv = np.swapaxes(pe + p * (queries + 2), -1, -2) @ np.abs(g) + (queries + 2) * tiny
        return tuple(
            _summed_to(part, x.shape) + np.abs(np.asarray(r, dtype=np.float64))
            for part, x, r in zip((dq, dk, dv), (q, k, v), exact)
        )


#: Each kind's budget, by name: a budget is a formula of the kind's standard algorithm, not of its shape. A kind
#: missing here has none, and the causes read its errors against the conditioning scale alone (causes.classify).
BUDGETS = {
    "softmax": rows,
    "log_softmax": rows,
    "logsumexp": rows,
    "masked_softmax": rows,
    "attention": attention,
    "softmax_grad": softmax_grad,
    "log_softmax_grad": log_softmax_grad,
    "logsumexp_grad": logsumexp_grad,
    # (masked softmax's VJP is softmax's over the kept entries)
    "masked_softmax_grad": softmax_grad,
    "attention_grad": attention_grad,
}
