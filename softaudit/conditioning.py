"""The conditioning scale of each output: how far rounding the inputs alone moves it, to first order.

For an output r_i of inputs x_k, scale_i = |r_i| + sum_k |d r_i / d x_k| |x_k|. Rounding every input to the dtype
(a relative change of at most u each) and the output once moves r_i by at most about u * scale_i, so no
implementation can promise less, and a backward-stable one stays within a small multiple of it. The audit's
conditioning-scaled error (metrics.py) is |y_i - r_i| / (u * scale_i); docs/metrics.md derives each formula.

Computed in float64 from the inputs and the reference: a scale needs a few correct digits, not correct rounding.
"""

from __future__ import annotations

import numpy as np

from . import kinds

#: Attention's sensitivity to its scores needs a (queries, keys, dv) array: made this many elements at a time.
CHUNK = 1 << 22


def _probabilities(x: np.ndarray, kept: np.ndarray):
    """softmax over the kept entries in float64 (0 elsewhere), and the first argmax of each row."""
    t = np.where(kept, x, -np.inf)
    m = t.max(axis=-1, keepdims=True, initial=-np.inf)
    e = np.where(kept, np.exp(t - np.where(np.isfinite(m), m, 0.0)), 0.0)
    s = e.sum(axis=-1, keepdims=True)
    return e / np.where(s > 0, s, 1.0), e, s, np.argmax(t, axis=-1)[..., None]


def rows(kind: str, x, mask, r) -> np.ndarray:
    """scale for softmax, log_softmax, logsumexp and masked_softmax along the last axis (0 where not kept).

    x: the inputs (in the audited dtype or float64), mask: boolean or None, r: the exact results (float64).
    With p the softmax of the kept entries and A = sum_k p_k |x_k|, sum_k |delta_ik - p_k| |x_k| is
    (1 - p_i) |x_i| + (A - p_i |x_i|). For the largest entry, where p_i may be 1 - 1e-40, both parts are summed
    over the other entries instead, so neither cancels.
    """
    kind = kinds.get(kind)
    with np.errstate(all="ignore"):
        x = np.asarray(x, dtype=np.float64)
        kept = np.isfinite(x) if mask is None else np.isfinite(x) & np.broadcast_to(mask, x.shape)
        ax = np.where(kept, np.abs(x), 0.0)
        p, e, s, top = _probabilities(x, kept)
        pa = p * ax
        a = pa.sum(axis=-1, keepdims=True)
        inner = (1 - p) * ax + np.maximum(a - pa, 0.0)
        others = np.ones(x.shape, bool)
        np.put_along_axis(others, top, False, axis=-1)
        rest = np.where(others, e, 0.0).sum(axis=-1, keepdims=True) / np.where(s > 0, s, 1.0)  # 1 - p_top
        rest_abs = np.where(others, pa, 0.0).sum(axis=-1, keepdims=True)  # sum over k != top of p_k |x_k|
        top_inner = rest * np.take_along_axis(ax, top, axis=-1) + rest_abs
        np.put_along_axis(inner, top, top_inner, axis=-1)
        r = np.asarray(r, dtype=np.float64)
        if kind.reduces:  # log-sum-exp
            return np.abs(r) + a[..., 0]
        if kind.logarithmic:  # log-softmax
            return np.where(kept, np.abs(r) + inner, 0.0)
        return np.where(kept, p * (1 + inner), 0.0)


def attention(q, k, v, keep, o, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """scale for o = softmax(c q k^T, keep) v, per output element (..., Lq, dv), and its values' part.

    |o| + sum_j p_j |v_j| (the values) + 2 sum_j p_j |v_j - o| a_j (queries and keys), with
    a_j = c sum_t |q_t k_jt| the first-order change of the score s_j when q and k are rounded. The keys' part is
    exact; the queries' part is its upper bound by the triangle inequality, which has the same form. The values'
    part, sum_j p_j |v_j|, is returned as well: the audit's max_ulp_vsum reads errors in its ulps.
    """
    with np.errstate(all="ignore"):
        q, k, v, o = (np.asarray(a, dtype=np.float64) for a in (q, k, v, o))
        kt = np.swapaxes(k, -1, -2)
        s = np.where(keep, (q @ kt) * scale, -np.inf)
        m = s.max(axis=-1, keepdims=True, initial=-np.inf)
        e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
        total = e.sum(axis=-1, keepdims=True)
        p = e / np.where(total > 0, total, 1.0)
        weight = p * ((np.abs(q) @ np.abs(kt)) * scale)  # p_j a_j
        lead = np.broadcast_shapes(p.shape[:-2], v.shape[:-2], o.shape[:-2])
        p, weight, v, o = (np.broadcast_to(a, lead + a.shape[-2:]) for a in (p, weight, v, o))
        scores_part = np.empty(o.shape)
        lq, lk, dv = p.shape[-2], p.shape[-1], v.shape[-1]
        step = max(1, CHUNK // max(1, lk * dv))
        for index in np.ndindex(*lead):
            for start in range(0, lq, step):
                part = slice(start, start + step)
                spread = np.abs(v[index][None, :, :] - o[index][part][:, None, :])  # |v_j - o| (queries, keys, dv)
                scores_part[index][part] = np.einsum("qk,qkd->qd", weight[index][part], spread)
        values = p @ np.abs(v)
        return np.abs(o) + values + 2 * scores_part, values
