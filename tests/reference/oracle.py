"""An independent oracle for the reference tests: plain mpmath formulas and a rounding written another way.

Nothing here imports softaudit. Rounding uses mpmath.frexp and mpmath.nint (ties to even) instead of the integer
bit manipulation the package uses, so a shared mistake is unlikely.
"""

import math
from fractions import Fraction
from functools import partial

import ml_dtypes
import mpmath
import numpy as np


def info(dtype):
    dt = np.dtype(dtype)
    return ml_dtypes.finfo(dt)


def round_to(value, dtype) -> float:
    """The mpf `value` rounded to nearest-even in `dtype`, as a float64 (inf or NaN on overflow as the dtype does)."""
    fi = info(dtype)
    p, emin = int(fi.nmant) + 1, int(fi.minexp)
    if mpmath.isnan(value):
        return math.nan
    if mpmath.isinf(value):
        return float(value)
    if value == 0:
        return 0.0
    _, exp = mpmath.frexp(value)  # value = f 2**exp with 0.5 <= |f| < 1
    qe = max(exp - 1, emin) - (p - 1)
    n = mpmath.nint(mpmath.ldexp(value, -qe))
    rounded = mpmath.ldexp(n, qe)
    if abs(rounded) > mpmath.mpf(float(fi.max)):
        overflow = float(np.array([np.inf]).astype(dtype).astype(np.float64)[0])
        return math.copysign(overflow, float(value)) if not math.isnan(overflow) else math.nan
    return float(rounded) if rounded != 0 else math.copysign(0.0, float(value))


def precision_for(dtype) -> int:
    """Twice the target's precision, plus guard bits."""
    return 2 * (int(info(dtype).nmant) + 1) + 20


def _row_values(row, keep):
    return [mpmath.mpf(float(v)) for v, k in zip(row, keep) if k and not (math.isinf(float(v)) and float(v) < 0)]


def combine(base, corr, digits):
    """base + corr exactly, with an astronomically small corr replaced by a tiny one of the same sign.

    If |corr| < |base| 2**-digits, every number between base and base + corr rounds like base + corr to any
    format of fewer than digits - 10 bits; shrinking corr keeps the exact sum small enough to form.
    """
    if base != 0 and corr != 0 and abs(corr) < abs(base) * mpmath.ldexp(1, -digits):
        corr = mpmath.sign(corr) * abs(base) * mpmath.ldexp(1, -digits)
    return mpmath.fadd(base, corr, exact=True)


def row_kind(kind, row, keep, prec):
    """softmax, log_softmax or logsumexp of one row at `prec` bits (NaN for an undefined softmax row).

    log s is taken as log1p of the sum without the top entry, so log_softmax of a dominant entry keeps its size.
    """
    row = np.asarray(row).astype(np.float64)
    keep = np.ones(len(row), bool) if keep is None else np.asarray(keep)
    kept_values = row[keep]
    if np.isnan(kept_values).any() or (kind != "logsumexp" and (kept_values == np.inf).any()):
        return [mpmath.nan] * len(row) if kind != "logsumexp" else mpmath.nan
    if kind == "logsumexp" and (kept_values == np.inf).any():
        return mpmath.inf
    xs = _row_values(row, keep)
    if not xs:
        return [mpmath.nan] * len(row) if kind != "logsumexp" else -mpmath.inf
    with mpmath.workprec(prec):
        m = max(xs)
        ts = [mpmath.fsub(x, m, exact=True) for x in xs]
        top = ts.index(0)
        rest = mpmath.fsum(mpmath.exp(t) for j, t in enumerate(ts) if j != top)
        log_s = mpmath.log1p(rest)
        if kind == "logsumexp":
            return combine(m, log_s, 4 * prec)
        out = []
        for v, k in zip(row, keep):
            if not k or v == -np.inf:
                out.append(mpmath.mpf(0) if kind == "softmax" else -mpmath.inf)
                continue
            t = mpmath.fsub(mpmath.mpf(float(v)), m, exact=True)
            out.append(mpmath.exp(t) / (1 + rest) if kind == "softmax" else combine(t, -log_s, 4 * prec))
        return out


def attention_row(q, ks, vs, keep, scale, prec):
    """One query's attention output (a list over value columns) at `prec` bits."""
    with mpmath.workprec(prec):
        d = len(q)
        c = mpmath.mpf(1) / mpmath.sqrt(d) if scale is None else mpmath.mpf(scale)
        scores = [
            c * mpmath.fsum(mpmath.mpf(float(a)) * mpmath.mpf(float(b)) for a, b in zip(q, k))
            for k, kk in zip(ks, keep)
            if kk
        ]
        values = [v for v, kk in zip(vs, keep) if kk]
        m = max(scores)
        weights = [mpmath.exp(s - m) for s in scores]
        total = mpmath.fsum(weights)
        return [
            mpmath.fsum(w * mpmath.mpf(float(v[c_])) for w, v in zip(weights, values)) / total
            for c_ in range(len(vs[0]))
        ]


def near_boundary(value, dtype, prec) -> bool:
    """True when `value`, known to about `prec` bits, may lie on either side of a rounding boundary."""
    if not mpmath.isfinite(value) or value == 0:
        return False
    with mpmath.workprec(prec + 20):
        slack = abs(value) * mpmath.ldexp(1, 8 - prec)
        return round_to(value - slack, dtype) != round_to(value + slack, dtype)


def rounded(compute, dtype):
    """Round compute(prec) to dtype: at twice dtype's precision, and at 10, 80 and 640 times that while a value is
    too near a rounding boundary to tell (an exact midpoint stays there: it rounds to even).

    Twice the precision is not always enough: log_softmax of a dominant row is x - m (often a midpoint of the
    dtype) minus a tiny log-sum, e.g. -211.8125 - 7e-23 in float16; a float16 softmax gradient of [0, 0, -1000]
    is a midpoint moved by about e**-1000 = 2**-1443, which only thousands of bits see.
    """
    prec = precision_for(dtype)
    values = compute(prec)
    for times in (10, 80, 640):
        if not any(near_boundary(v, dtype, prec) for v in values):
            break
        prec = precision_for(dtype) * times
        values = compute(prec)
    return [round_to(v, dtype) for v in values]


def rounded_rows(kind, x, dtype, mask=None):
    """The oracle's rounding of `kind` along the last axis of a 2-D x, as a float64 array."""
    out = []
    for i, row in enumerate(x):
        keep = None if mask is None else mask[i]
        if kind == "logsumexp":
            out.append(rounded(lambda prec, row=row, keep=keep: [row_kind(kind, row, keep, prec)], dtype)[0])
        else:
            out.append(rounded(partial(row_kind, kind, row, keep), dtype))
    return np.array(out, dtype=np.float64)


def _softmax_values(xs):
    """The softmax of mpf values at the working precision, with max subtracted exactly."""
    m = max(xs)
    es = [mpmath.exp(mpmath.fsub(x, m, exact=True)) for x in xs]
    total = mpmath.fsum(es)
    return [e / total for e in es]


def _exact_sum(values):
    """The exact sum of mpf values (mpmath's fsum rounds to the working precision)."""
    total = mpmath.mpf(0)
    for v in values:
        total = mpmath.fadd(total, v, exact=True)
    return total


def _softmax_others(xs):
    """1 - p_j for each j (the others' share of the softmax), at the working precision without cancellation."""
    m = max(xs)
    es = [mpmath.exp(mpmath.fsub(x, m, exact=True)) for x in xs]
    total = mpmath.fsum(es)
    before, after = [mpmath.mpf(0)], [mpmath.mpf(0)]  # sums of the terms before j and after j (all positive)
    for e, e_back in zip(es, reversed(es)):
        before.append(before[-1] + e)
        after.append(after[-1] + e_back)
    return [(before[j] + after[len(es) - 1 - j]) / total for j in range(len(es))]


def grad_row(kind, row, g, keep, prec):
    """The plain vector-Jacobian product of one row at `prec` bits (a list; g a list, or one value for
    logsumexp_grad). softmax_grad uses the sum of exact differences p_i sum_k p_k (g_i - g_k), so a constant g gives 0.
    Removed entries (masked or -inf) give 0, but log_softmax_grad's -inf entries give g; a row with no kept entry
    gives zeros."""
    row = [float(v) for v in np.asarray(row).astype(np.float64)]
    keep = [True] * len(row) if keep is None else list(keep)
    kept = [j for j, v in enumerate(row) if keep[j] and v != -math.inf]
    out = [mpmath.mpf(0)] * len(row)
    if not kept:
        return out
    with mpmath.workprec(prec):
        p = _softmax_values([mpmath.mpf(row[j]) for j in kept])
        if kind == "logsumexp_grad":
            gv = mpmath.mpf(float(g))
            for j, pj in zip(kept, p):
                out[j] = pj * gv
            return out
        gs = [mpmath.mpf(float(g[j])) for j in kept]
        if kind == "log_softmax_grad":  # g is read at -inf logits too: p = 0 there, so dx = g
            if any(math.isnan(row[j]) or row[j] == math.inf for j in kept):
                # undefined (a NaN or +inf logit): every entry reads the row's sum of g, NaN throughout (even a
                # row of one +inf, whose tie below would give g - g = 0)
                return [mpmath.nan] * len(row)
            read = [j for j in range(len(row)) if keep[j]]
            for j in read:
                out[j] = mpmath.mpf(float(g[j]))
            if len({row[j] for j in kept}) == 1:
                # Ties: p = 1 / n is rational, and g_j - sum(g) / n may be exactly 0, which a rounded product
                # leaves as a residue of either sign: formed exactly instead (an exact 0 is +0).
                exact = sum(Fraction(float(g[j])) for j in read) / len(kept)
                for j in kept:
                    value = Fraction(float(g[j])) - exact
                    out[j] = mpmath.mpf(value.numerator) / value.denominator
                return out
            # dx_j = g_j - p_j sum g = g_j (1 - p_j) - p_j (sum g - g_j): the sums of g exact (a subnormal g beside
            # +-1 must count), 1 - p_j the others' share (no cancellation where p_j is near 1)
            exact_total = _exact_sum(mpmath.mpf(float(g[j])) for j in read)
            others = _softmax_others([mpmath.mpf(row[j]) for j in kept])
            for j, pj, qj, gj in zip(kept, p, others, gs):
                out[j] = gj * qj - pj * mpmath.fsub(exact_total, gj, exact=True)
            return out
        for j, pj, gj in zip(kept, p, gs):
            out[j] = pj * mpmath.fsum(pk * mpmath.fsub(gj, gk, exact=True) for pk, gk in zip(p, gs))
        return out


def rounded_grad_rows(kind, x, g, dtype, mask=None):
    """The oracle's rounding of `kind` along the last axis of a 2-D x, as a float64 array."""
    out = []
    for i, row in enumerate(x):
        keep = None if mask is None else mask[i]
        out.append(rounded(partial(grad_row, kind, row, g[i], keep), dtype))
    return np.array(out, dtype=np.float64)


def attention_grad_exact(q, k, v, g, keep, scale, prec):
    """(dq, dk, dv) of one batch entry at `prec` bits, plainly: P, dV = P^T dO, dP = dO V^T, dS = P (dP - D),
    dQ = c dS K, dK = c dS^T Q. A query with no kept key has P = 0."""
    with mpmath.workprec(prec):

        def mp(a):
            return [[mpmath.mpf(float(x)) for x in r] for r in np.asarray(a).astype(np.float64)]

        Q, K, V, G = mp(q), mp(k), mp(v), mp(g)
        lq, lk, d, dv = len(Q), len(K), len(Q[0]), len(V[0])
        c = mpmath.mpf(1) / mpmath.sqrt(d) if scale is None else mpmath.mpf(scale)
        P = []
        for i in range(lq):
            cols = [j for j in range(lk) if keep[i][j]]
            row = [mpmath.mpf(0)] * lk
            if cols:
                s = [c * mpmath.fsum(Q[i][a] * K[j][a] for a in range(d)) for j in cols]
                for j, pj in zip(cols, _softmax_values(s)):
                    row[j] = pj
            P.append(row)
        dP = [[mpmath.fsum(G[i][a] * V[j][a] for a in range(dv)) for j in range(lk)] for i in range(lq)]
        dS = [
            [P[i][j] * mpmath.fsum(P[i][l] * (dP[i][j] - dP[i][l]) for l in range(lk)) for j in range(lk)]
            for i in range(lq)
        ]
        # dq as sum over key pairs of P_j P_l (dP_j - dP_l)(K_j - K_l): a column of K with equal values gives 0
        # exactly, as it must (dS sums to 0 along a row), where sum_j dS_j K_j would leave rounding noise.
        pairs = [(j, m) for j in range(lk) for m in range(j + 1, lk)]
        dq = [
            [
                c * mpmath.fsum(P[i][j] * P[i][m] * (dP[i][j] - dP[i][m]) * (K[j][a] - K[m][a]) for j, m in pairs)
                for a in range(d)
            ]
            for i in range(lq)
        ]
        dk = [[c * mpmath.fsum(dS[i][j] * Q[i][a] for i in range(lq)) for a in range(d)] for j in range(lk)]
        dvv = [[mpmath.fsum(P[i][j] * G[i][a] for i in range(lq)) for a in range(dv)] for j in range(lk)]
        return dq, dk, dvv


def attention_grad_exact_broadcast(q, k, v, g, keep, scale, prec):
    """(dq, dk, dv) at `prec` bits, as object arrays of mpf of q's, k's and v's shapes, with k and v broadcast
    against q along batch axes: attention_grad_exact on every batch entry, then the chain rule through the broadcast,
    written out: a K/V head's gradient is the sum (mpmath's fsum) of the gradients of every batch entry that reads
    it. keep broadcasts to q's batch shape x (Lq, Lk). Also returns the bits lost to cancellation in those sums (the
    largest log2 of sum |terms| / |sum|), so that a caller can tell how far `prec` bits are to be trusted."""
    q, k, v, g = (np.asarray(a) for a in (q, k, v, g))
    batch = q.shape[:-2]
    keep = np.broadcast_to(keep, batch + (q.shape[-2], k.shape[-2]))
    dq = np.empty(q.shape, object)
    terms = {name: {} for name in ("k", "v")}  # element of k or v -> its terms

    def source(a, index):
        """The index of a's batch entry that batch entry `index` reads (0 where a is broadcast)."""
        lead = a.ndim - 2
        return tuple(0 if a.shape[i] == 1 else index[len(index) - lead + i] for i in range(lead))

    for index in np.ndindex(*batch):
        ks, vs = source(k, index), source(v, index)
        dq_b, dk_b, dv_b = attention_grad_exact(q[index], k[ks], v[vs], g[index], keep[index], scale, prec)
        for i, row in enumerate(dq_b):
            for a, x in enumerate(row):
                dq[index + (i, a)] = x
        for name, at, part in (("k", ks, dk_b), ("v", vs, dv_b)):
            for j, row in enumerate(part):
                for a, x in enumerate(row):
                    terms[name].setdefault(at + (j, a), []).append(x)
    lost = 0
    out = []
    with mpmath.workprec(prec):
        for name, a in (("k", k), ("v", v)):
            total = np.empty(a.shape, object)
            for at, xs in terms[name].items():
                total[at] = mpmath.fsum(xs)
                size = mpmath.fsum(xs, absolute=True)
                if total[at] != 0:
                    lost = max(lost, int(mpmath.ceil(mpmath.log(size / abs(total[at]), 2))))
            out.append(total)
    return dq, out[0], out[1], lost
