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
(every rounding at its worst, every constant rounded up). The causes read them with pairwise and with running sums;
the fail line (`line`) with the sums of the standard algorithms of the dtype (`standard`): docs/policy.md, "The fail
line".

(Longer than the house's 400 lines: every kind's bound is built from the same per-rounding rules (`sums`, `_row`,
`_matmul`), and one kind's bound beside another's shows what differs.)
"""

from __future__ import annotations

import math

import numpy as np

from . import kinds
from .conditioning import _summed_to, _weights
from .kinds.cross_entropy import OPTIONS as CROSS_ENTROPY_OPTIONS


def PAIRWISE(n):
    """The roundings a pairwise sum of n terms passes each term through: ceil(log2 n)."""
    return np.ceil(np.log2(np.maximum(n, 1)))


def RUNNING(n):
    """The roundings a running (recursive) sum of n terms passes its first term through: n - 1."""
    return np.maximum(np.asarray(n, dtype=np.float64) - 1, 0)


#: Recursive summation in the dtype is a standard algorithm while (n - 1) u is at most this (float32 rows up to
#: 262,145 terms, float16 up to 33, bfloat16 up to 5): there its first-order bound (n - 1) u is within 1.6% of the
#: proven one, gamma_(n-1) = (n - 1) u / (1 - (n - 1) u), and a sum is off by at most 1/64 of its terms' magnitude.
#: Past it the bound grows without limit (at (n - 1) u = 1 a sum of equal terms stalls: float16 rows of 2,049
#: terms), and 16-bit kernels sum in float32: a running sum in the dtype there is judged against pairwise sums.
RUNNING_FRACTION = 1 / 64


def standard(u: float):
    """sums(n) of the standard algorithms in a dtype of unit roundoff u: n - 1, a running sum in the dtype, while
    (n - 1) u <= RUNNING_FRACTION, and ceil(log2 n), a pairwise sum, past it. Its `matmul` is a matrix product's
    contraction: for a dtype narrower than float32 the products are added in float32 and the sum rounded once to the
    dtype (as tensor cores and cuBLAS do by default, and the standard built-ins: candidates/_ops.py), 1 rounding of
    u and float32's sums of 2**-24 each; otherwise the dtype's own sums."""

    def sums(n, u=u):
        running = RUNNING(n)
        return np.where(running * u <= RUNNING_FRACTION, running, PAIRWISE(n))

    wide = 2.0**-24
    sums.matmul = (lambda n: 1 + sums(n, wide) * (wide / u)) if u > wide else sums
    return sums


def _matmul(sums):
    """The roundings of a matrix product's contraction of n terms: `sums.matmul` where the sums have one (the fail
    line's, `standard`), else the sums themselves (the causes' pairwise and running bounds)."""
    return getattr(sums, "matmul", sums)


#: Dtypes narrower than this many bits draw their fail line from the measured one widened by dT (`line`); the
#: others from T alone (softaudit.policy.Policy.proven_bits), and dT is not computed for them.
REORDER_BITS = 24


def line(kind: str, inputs: dict, mask, exact: tuple, precision: int, emin: int, options: dict | None = None):
    """(T, dT) for every output of `kind` on a case, the budgets the fail line reads (docs/policy.md, "The fail
    line"), in a dtype of `precision` bits and smallest normal 2**emin, with exp's growth: T the standard
    algorithms' (`standard` sums), dT = T less the pairwise one, what summing in another standard order can cost
    beyond pairwise sums (0 where a running sum is past RUNNING_FRACTION, and in dtypes of REORDER_BITS or more,
    which do not read it). None for a kind without a budget."""
    u = math.ldexp(1.0, -precision)
    tiny = math.ldexp(1.0, max(emin, -1074))
    found = of(kind, inputs, mask, exact, standard(u), tiny, options, u)
    if found is None:
        return None
    if precision >= REORDER_BITS:
        return tuple((t, np.zeros(np.shape(t))) for t in found)
    pairwise = of(kind, inputs, mask, exact, PAIRWISE, tiny, options, u)
    with np.errstate(invalid="ignore"):  # (inf - inf where both are infinite: no share known, 0; T is inf there)
        return tuple(
            (t, np.maximum(np.nan_to_num(t - p, nan=0.0, posinf=np.inf), 0.0)) for t, p in zip(found, pairwise)
        )


def of(
    kind: str,
    inputs: dict,
    mask,
    exact: tuple,
    sums=PAIRWISE,
    tiny: float = 0.0,
    options: dict | None = None,
    u: float = 0.0,
) -> tuple[np.ndarray, ...] | None:
    """The rounding budget T of each output of `kind` on a case (inputs in the dtype, the exact results), for a
    dtype whose smallest normal is `tiny`; None for a kind `BUDGETS` has no formula for (its budget is unknown).
    options: the case's keywords (cross-entropy's smoothing, z-loss, softcap, reduction; attention's modifiers are
    not read: its budget is that of the plain scores). u: the dtype's unit roundoff, for what exp makes of an
    argument's error (`_grown`); 0: first order throughout."""
    entry, formula = kinds.get(kind), BUDGETS.get(kind)
    return None if formula is None else formula(entry, inputs, mask, exact, sums, tiny, u, **(options or {}))


def _grown(e, u: float, p=None):
    """What exp makes of an argument off by up to u e, in units of u: (e**(u e) - 1) / u, which is e to first order
    and more where u e is not small (a bfloat16 lse near 800 is off by 3, and a weight exp(lse_s - lse) by a factor
    e**3); u = 0: e. p: the weights it multiplies, 0 where a weight is (an entry 1e10 below the max: its growth is
    inf, and 0 x inf would make the row's budget NaN; what such an entry costs is its tiny)."""
    with np.errstate(over="ignore"):
        grown = e if u == 0 else np.expm1(u * e) / u
    return grown if p is None else np.where(p > 0, grown, 0.0)


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


def rows(kind, inputs: dict, mask, exact: tuple, sums, tiny, u=0.0, **options) -> tuple[np.ndarray]:
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
        return (np.where(kept, p * _grown(big_e, u, p) + 2 * tiny, 0.0),)


def softmax_grad(kind, inputs: dict, mask, exact: tuple, sums, tiny, u=0.0, **options) -> tuple[np.ndarray]:
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
        grown = _grown(big_e, u, p)
        dot = (p * ag * (grown + sums(n) + 1) + tiny * (ag + 1)).sum(axis=-1, keepdims=True)
        terms = (p * grown + tiny) * np.abs(g - gbar) + p * (ag + np.abs(gbar) + dot)
        return (np.where(kept, terms + np.abs(exact[0]) + 3 * tiny, 0.0),)


def log_softmax_grad(kind, inputs: dict, mask, exact: tuple, sums, tiny, u=0.0, **options) -> tuple[np.ndarray]:
    """dx = g - p sum(g): p_i's error (p E + tiny) times |sum(g)|; the sum's, p_i sums(n) sum |g|; the product and the
    subtraction, |g_i| and |r_i|. At a -inf logit (p = 0) dx = g exactly: 2 |g_i| covers a g - 0 too."""
    with np.errstate(all="ignore"):
        x = np.asarray(inputs["x"], dtype=np.float64)
        kept, p, _, _, big_e = _row(x, mask, sums)
        read = kept | (x == -np.inf) if mask is None else kept
        g = np.where(read, np.asarray(inputs["g"], dtype=np.float64), 0.0)
        total = np.abs(g.sum(axis=-1, keepdims=True))
        n = read.sum(axis=-1, keepdims=True)
        pe = p * _grown(big_e, u, p) + tiny
        terms = np.abs(g) + pe * total + p * (total + sums(n) * np.abs(g).sum(axis=-1, keepdims=True))
        return (np.where(read, terms + np.abs(exact[0]) + 3 * tiny, 0.0),)


def logsumexp_grad(kind, inputs: dict, mask, exact: tuple, sums, tiny, u=0.0, **options) -> tuple[np.ndarray]:
    """dx = p g (g one value per row): p_i's error and the product's, (p_i (E_i + 1) + tiny) |g|, and |r_i|."""
    with np.errstate(all="ignore"):
        x = np.asarray(inputs["x"], dtype=np.float64)
        kept, p, _, _, big_e = _row(x, mask, sums)
        ag = np.abs(np.asarray(inputs["g"], dtype=np.float64))[..., None]
        return (np.where(kept, (p * (_grown(big_e, u, p) + 1) + tiny) * ag + np.abs(exact[0]) + 2 * tiny, 0.0),)


def _attention_weights(q, k, keep, sums, tiny, u=0.0, bias=None, softcap=None):
    """P, the scores' |q| |k| c (a), and P E + tiny, P's absolute error coefficient: each score is a dot of d terms
    rounded sums(d) + 2 times (its error at most that many u of a_j, and of sum_l P_l a_l through the row's shift
    and sum), then a row kind's E over the scores (with |lse| for exp(s - lse)). A bias b is added to each score in
    one more rounding: a gains |b| (the sum's size, rounded once). A softcap C carries the dot's error through
    tanh's slope sigma = sech(s / C)**2 and rounds the capped score C tanh(s / C) once more: a = sigma a + |C t|."""
    c = 1 / math.sqrt(q.shape[-1])
    kt = np.swapaxes(k, -1, -2)
    p = _weights(q, kt, keep, c, bias, softcap)
    b = 0.0 if bias is None else np.where(keep, bias, 0.0)
    size = (np.abs(q) @ np.abs(kt)) * c
    raw = (q @ kt) * c
    if softcap is not None:
        size = size / np.cosh(raw / softcap) ** 2 + softcap * np.abs(np.tanh(raw / softcap))
        raw = softcap * np.tanh(raw / softcap)
    a = np.where(keep, size + np.abs(b), 0.0)
    s = np.where(keep, raw + b, -np.inf)
    m = s.max(axis=-1, keepdims=True, initial=-np.inf)
    d = np.where(keep, np.abs(s - np.where(np.isfinite(m), m, 0.0)), 0.0)
    n = keep.sum(axis=-1, keepdims=True)
    total = np.where(keep, np.exp(-d), 0.0).sum(axis=-1, keepdims=True)
    lse = np.abs(np.where(np.isfinite(m), m, 0.0) + np.log(np.where(total > 0, total, 1.0)))
    dots = _matmul(sums)(q.shape[-1]) + 2
    spread = (p * d).sum(axis=-1, keepdims=True)
    big_e = dots * (a + (p * a).sum(axis=-1, keepdims=True)) + d + spread + sums(n) + 4 + lse
    return p, np.where(keep, p * _grown(big_e, u, p) + tiny, 0.0), n, c, np.where(keep, big_e, 0.0)


def _setting(inputs: dict, mask):
    q, k, v = (np.nan_to_num(np.asarray(inputs[n], dtype=np.float64), posinf=0.0, neginf=0.0) for n in "qkv")
    scores_shape = np.broadcast_shapes(q.shape[:-1] + (k.shape[-2],), k.shape[:-2] + (1, 1))
    keep = np.broadcast_to(True if mask is None else mask, scores_shape)
    return q, k, v, keep


def attention(kind, inputs: dict, mask, exact: tuple, sums, tiny, u=0.0, **options) -> tuple[np.ndarray]:
    """o = P V: each P_j's error and the sum's, sum_j (P_j E_j + tiny + P_j (sums(n) + 2)) |v_j|, each product's
    floor, and |o|."""
    with np.errstate(all="ignore"):
        q, k, v, keep = _setting(inputs, mask)
        p, pe, n, _, _ = _attention_weights(q, k, keep, sums, tiny, u)
        o = np.abs(np.asarray(exact[0], dtype=np.float64))
        return ((pe + p * (_matmul(sums)(n) + 2)) @ np.abs(v) + o + (n + 2) * tiny,)


def _backward_terms(inputs: dict, mask, options: dict, sums, tiny, u):
    """attention's backward terms for the budgets (float64, the problem as `kinds.attention_problem` forms it, a sink
    one more key): q, k, v, g, the extra keys, P and its error coefficient pe, the kept count n, c, dP, b = |g| |v|^T,
    D and D's error coefficient delta_D (attention_grad's)."""
    q, k, v, g, keep, bias, extra, cap = kinds.attention_problem(inputs, mask, options)
    q, k, v = (np.nan_to_num(a, posinf=0.0, neginf=0.0) for a in (q, k, v))
    p, pe, n, c, _ = _attention_weights(q, k, keep, sums, tiny, u, bias, cap)
    vt = np.swapaxes(v, -1, -2)
    dp = np.where(keep, g @ vt, 0.0)
    b = np.where(keep, np.abs(g) @ np.abs(vt), 0.0)
    dd = (p * dp).sum(axis=-1, keepdims=True)
    width = _matmul(sums)(v.shape[-1])
    delta = ((pe + p * (sums(n) + width + 3)) * (np.abs(dp) + b)).sum(axis=-1, keepdims=True) + n * tiny
    tanh = None if cap is None else np.where(keep, np.tanh((q @ np.swapaxes(k, -1, -2)) * c / cap), 0.0)
    return q, k, v, g, extra, p, pe, n, c, dp, b, dd, delta, tanh


def attention_grad(kind, inputs: dict, mask, exact: tuple, sums, tiny, u=0.0, **options) -> tuple[np.ndarray, ...]:
    """dS = P (dP - D), dP = g v^T (b = |g| |v|^T), D = sum_j P_j dP_j (or rowsum(dO o O): the same terms):
    dS's error coefficient sigma = (P E + tiny) |dP - D| + P (sums(dv) b + delta_D + |dP| + |D|) + |dS|, with
    delta_D = sum_j (P_j E_j + tiny + P_j (sums(n) + sums(dv) + 3)) (|dP_j| + b_j); then dq = c dS k and
    dk = c dS^T q add their own sums (sigma + (sums + 1) |dS|), and dv = P^T g, P's error and the sum over queries.
    Inputs broadcast along batch axes get the sum over them, as their gradients do. Causal and window (the options
    attention_grad takes) are the mask they make; a bias, ALiBi's and a sink's logit (a key of k = v = 0) add to the
    scores (`_attention_weights`), and the sink's own dk and dv are no output. A softcap's derivative
    sigma = 1 - t**2 (t = tanh(s / C)) multiplies dS: formed from the rounded t as kernels do, it is within
    (2 t**2 + 2) u of sigma, so dS = sigma F's coefficient is sigma times F's plus (2 t**2 + 2) |F|."""
    with np.errstate(all="ignore"):
        return _grad_budgets(_backward_terms(inputs, mask, options, sums, tiny, u), exact, sums, tiny)


def _grad_budgets(terms: tuple, exact: tuple, sums, tiny) -> tuple[np.ndarray, ...]:
    """attention_grad's budgets of dq, dk, dv from `_backward_terms`."""
    q, k, v, g, extra, p, pe, n, c, dp, b, dd, delta, tanh = terms
    ds = p * (dp - dd)
    width = _matmul(sums)(v.shape[-1])
    sigma = pe * np.abs(dp - dd) + p * (width * b + delta + np.abs(dp) + np.abs(dd)) + np.abs(ds) + 3 * tiny
    if tanh is not None:  # dS = (1 - t**2) F
        slope = 1 - tanh**2
        sigma = slope * sigma + (2 * tanh**2 + 2) * np.abs(ds)
        ds = slope * ds
    queries = _matmul(sums)(q.shape[-2])
    dq = c * ((sigma + (_matmul(sums)(n) + 1) * np.abs(ds)) @ np.abs(k))
    dk = c * (np.swapaxes(sigma + (queries + 1) * np.abs(ds), -1, -2) @ np.abs(q))
    dv = np.swapaxes(pe + p * (queries + 2), -1, -2) @ np.abs(g) + (queries + 2) * tiny
    lk = k.shape[-2] - extra
    dk, dv, k, v = (a[..., :lk, :] for a in (dk, dv, k, v))
    return tuple(
        _summed_to(part, x.shape) + np.abs(np.asarray(r, dtype=np.float64))
        for part, x, r in zip((dq, dk, dv), (q, k, v), exact)
    )


def attention_sinks_grad(
    kind, inputs: dict, mask, exact: tuple, sums, tiny, u=0.0, **options
) -> tuple[np.ndarray, ...]:
    """dq, dk, dv: attention_grad's with the sinks. dz = -sum_i P_iz D_i: each term's error coefficient
    (P_iz E_iz + tiny) |D_i| + P_iz (delta_D + (sums(Lq) + 1) |D_i|) (the product and the sum over the queries), summed
    over the queries and the batch entries that share the sink, and |dz|."""
    with np.errstate(all="ignore"):
        terms = _backward_terms(inputs, mask, options, sums, tiny, u)
        grads = _grad_budgets(terms, exact[:3], sums, tiny)
        q, *_, p, pe, _, _, _, _, dd, delta, _ = terms
        p_z, pe_z, d = p[..., -1:], pe[..., -1:], np.abs(dd)
        terms = pe_z * d + p_z * (delta + (sums(q.shape[-2]) + 1) * d)
        dz = _summed_to(terms[..., 0].sum(axis=-1), np.shape(exact[3]))
        return (*grads, dz + np.abs(np.asarray(exact[3], dtype=np.float64)) + tiny)


def _cross_entropy_rows(inputs: dict, sums, o: dict):
    """The rows of a cross-entropy case in float64, by name: the (softcapped) logits z, |z| and their row quantities
    (`_row`: kept, p, big_e), the targets y (0 where ignored), the ignored rows, lse, the log-sum-exp's budget
    t_lse (logsumexp's, plus 3 |z| for each softcapped logit's own roundings: the division, tanh, the product) and
    the softcap's sech**2 factors."""
    x = np.asarray(inputs["logits"], dtype=np.float64)
    t = np.asarray(inputs["target"], np.int64)
    ignored = t == o["ignore_index"]
    y = np.where(ignored, 0, t)
    cap = o["softcap"]
    z = x if cap is None else np.where(np.isfinite(x), cap * np.tanh(x / cap), x)
    kept, p, log_s, m, big_e = _row(z, None, sums)
    lse = m + log_s
    az = np.where(kept, np.abs(z), 0.0)
    t_lse = np.abs(m) + log_s + big_e.max(axis=-1, keepdims=True) + np.abs(lse)
    if cap is not None:
        t_lse = t_lse + 3 * az.max(axis=-1, keepdims=True)
    factor = 1.0 if cap is None else np.where(kept, 1 / np.cosh(x / cap) ** 2, 0.0)
    return {
        "z": z,
        "kept": kept,
        "p": p,
        "big_e": big_e,
        "y": y,
        "ignored": ignored,
        "lse": lse,
        "t_lse": t_lse,
        "az": az,
        "factor": factor,
    }


def cross_entropy(kind, inputs: dict, mask, exact: tuple, sums, tiny, u=0.0, **options) -> tuple[np.ndarray]:
    """loss = lse - (1 - eps) z_y - eps mean(z) + zl lse**2 per row: the log-sum-exp's budget T_lse (logsumexp's,
    over the softcapped logits, each of those carrying 3 roundings of its own), the target's logit (|z_y|, and 3
    |z_y| more under a softcap), smoothing's mean (eps (sums(V) + 2) mean |z|), the z-loss (2 zl |lse| T_lse + 2 zl
    lse**2), and the row's own additions (2 |loss|). A mean or sum adds the rows' budgets and its own sum's
    roundings (sums(N) sum |loss_i|), over N for a mean. Ignored rows cost nothing (exactly 0)."""
    o = CROSS_ENTROPY_OPTIONS | options
    with np.errstate(all="ignore"):
        c = _cross_entropy_rows(inputs, sums, o)
        z, kept, y, ignored, lse, t_lse, az = (c[n] for n in ("z", "kept", "y", "ignored", "lse", "t_lse", "az"))
        rows = np.arange(len(z))
        eps, zl = o["label_smoothing"], o["z_loss"]
        zy = np.abs(z[rows, y])[:, None]
        v = kept.sum(axis=-1, keepdims=True)
        mean_z = az.sum(axis=-1, keepdims=True) / np.maximum(v, 1)
        loss = np.abs(lse - (1 - eps) * z[rows, y][:, None] - eps * mean_z + zl * lse**2)
        per = t_lse + (1 - eps + eps / np.maximum(v, 1)) * zy * (1 if o["softcap"] is None else 4)
        per = per + eps * (sums(v) + 2) * mean_z + 2 * abs(zl) * np.abs(lse) * t_lse + 2 * abs(zl) * lse**2
        per = np.where(ignored[:, None], 0.0, per + 2 * loss)[:, 0]
        loss = np.where(ignored[:, None], 0.0, loss)[:, 0]
        r = np.abs(np.asarray(exact[0], dtype=np.float64))
        if o["reduction"] == "none":
            return (per + r + tiny,)
        counted = int((~ignored).sum())
        div = max(counted, 1) if o["reduction"] == "mean" else 1
        total = (per.sum() + sums(max(counted, 1)) * loss.sum()) / div
        return (total + r + tiny,)


def cross_entropy_grad(kind, inputs: dict, mask, exact: tuple, sums, tiny, u=0.0, **options) -> tuple[np.ndarray]:
    """dlogits_j = w f_j ((1 + 2 zl lse) p_j - q_j), w = g (over N for a mean), f_j = sech**2(x_j / c) (1 without a
    softcap): p_j's error ((p E + tiny) |1 + 2 zl lse|), the z-loss's lse (2 zl p_j T_lse), q_j's rounding (|q_j|),
    and the subtraction and the products with w and f (2 |a_j|, and under a softcap f's own roundings, 3 + 2 |t
    tanh t| with t = x_j / c); then |r_j|. Under a softcap, f formed as kernels form it, 1 - tanh**2 from the
    rounded tanh, also costs (2 tanh**2 + 2) |a_j| not scaled by f (attention's dS carries the same term): where
    the cap saturates that is the whole of f, so such a kernel stays within the line (a warn where best practice,
    f from exp, is exact). A lane whose logit is -inf has p = 0 and, under label smoothing, the exact gradient
    -w eps / V: its budget is that term's and the output's rounding. Ignored rows are exactly 0."""
    o = CROSS_ENTROPY_OPTIONS | options
    with np.errstate(all="ignore"):
        c = _cross_entropy_rows(inputs, sums, o)
        z, kept, p, big_e, y, ignored, lse, t_lse = (
            c[n] for n in ("z", "kept", "p", "big_e", "y", "ignored", "lse", "t_lse")
        )
        n, v = z.shape
        rows = np.arange(n)
        counted = int((~ignored).sum())
        div = max(counted, 1) if o["reduction"] == "mean" else 1
        w = np.abs(np.broadcast_to(np.asarray(inputs["g"], dtype=np.float64), (n,)) / div)[:, None]
        eps, zl = o["label_smoothing"], o["z_loss"]
        t2 = np.abs(1 + 2 * zl * lse)
        q = np.full(z.shape, eps / v)
        q[rows, y] += 1 - eps
        a = np.abs(t2 * p - q)
        own, cancel = 2.0, 0.0
        if o["softcap"] is not None:  # sech**2(x / c): the division's (2 |t tanh t|, t = x / c), cosh, 1 / cosh, **2
            t = np.asarray(inputs["logits"], dtype=np.float64) / o["softcap"]
            own = 5 + 2 * np.abs(t * np.tanh(t))
            cancel = (2 * np.tanh(t) ** 2 + 2) * a  # (1 - tanh**2 from the rounded tanh)
        terms = (p * _grown(big_e, u, p) + tiny) * t2 + 2 * abs(zl) * p * t_lse + q + own * a
        r = np.abs(np.asarray(exact[0], dtype=np.float64))
        # a -inf logit's lane (not kept) has the exact gradient -w q_j under label smoothing (0 under a softcap,
        # whose factor is 0 there): its own rounding and q's
        unkept = (w * q if o["softcap"] is None else 0.0) + 2 * r + tiny
        found = np.where(kept, w * (c["factor"] * terms + cancel) + 2 * r + tiny, unkept)
        return (np.where(ignored[:, None], 0.0, found),)


def _linear_rows(inputs: dict, sums, o: dict):
    """linear_cross_entropy's logits L = x W^T + b in float64, as cross-entropy's budget reads them, and each logit's
    error coefficient as the standard algorithms form it: the product's sums(H) + 1 roundings of |x| |W|^T (the
    matmul's), one more of |L| rounding it to the dtype and one of |x W^T| + |b| adding the bias; with cross-entropy's
    row quantities over L (kinds.cross_entropy's: a = dloss/dz and the softcap's factors)."""
    from .kinds.cross_entropy import row_parts

    x = np.nan_to_num(np.asarray(inputs["x"], dtype=np.float64))
    w = np.nan_to_num(np.asarray(inputs["weight"], dtype=np.float64))
    b = inputs.get("bias")
    b = np.zeros(len(w)) if b is None else np.nan_to_num(np.asarray(b, dtype=np.float64))
    product = x @ w.T
    size = np.abs(x) @ np.abs(w).T
    logits = product + b
    err = (_matmul(sums)(x.shape[1]) + 1) * size + np.abs(logits) + np.abs(product) + np.abs(b)
    t = np.asarray(inputs["target"], np.int64)
    kept, p, t2, a, factor, _, ignored, _, _ = row_parts(logits, t, o)
    return x, w, logits, err, t, kept, p, t2, a, factor, ignored


def linear_cross_entropy(kind, inputs: dict, mask, exact: tuple, sums, tiny, u=0.0, **options) -> tuple[np.ndarray]:
    """cross-entropy's budget of the logits L = x W^T + b, and what the logits' own errors move the loss by: sum_v
    |dloss/dL_v| e_v, with e_v the product's, the dtype's and the bias's roundings of L_v (`_linear_rows`); over N
    for a mean."""
    o = CROSS_ENTROPY_OPTIONS | options
    with np.errstate(all="ignore"):
        _, _, logits, err, t, kept, _, _, a, factor, ignored = _linear_rows(inputs, sums, o)
        ce = {"logits": logits, "target": t}
        (found,) = cross_entropy(kind, ce, mask, exact, sums, tiny, u, **options)
        moved = np.where(ignored, 0.0, np.where(kept, np.abs(a) * factor * err, 0.0).sum(axis=1))
        if o["reduction"] == "none":
            return (found + moved,)
        div = max(int((~ignored).sum()), 1) if o["reduction"] == "mean" else 1
        return (found + moved.sum() / div,)


def linear_cross_entropy_grad(
    kind, inputs: dict, mask, exact: tuple, sums, tiny, u=0.0, **options
) -> tuple[np.ndarray, ...]:
    """dz = dloss/dL: cross_entropy_grad's budget T_dz on the logits, and the logits' errors e through softmax's
    Jacobian, |w| f_j |c| p_j (e_j + sum_k p_k e_k); then dx = dz W, dW = dz^T x and db = sum_n dz: T_dz' |W|,
    T_dz'^T |x| and sum_n T_dz', with their own sums (sums(V) + 1, sums(N) + 1 of |dz| |W|, |dz|^T |x|, sum |dz|),
    and |r|."""
    o = CROSS_ENTROPY_OPTIONS | options
    with np.errstate(all="ignore"):
        x, w, logits, err, t, kept, p, t2, a, factor, ignored = _linear_rows(inputs, sums, o)
        g = np.asarray(inputs["g"], dtype=np.float64)
        counted = int((~ignored).sum())
        div = max(counted, 1) if o["reduction"] == "mean" else 1
        weight = np.where(ignored, 0.0, np.abs(np.broadcast_to(g, (len(x),)) / div))[:, None]
        dz = np.where(kept & ~ignored[:, None], weight * a * factor, 0.0)
        ce = {"logits": logits, "target": t, "g": g}
        (t_dz,) = cross_entropy_grad(kind, ce, mask, (dz,), sums, tiny, u, **options)
        e = np.where(kept, err, 0.0)
        spread = e + (p * e).sum(axis=1, keepdims=True)
        t_dz = np.where(ignored[:, None], 0.0, t_dz + weight * factor * np.abs(1 + t2)[:, None] * p * spread)
        x = np.where(ignored[:, None], 0.0, x)
        adz = np.abs(dz)
        mm = _matmul(sums)
        dx = (t_dz + (mm(w.shape[0]) + 1) * adz) @ np.abs(w)
        dw = (t_dz + (mm(len(x)) + 1) * adz).T @ np.abs(x)
        db = (t_dz + (mm(len(x)) + 1) * adz).sum(axis=0)
        return tuple(part + np.abs(np.asarray(r, dtype=np.float64)) + tiny for part, r in zip((dx, dw, db), exact))


def attention_lse(kind, inputs: dict, mask, exact: tuple, sums, tiny, u=0.0, **options) -> tuple[np.ndarray, ...]:
    """o: attention's. lse = m + log sum exp(s - m) over the scores: the largest of its terms' error coefficients
    (E with the scores' dots, as attention's), and the two additions (2 |lse|)."""
    with np.errstate(all="ignore"):
        (o,) = attention(kind, inputs, mask, exact[:1], sums, tiny, u)
        q, k, _, keep = _setting(inputs, mask)
        _, _, n, _, big_e = _attention_weights(q, k, keep, sums, tiny)
        lse = np.abs(np.asarray(exact[1], dtype=np.float64))
        # log sum_j p_j e**(u E_j) <= u max_j E_j, whatever the weights (a mean of the errors would not bound it)
        return o, big_e.max(axis=-1, initial=0.0) + 2 * lse + (n[..., 0] + 2) * tiny


def merge_attention(kind, inputs: dict, mask, exact: tuple, sums, tiny, u=0.0, **options) -> tuple[np.ndarray, ...]:
    """The weights w_s = exp(lse_s - lse) of the S splits are a softmax over the lses (a row kind's E over them);
    o = sum_s w_s o_s: sum_s (w_s E_s + tiny + w_s (sums(S) + 2)) |o_s| and |o|; lse: logsumexp's budget over the
    lses. Splits whose lse is -inf weigh nothing."""
    with np.errstate(all="ignore"):
        lses = np.moveaxis(np.asarray(inputs["lses"], dtype=np.float64), 0, -1)  # (..., Lq, S)
        outs = np.moveaxis(np.abs(np.asarray(inputs["outputs"], dtype=np.float64)), 0, -2)  # (..., Lq, S, dv)
        kept, w, log_s, m, big_e = _row(lses, None, sums)
        splits = kept.sum(axis=-1, keepdims=True)
        coefficient = np.where(kept, w * _grown(big_e, u, w) + tiny + w * (sums(splits) + 2), 0.0)
        o = (coefficient[..., None] * np.where(kept[..., None], outs, 0.0)).sum(axis=-2)
        o = o + np.abs(np.asarray(exact[0], dtype=np.float64)) + (splits + 2) * tiny
        lse = np.abs(m) + log_s + big_e.max(axis=-1, keepdims=True, initial=0.0)
        return o, lse[..., 0] + np.abs(np.asarray(exact[1], dtype=np.float64)) + tiny


#: Each kind's budget, by name: a budget is a formula of the kind's standard algorithm, not of its shape. A kind
#: missing here has none, and the causes read its errors against the conditioning scale alone (causes.classify).
def unbounded(kind, inputs: dict, mask, exact: tuple, sums, tiny, u=0.0, **options) -> tuple[np.ndarray, ...]:
    """No proven budget, T unbounded for every output, so the line is the one measured on the comparisons
    (`Kind.measured`: policy.fail_above, in every dtype): attention_fp8's P converted to FP8 has no bound sharp
    enough to judge by (a P in e4m3 costs up to 2**-4 of each weight), and quantize_fp8's measure is in steps of
    each output's format, against the standard step's."""
    return tuple(np.full(np.shape(e), np.inf) for e in exact)


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
    "attention_sinks_grad": attention_sinks_grad,
    "cross_entropy": cross_entropy,
    "cross_entropy_grad": cross_entropy_grad,
    "linear_cross_entropy": linear_cross_entropy,
    "linear_cross_entropy_grad": linear_cross_entropy_grad,
    "attention_lse": attention_lse,
    "merge_attention": merge_attention,
    "attention_fp8": unbounded,
    "quantize_fp8": unbounded,
}
