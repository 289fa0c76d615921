"""The conditioning scale of each output: how far rounding the inputs alone moves it, to first order.

For an output r_i of inputs x_k, scale_i = |r_i| + sum_k |d r_i / d x_k| |x_k|. Rounding every input to the dtype
(a relative change of at most u each) and the output once moves r_i by at most about u * scale_i, so no
implementation can promise less, and a backward-stable one stays within a small multiple of it. The audit's
conditioning-scaled error (metrics.py) is |y_i - r_i| / (u * scale_i); docs/metrics.md derives each formula.

Computed in float64 from the inputs and the reference: a scale needs a few correct digits, not correct rounding.
"""

from __future__ import annotations

import numpy as np

#: Attention's sensitivity to its scores needs a (queries, keys, dv) array: made this many elements at a time.
CHUNK = 1 << 22


def _probabilities(x: np.ndarray, kept: np.ndarray):
    """softmax over the kept entries in float64 (0 elsewhere), and the first argmax of each row."""
    t = np.where(kept, x, -np.inf)
    m = t.max(axis=-1, keepdims=True, initial=-np.inf)
    e = np.where(kept, np.exp(t - np.where(np.isfinite(m), m, 0.0)), 0.0)
    s = e.sum(axis=-1, keepdims=True)
    return e / np.where(s > 0, s, 1.0), e, s, np.argmax(t, axis=-1)[..., None]


def _finite(a: np.ndarray) -> np.ndarray:
    """a with its NaN and inf entries as 0, for the attention scales: an entry a query may not attend must count for
    nothing there (0 x NaN would not), and a query that meets one it attends is undefined (its scale is never read)."""
    return np.where(np.isfinite(a), a, 0.0)


def _weights(q, kt, keep, scale, bias=None, softcap=None) -> np.ndarray:
    """Attention's weights softmax(scale q k^T + bias) over the kept keys, in float64 (0 elsewhere; kt is k
    transposed); with a softcap the scores are softcap tanh(scale q k^T / softcap) + bias (the bias after the cap)."""
    raw = (q @ kt) * scale
    raw = raw if softcap is None else softcap * np.tanh(raw / softcap)
    s = np.where(keep, raw + (0.0 if bias is None else bias), -np.inf)
    m = s.max(axis=-1, keepdims=True, initial=-np.inf)
    e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total > 0, total, 1.0)


def _others(p, top, w):
    """sum_{k != i} p_k w_k for every i, w >= 0: the row's total less p_i w_i, and for the largest entry the sum
    over the others itself (the difference would cancel when p_top w_top dominates)."""
    pw = p * w
    others = np.maximum(pw.sum(axis=-1, keepdims=True) - pw, 0.0)
    not_top = np.ones(p.shape, bool)
    np.put_along_axis(not_top, top, False, axis=-1)
    np.put_along_axis(others, top, np.where(not_top, pw, 0.0).sum(axis=-1, keepdims=True), axis=-1)
    return others


def _one_minus(p, e, s, top):
    """1 - p_i; for the largest entry, where p_i may be 1 - 1e-40, the sum of the others' exps over the total."""
    rest = 1 - p
    not_top = np.ones(p.shape, bool)
    np.put_along_axis(not_top, top, False, axis=-1)
    top_rest = np.where(not_top, e, 0.0).sum(axis=-1, keepdims=True) / np.where(s > 0, s, 1.0)
    np.put_along_axis(rest, top, top_rest, axis=-1)
    return rest


def _spread(p, e, s, top, w):
    """sum_k |delta_ik - p_k| w_k = (1 - p_i) w_i + sum_{k != i} p_k w_k for every i, w >= 0 (0 where not kept),
    with neither part cancelling for the largest entry."""
    return _one_minus(p, e, s, top) * w + _others(p, top, w)


def _row_setting(x, mask):
    """x as float64, where it is kept, |x| (0 elsewhere), and _probabilities of it."""
    x = np.asarray(x, dtype=np.float64)
    kept = np.isfinite(x) if mask is None else np.isfinite(x) & np.broadcast_to(mask, x.shape)
    return x, kept, np.where(kept, np.abs(x), 0.0), _probabilities(x, kept)


def rows(kind, x, mask, r) -> np.ndarray:
    """scale for softmax, log_softmax, logsumexp and masked_softmax along the last axis (0 where not kept).

    kind: the row kind (a `softaudit.kinds.Kind`: its `reduces` and `logarithmic` say which formula; passed in, as
    the kinds import this module and not the other way round). x: the inputs (in the audited dtype or float64),
    mask: boolean or None, r: the exact results (float64). With p the softmax of the kept entries and
    A = sum_k p_k |x_k|, sum_k |delta_ik - p_k| |x_k| is (1 - p_i) |x_i| + (A - p_i |x_i|) (`_spread`).

    """
    with np.errstate(all="ignore"):
        x, kept, ax, (p, e, s, top) = _row_setting(x, mask)
        inner = _spread(p, e, s, top, ax)
        r = np.asarray(r, dtype=np.float64)
        if kind.reduces:  # log-sum-exp
            return np.abs(r) + (p * ax).sum(axis=-1)
        if kind.logarithmic:  # log-softmax
            return np.where(kept, np.abs(r) + inner, 0.0)
        return np.where(kept, p * (1 + inner), 0.0)


def sum_rounding(kind, scale: np.ndarray) -> np.ndarray:
    """The log kinds' scale plus 1 where it is not 0 (kept entries): what rounding the intermediate sum s of the
    shifted exponentials once costs, as log s moves by up to u. It is no part of the inputs' conditioning (`rows`),
    but every algorithm that takes log s pays it, and where x_i - m - log s cancels (log s near 0, next to a
    dominant entry) the inputs' part alone is far smaller: x - m - log s in float32 read 13.3 and 27.7x the
    conditioning on mask_planes with the portable exp and log and with numpy's, so one ulp of s decided a verdict
    (issue 24). Softmax needs no term: rounding s costs p_i u, which p_i (1 + ...) holds."""
    if not kind.logarithmic:
        return scale
    return np.where(scale > 0, scale + 1.0, scale)


def softmax_grad(x, mask, g, r) -> np.ndarray:
    """scale of dx = p (g - <g, p>) (softmax's and masked softmax's VJP), 0 where not kept: |r_i| plus the
    upstream gradient's part p_i sum_k |delta_ik - p_k| |g_k| (exact) plus the logits' part, bounded by
    p_i (|g_i - gbar| |1 - 2 p_i| |x_i| + sum_{j != i} p_j (|g_i - gbar| + |g_j - gbar|) |x_j|), gbar = <g, p>,
    since d r_i / d x_j = p_i (delta_ij (g_i - gbar) - p_j (g_i + g_j - 2 gbar)) (docs/metrics.md).

    Plus p_i sum_k p_k |g_k|: what rounding the intermediate <g, p> once costs (each product p_k g_k rounded moves
    gbar by up to u p_k |g_k|, and dx_i by p_i times that). The exact VJP does not change when g moves by a
    constant, but every algorithm that forms gbar does, and where g_i - gbar cancels the inputs' part alone is
    thousands of times smaller than that one rounding (mnist_logits in float32)."""
    with np.errstate(all="ignore"):
        x, kept, ax, (p, e, s, top) = _row_setting(x, mask)
        g = np.where(kept, np.asarray(g, dtype=np.float64), 0.0)
        dev = np.abs(_deviation(p, top, g))  # |g_i - gbar|
        logits = dev * np.abs(1 - 2 * p) * ax + dev * _others(p, top, ax) + _others(p, top, dev * ax)
        ag = np.abs(g)
        dot = (p * ag).sum(axis=-1, keepdims=True)  # the cost of rounding <g, p> once
        return np.where(kept, np.abs(r) + p * (_spread(p, e, s, top, ag) + logits + dot), 0.0)


def _deviation(p, top, g):
    """g_i - <g, p> for every i; for the largest entry sum_{k != top} p_k (g_top - g_k), which does not cancel
    when p_top is next to 1."""
    dev = g - (p * g).sum(axis=-1, keepdims=True)
    not_top = np.ones(p.shape, bool)
    np.put_along_axis(not_top, top, False, axis=-1)
    g_top = np.take_along_axis(g, top, axis=-1)
    np.put_along_axis(dev, top, np.where(not_top, p * (g_top - g), 0.0).sum(axis=-1, keepdims=True), axis=-1)
    return dev


def log_softmax_grad(x, mask, g, r) -> np.ndarray:
    """scale of dx = g - p sum(g): |r_i| + (1 - p_i) |g_i| + p_i sum_{k != i} |g_k| (the upstream gradient's part)
    + |sum(g)| p_i sum_k |delta_ik - p_k| |x_k| (the logits'), both exact, + p_i sum_k |g_k|: what rounding the
    intermediate sum(g) once costs (each term rounded moves it by up to u |g_k|), which the upstream part misses at
    a dominant entry (p_i near 1, where (1 - p_i) |g_i| is tiny and dx_i = g_i - p_i sum(g) cancels). g is read at
    -inf logits too (p = 0 there, so dx_i = g_i and the scale is 2 |g_i|); 0 where masked."""
    with np.errstate(all="ignore"):
        x, kept, ax, (p, e, s, top) = _row_setting(x, mask)
        read = kept | (x == -np.inf) if mask is None else kept
        g = np.where(read, np.asarray(g, dtype=np.float64), 0.0)
        ag = np.abs(g)
        total = ag.sum(axis=-1, keepdims=True)
        upstream = _one_minus(p, e, s, top) * ag + p * np.maximum(total - ag, 0.0) + p * total
        logits = np.abs(g.sum(axis=-1, keepdims=True)) * p * _spread(p, e, s, top, ax)
        return np.where(read, np.abs(r) + upstream + np.where(kept, logits, 0.0), 0.0)


def logsumexp_grad(x, mask, g, r) -> np.ndarray:
    """scale of dx = p g (g one value per row), 0 where not kept: |r_i| + p_i |g| (the upstream gradient's part)
    + |g| p_i sum_k |delta_ik - p_k| |x_k| (the logits'), exact, + p_i |g| |lse|: autograd's exp(x - lse) g
    rounds lse, which moves every p_i by a relative u |lse|. The logits' part holds that where the entries are
    large, not for entries near 0 in a long row (lse = log n): a float64 exp(x - lse) g read 31x the conditioning
    without it (the verdict corpus)."""
    with np.errstate(all="ignore"):
        x, kept, ax, (p, e, s, top) = _row_setting(x, mask)
        ag = np.abs(np.asarray(g, dtype=np.float64))[..., None]
        m = np.max(np.where(kept, x, -np.inf), axis=-1, keepdims=True)
        lse = np.where(np.isfinite(m), np.abs(m + np.log(s)), 0.0)
        return np.where(kept, np.abs(r) + ag * p * (1 + _spread(p, e, s, top, ax) + lse), 0.0)


def attention_grad(
    q, k, v, g, keep, grads, scale: float, bias=None, extra_keys: int = 0, softcap=None
) -> tuple[np.ndarray, ...]:
    """scales of (dq, dk, dv), attention's VJP for the upstream gradient g, each of its input's shape; and of dz,
    the sinks' gradient, where `grads` holds it as a fourth (the sink the last key, its logit in the bias).

    An upper bound of |r| + sum over every input x of |d r / d x| |x| (docs/metrics.md). With P the weights,
    a_ij = c sum_t |q_it k_jt| (+ |b_ij| / 2 with a bias b, which rounding moves the score by |b_ij|),
    alpha_i = sum_l P_il a_il, dP = g v^T, b_ij = sum |g_i| |v_j|, D_i = sum_j P_ij
    dP_ij and gap_ij = |dP_ij - D_i|: rounding q and k moves s_ij by 2 a_ij and P_ij by P_ij (2 a_ij + 2 alpha_i),
    the second part common to the row; g and v move dP_ij by 2 b_ij; D_i moves by 2 delta_i = 2 sum_j P_ij
    (a_ij gap_ij + b_ij). Then, with W = P (2 a gap + 2 b) + |dS|,
    dq: |dq| (1 + 2 alpha) + c W |k| + 2 c delta |P k| (the row-common parts act on dq and on P k as a whole),
    dk: |dk| + c (W + 2 alpha |dS| + 2 delta P)^T |q|, dv: |dv| + (P (1 + 2 a + 2 alpha))^T |g|.
    The (Lq, Lk) arrays are made whole per call; inputs broadcast along batch axes get the sum over them. The last
    `extra_keys` keys (a sink's, k = v = 0, its logit in the bias) are no output: dk and dv lose those rows.
    dz = -sum_i P_iz D_i: rounding the scores moves P_iz by at most P_iz (2 a_iz + 2 alpha_i) (the sink's a is
    |z| / 2, its dP 0) and D_i by 2 delta_i, so each query adds P_iz (|D_i| (2 a_iz + 2 alpha_i) + 2 delta_i),
    summed over the queries of every batch entry that shares the sink.

    With a softcap C the score is f_ij = C tanh(s_ij / C) + bias_ij (s = c q k^T, the bias after the cap),
    P = softmax(f), and with t = tanh(s / C) and sigma = d f / d s = sech(s / C)**2 = 1 - t**2 the VJP is
    dS = sigma F, F = P (dP - D), dq = c dS k, dk = c dS^T q, dv = P^T g. Rounding q and k moves s_ij by 2 a0_ij
    (a0 = c sum_t |q_it k_jt|), and so
    - f_ij by sigma_ij 2 a0_ij (and rounding the bias by |bias_ij| more, and rounding the capped score itself,
      which every kernel does, by |C t_ij| as the forward's scale counts it, `kinds._attention.modified_weights`):
      what P's movement reads (alpha, delta, dv's and dz's parts) takes a = sigma a0 + |bias| / 2 + |C t| / 2;
    - sigma_ij by |d sigma / d s| 2 a0_ij = 4 |t_ij| sigma_ij a0_ij / C (the bias moves no sigma: a0, not a).
    dS = sigma F moves by (sigma's movement) |F| + sigma (F's movement, the same as without a cap), so
    W = sigma P (2 a gap + 2 b) + |dS| + |F| 4 |t| sigma a0 / C; the row-common 2 alpha_i acts on dS's row as a
    whole (2 alpha |dq| in dq, 2 alpha |dS| in dk) and D's 2 delta_i through sigma P (2 c delta |(sigma P) k| in
    dq, 2 delta sigma P in dk). Without a cap sigma = 1 and t = 0, and each term is the one above. Not held: sigma
    formed as 1 - t**2 from a rounded t (which moves it by 2 t**2 u, far past sigma where the scores pass the cap:
    a stable sigma, from e**(-2 |s / C|), has no such error), nor where an algorithm rounds s / C apart from f.
    """
    with np.errstate(all="ignore"):
        q, k, v, g = (np.asarray(a, dtype=np.float64) for a in (q, k, v, g))
        dq, dk, dv, *dz = (np.asarray(r, dtype=np.float64) for r in grads)
        k, v = _finite(k), _finite(v)
        kt = np.swapaxes(k, -1, -2)
        p = _weights(q, kt, keep, scale, bias, softcap)
        c = abs(scale)
        # Every term below is a multiple of P, 0 at a key not kept: a, dP and b are 0 there too, so that a large k
        # or v there cannot make 0 x inf NaN.
        a0 = (np.abs(q) @ np.abs(kt)) * c  # rounding q and k moves s_ij by 2 a0_ij
        sigma, capped = 1.0, 0.0  # d f / d s: 1 without a cap
        if softcap is not None:
            cap = abs(softcap)
            ratio = (q @ kt) * scale / cap
            sigma = np.where(keep, 1 / np.cosh(ratio) ** 2, 0.0)  # not 1 - t**2: 0 in float64 past 19
            moved = np.where(keep, 4 * np.abs(np.tanh(ratio)) * sigma * a0 / cap, 0.0)  # sigma's own movement
            capped = cap * np.abs(np.tanh(ratio)) / 2  # the capped score rounded once
        a = np.where(keep, sigma * a0 + (0.0 if bias is None else np.abs(bias) / 2) + capped, 0.0)
        alpha = (p * a).sum(axis=-1, keepdims=True)
        dp = np.where(keep, g @ np.swapaxes(v, -1, -2), 0.0)
        b = np.where(keep, np.abs(g) @ np.abs(np.swapaxes(v, -1, -2)), 0.0)
        d = (p * dp).sum(axis=-1, keepdims=True)
        gap = np.abs(dp - d)
        delta = (p * (a * gap + b)).sum(axis=-1, keepdims=True)
        sp = sigma * p  # what D's movement acts through: dS = sigma P (dP - D)
        w = sp * (2 * a * gap + 2 * b + gap)  # sigma P (2 a gap + 2 b) + |dS|
        if softcap is not None:
            w = w + p * gap * moved  # + |F| |d sigma|
        q_part = np.abs(dq) * 2 * alpha + c * (w @ np.abs(k)) + 2 * c * delta * np.abs(sp @ k)
        k_part = c * (np.swapaxes(w + 2 * alpha * sp * gap + 2 * delta * sp, -1, -2) @ np.abs(q))
        v_part = np.swapaxes(p * (1 + 2 * a + 2 * alpha), -1, -2) @ np.abs(g)
        lk = k.shape[-2] - extra_keys
        k_part, v_part, k, v = (x[..., :lk, :] for x in (k_part, v_part, k, v))
        scales = tuple(
            np.abs(r) + _summed_to(part, x.shape)
            for r, part, x in zip((dq, dk, dv), (q_part, k_part, v_part), (q, k, v))
        )
        if not dz:
            return scales
        per_query = p[..., -1] * (np.abs(d[..., 0]) * (2 * a[..., -1] + 2 * alpha[..., 0]) + 2 * delta[..., 0])
        z_part = _summed_to(per_query.sum(axis=-1), dz[0].shape)
        return (*scales, np.nan_to_num(np.abs(dz[0]) + z_part))


def _summed_to(a: np.ndarray, shape: tuple) -> np.ndarray:
    """a summed over the leading axes that an input of `shape` was broadcast along (size 1 or absent there)."""
    extra = a.ndim - len(shape)
    a = a.sum(axis=tuple(range(extra))) if extra else a
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and a.shape[i] != 1)
    return a.sum(axis=axes, keepdims=True) if axes else a


def attention(q, k, v, keep, o, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """scale for o = softmax(c q k^T, keep) v, per output element (..., Lq, dv), and its values' part.

    |o| + sum_j p_j |v_j| (the values) + 2 sum_j p_j |v_j - o| a_j (queries and keys), with
    a_j = c sum_t |q_t k_jt| the first-order change of the score s_j when q and k are rounded. The keys' part is
    exact; the queries' part is its upper bound by the triangle inequality, which has the same form. The values'
    part, sum_j p_j |v_j|, is returned as well: the audit's max_ulp_vsum reads errors in its ulps.
    """
    with np.errstate(all="ignore"):
        q, k, v, o = (np.asarray(a, dtype=np.float64) for a in (q, k, v, o))
        # A NaN or infinity in a key or value a query may not attend is no part of its output (p = 0 there) and must
        # not reach its scale as 0 * NaN; a query that attends one is undefined, and its scale is never read.
        q, k, v = (_finite(a) for a in (q, k, v))
        kt = np.swapaxes(k, -1, -2)
        p = _weights(q, kt, keep, scale)
        # p_j a_j; 0 at a key not kept, where a large k would make 0 x inf NaN
        weight = np.where(keep, p * ((np.abs(q) @ np.abs(kt)) * scale), 0.0)
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
