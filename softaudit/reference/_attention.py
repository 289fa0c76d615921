"""Scaled dot-product attention: o = softmax(c q k^T, masked) v, c = 1/sqrt(d) unless given.

Tier A: float64 matrix products with the dot-product bound gamma_n sum|q||k| (true for any summation order, with or
without FMA, so for any BLAS). Tier B: scores as exact products summed in double-double, exp_dd, and output
numerators in double-double. Tier C: exact scores and mpmath (_exact_attention.attention_row). Work is done in
chunks of query rows so memory stays O(input + output). Outputs that cancel (|o| far below sum p|v|) are what tier A
and B cannot decide; tier C can, and it rounds rational outputs (a uniform softmax over equal values, say) exactly.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from mpmath import libmp

from . import _dd, _exact_attention, _torch_tier
from ._dd import TINY, U
from ._engine import Result, _Collector, fast_input, fast_target, row_blocks, tier_a_target
from ._formats import Format, decide_arrays, exact_mpf
from ._rows import LIBM_EXP_REL, LIBM_LOG1P_REL, Approx
from ._validate import bool_mask, float_array

_BLOCK = 1 << 20  # elements per block: matrix products want large blocks more than cache residency
_SAFE = 2.0**-19  # covers every second-order term once each first-order bound is below 2**-20


@dataclasses.dataclass
class Problem:
    q: np.ndarray  # (B, Lq, d), the batch dimensions flattened
    k: np.ndarray  # (B, Lk, d)
    v: np.ndarray  # (B, Lk, dv)
    keep: np.ndarray  # (B, Lq, Lk) bool
    scale: float | None
    undefined: np.ndarray  # (..., Lq) bool, in the broadcast batch shape
    shape: tuple[int, ...]  # the output shape (..., Lq, dv)
    all_kept: bool  # no mask, or one that keeps everything: keep is then a broadcast view of True
    #: (B, Lq, Lk) float64 added to each score after the softcap, or None (a bias, ALiBi's, a sink's column)
    bias: np.ndarray | None = None
    #: c: each score s becomes c tanh(s / c) before the bias and the mask, or None
    softcap: float | None = None


def check_shapes(q, k, v, scale) -> None:
    """The rules of q, k and v's last two axes (as arrays of at least two dimensions), one ValueError each."""
    d, lk = q.shape[-1], k.shape[-2]
    if k.shape[-1] != d:
        raise ValueError(f"k's last dimension ({k.shape[-1]}) must equal q's ({d})")
    if v.shape[-2] != lk:
        raise ValueError(f"v must have as many rows as k ({lk}), got shape {v.shape}")
    if d == 0 and scale is None:
        raise ValueError("q and k have d = 0, so 1/sqrt(d) is undefined; pass scale")


def prepare(q, k, v, mask, scale, bias=None, softcap=None, sinks=None) -> Problem:
    """The problem in flat batch form. bias: broadcastable to (..., Lq, Lk), added to each score after the softcap
    (-inf: that score is masked; +inf or NaN where kept: undefined). sinks: one logit per batch entry (broadcastable
    to the batch shape), a key of score exactly z and value 0 that every query attends (softmax1: z = 0)."""
    q = float_array(q, "q", min_ndim=2)
    k = float_array(k, "k", min_ndim=2)
    v = float_array(v, "v", min_ndim=2)
    d, lq, lk, dv = q.shape[-1], q.shape[-2], k.shape[-2], v.shape[-1]
    check_shapes(q, k, v, scale)
    try:
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(f"the batch dimensions of q {q.shape}, k {k.shape} and v {v.shape} do not broadcast") from None
    keep = np.ones((), bool) if mask is None else mask
    keep = bool_mask(keep, "mask", batch + (lq, lk))
    flat = (math.prod(batch),)  # (not -1: with Lq, Lk or d of 0 numpy cannot infer it)
    q3 = np.broadcast_to(q, batch + (lq, d)).reshape(flat + (lq, d))
    k3 = np.broadcast_to(k, batch + (lk, d)).reshape(flat + (lk, d))
    v3 = np.broadcast_to(v, batch + (lk, dv)).reshape(flat + (lk, dv))
    keep3 = keep.reshape(flat + (lq, lk))
    all_kept = mask is None or bool(np.all(mask))
    bias3 = None
    if bias is not None:
        b = float_array(bias, "bias", min_ndim=0).astype(np.float64)
        try:
            bias3 = np.broadcast_to(b, batch + (lq, lk)).reshape(flat + (lq, lk))
        except ValueError:
            raise ValueError(f"bias of shape {b.shape} does not broadcast to {batch + (lq, lk)}") from None
        if (bias3 == -np.inf).any():  # an additive mask: -inf removes the score
            keep3 = keep3 & (bias3 != -np.inf)
            all_kept = False
    if softcap is not None and not 0 < softcap < np.inf:
        raise ValueError(f"softcap must be positive and finite, got {softcap!r}")
    if sinks is not None:  # one more key: score exactly z (k = 0, the bias z), value 0, attended by every query
        z = float_array(sinks, "sinks", min_ndim=0).astype(np.float64)
        try:
            z = np.broadcast_to(z, batch).reshape(flat)
        except ValueError:
            raise ValueError(f"sinks of shape {z.shape} do not broadcast to the batch shape {batch}") from None
        k3 = np.concatenate([k3, np.zeros(flat + (1, d), k3.dtype)], axis=1)
        v3 = np.concatenate([v3, np.zeros(flat + (1, dv), v3.dtype)], axis=1)
        column = np.broadcast_to(z[:, None, None], flat + (lq, 1))
        bias3 = np.concatenate([np.zeros(flat + (lq, lk)) if bias3 is None else bias3, column], axis=2)
        keep3 = np.concatenate([keep3, np.ones(flat + (lq, 1), bool)], axis=2)
        lk += 1
    with np.errstate(invalid="ignore"):
        bad_key = ~(_finite_rows(k3) & _finite_rows(v3))
        undefined = ~_finite_rows(q3)
        if all_kept:  # (B, Lq, Lk) passes are the largest of preparing: skip them when the mask says nothing
            undefined |= (lk == 0) | bad_key.any(axis=-1)[:, None]
        else:
            undefined |= ~keep3.any(axis=-1) | (keep3 & bad_key[:, None, :]).any(axis=-1)
        if bias3 is not None:
            undefined |= (keep3 & ~np.isfinite(bias3)).any(axis=-1)
    shape = batch + (lq, dv)
    return Problem(q3, k3, v3, keep3, scale, undefined.reshape(batch + (lq,)), shape, all_kept, bias3, softcap)


#: The exponent bits of the IEEE formats: all ones is an infinity or a NaN. Read from the bits, the test takes a
#: third of np.isfinite's time on float16 (no SIMD loop there), which matters for inputs of millions of values.
_EXPONENT = {
    np.dtype(np.float16): (np.uint16, 0x7C00),
    np.dtype(np.float32): (np.uint32, 0x7F800000),
    np.dtype(np.float64): (np.uint64, 0x7FF0000000000000),
}


def _finite_rows(a: np.ndarray) -> np.ndarray:
    """Whether every element along the last axis is finite."""
    if a.dtype in _EXPONENT and a.flags.c_contiguous:
        bits, exponent = _EXPONENT[a.dtype]
        return ((a.view(bits) & exponent) != exponent).all(axis=-1)
    return np.isfinite(a).all(axis=-1)


#: Assumed relative error bound of numpy's float64 tanh (as LIBM_EXP_REL for exp: glibc and SVML are within a few
#: ulp); only tier A's softcap relies on it.
LIBM_TANH_REL = 2.0**-46


def _scores_a(q, k, scale, bias=None, softcap=None) -> tuple[np.ndarray, np.ndarray]:
    """Tier A's scores in float64 and their bound ds: c q k^T within the dot-product bound gamma_d sum |q||k|
    (true for any summation order, with or without FMA, so for any BLAS), then the softcap c tanh(s / c) (tanh' <= 1,
    so ds stays; s / c, tanh and the product add their own) and the bias (one rounding)."""
    s, ds = raw_scores_a(q, k, scale)
    return capped_scores_a(s, ds, bias, softcap)


def raw_scores_a(q, k, scale) -> tuple[np.ndarray, np.ndarray]:
    """c q k^T in float64 and its bound (`_scores_a` before the cap and the bias)."""
    d = q.shape[1]
    scores = q @ k.T
    size = (np.abs(q) @ np.abs(k).T) * (1 + 2 * _dd.gamma(d))
    c, c_rel = (scale, 0.0) if scale is not None else (1 / math.sqrt(d), 2 * U)
    s = c * scores
    return s, (abs(c) * _dd.gamma(d) * size + np.abs(s) * (c_rel + U)) * (1 + _SAFE)


def capped_scores_a(s, ds, bias=None, softcap=None) -> tuple[np.ndarray, np.ndarray]:
    """`_scores_a`'s cap and bias on raw scores s within ds."""
    if softcap is not None:
        capped = softcap * np.tanh(s / softcap)
        ds = ds + (np.abs(s) * U + np.abs(capped) * (LIBM_TANH_REL + 2 * U)) * (1 + _SAFE)
        s = capped
    if bias is not None:
        s = s + bias
        ds = ds + np.abs(s) * U
    return s, ds


def tier_a(q, k, v, keep, scale, bias=None, softcap=None) -> Approx:
    """float64, for targets of at most 24 bits. q (R, d) are queries of one batch entry; k, v its keys and values;
    bias (R, Lk) or None and softcap as in Problem."""
    lk = k.shape[0]
    s, ds = _scores_a(q, k, scale, bias, softcap)
    s = np.where(keep, s, -np.inf)
    m = s.max(axis=1, keepdims=True)
    t = s - m
    e = np.exp(t)
    # Shifting by the computed max m is exact in real arithmetic, so t is off by ds + u|t| only.
    first = np.where(keep, ds + U * np.abs(t), 0.0)
    eta = np.where(keep, first * (1 + _SAFE) + LIBM_EXP_REL, 0.0)
    total = _dd.pairwise_sum(e)[0]
    # An exp that underflows keeps 2**-1074 absolute accuracy; the max term is 1, so total >= 1.
    sigma = (_dd.pairwise_sum(e * eta)[0] / total + _dd.gamma(_dd.depth(lk)) + lk * TINY) * (1 + _SAFE)
    num = e @ v
    a = (e @ np.abs(v)) * (1 + 2 * _dd.gamma(lk))
    b = ((e * eta) @ np.abs(v)) * (1 + 2 * _dd.gamma(lk)) + lk * TINY * np.abs(v).max(axis=0, initial=0.0)
    o = num / total[:, None]
    err = (_dd.gamma(lk) * a + b + sigma[:, None] * (a + b)) / total[:, None] * (1 + _SAFE) + U * np.abs(o) + TINY
    unsure = ~(first.max(axis=1, initial=0.0) <= 2.0**-20) | ~(sigma <= 2.0**-20)  # NaN counts as unsure
    err[unsure] = np.inf
    return Approx(o, np.zeros_like(o), err, 0.0)


def tier_b(q, k, v, keep, scale, bias=None, softcap=None) -> Approx:
    """Double-double, for float64 targets and what tier A left. Needs |q|, |k|, |v| below 2**500; has no tanh (a
    softcap leaves every output to tier C)."""
    d, lk = q.shape[1], k.shape[0]
    if softcap is not None:
        shape = (len(q), v.shape[1])
        return Approx(np.zeros(shape), np.zeros(shape), np.full(shape, np.inf), 0.0)
    ph, pl = _dd.two_prod(q[:, None, :], k[None, :, :])
    size = _dd.pairwise_sum(np.abs(ph))[0] * (1 + 2 * _dd.gamma(d))
    sh, sl = _dd.pairwise_sum(ph, pl)
    # Products below 2**-969 lose low bits to underflow: d * 2**-1070 covers them.
    s_err = (_dd.depth(d, 2) + 1) * _dd.DD_OP_REL * size + d * 2.0**-1070
    ch, cl, c_rel = _dd.scale_dd(scale, d)
    sh, sl = _dd.mul(sh, sl, np.full_like(sh, ch), np.full_like(sh, cl))
    ds = (abs(ch) * s_err + np.abs(sh) * (c_rel + 2 * _dd.DD_OP_REL)) * (1 + _SAFE)
    if bias is not None:
        sh, sl = _dd.add_d(sh, sl, bias)
        ds = ds + np.abs(sh) * 2 * _dd.DD_OP_REL
    eh, el, total_h, total_l, eta, sigma, unsure, _ = weights_dd(sh, sl, ds, keep)
    nh, nl = _dd.two_prod(eh[:, :, None], v[None, :, :])
    nh, nl = _dd.pairwise_sum(np.moveaxis(nh, 1, 2), np.moveaxis(nl + el[:, :, None] * v[None, :, :], 1, 2))
    oh, ol = _dd.div(nh, nl, total_h[:, None], total_l[:, None])
    a = (eh @ np.abs(v)) * (1 + 2 * _dd.gamma(lk))
    b = ((eh * eta) @ np.abs(v)) * (1 + 2 * _dd.gamma(lk)) + lk * 2 * TINY * np.abs(v).max(axis=0, initial=0.0)
    depth = _dd.depth(lk, 2) + 1
    err = (depth * _dd.DD_OP_REL * a + b + sigma[:, None] * (a + b)) / total_h[:, None] * (1 + _SAFE)
    err = err + 2 * _dd.DD_OP_REL * np.abs(oh) + 2 * TINY
    err[unsure] = np.inf
    return Approx(oh, ol, err, 0.0)


def weights_dd(sh, sl, ds, keep, wide: bool = False):
    """Softmax numerators e = exp(s - max) of scores sh + sl (within ds), as double-doubles, and their bounds.

    Returns (eh, el, total_h, total_l, eta, sigma, unsure, x): e within relative eta per entry (plus 2 * 2**-1074
    below 2**-969), their double-double sum within relative sigma per row, the rows whose exps are not certified
    (first-order terms above 2**-20: their bounds must not be used), and x: None, or with `wide` (for scores
    s - max >= WIDE_ARG_MIN) int64 exponents kept apart: e = (eh + el) 2**x with eh in [2**-0.51, 2**0.51], so
    numerators far below float64's range keep their digits. Rows with no kept score get e = 0 and a sum of 1.
    """
    lk = sh.shape[1]
    any_key = keep.any(axis=1, keepdims=True)
    # Shift by the largest score as a double-double (ties in hi broken by lo), so every t <= 0: shifting by hi
    # alone would leave the top score's lo, which for scores near 1e38 is far past exp's range.
    kept_h = np.where(keep, sh, -np.inf)
    mh = np.where(any_key, kept_h.max(axis=1, keepdims=True), 0.0)
    ml = np.where(any_key, np.where(kept_h == mh, sl, -np.inf).max(axis=1, keepdims=True), 0.0)
    th, tl = _dd.add(np.where(keep, sh, mh), np.where(keep, sl, ml), -mh, -ml)
    x = None
    if wide:
        eh, el, x = _dd.exp_dd_wide(np.where(keep, th, 0.0), np.where(keep, tl, 0.0))
        x = np.where(keep, x, 0)
    else:
        eh, el = _dd.exp_dd(th, tl)
    eh, el = np.where(keep, eh, 0.0), np.where(keep, el, 0.0)
    # The sum takes the values as exp_dd gives them (below 2**-969 they lose the digits its bounds allow for).
    values = (eh, el) if x is None else _dd.times_pow2(x, eh, el)
    first = np.where(keep, ds + _dd.DD_OP_REL * np.abs(th), 0.0)
    eta = np.where(keep, first * (1 + _SAFE) + _dd.EXP_DD_REL, 0.0)
    total_h, total_l = _dd.pairwise_sum(*values, one_sign=True)
    total_h = np.where(any_key[:, 0], total_h, 1.0)
    depth = _dd.depth(lk, 2) + 1
    sigma = (_dd.pairwise_sum(values[0] * eta)[0] / total_h + depth * _dd.DD_OP_REL + lk * 2 * TINY) * (1 + _SAFE)
    unsure = ~(first.max(axis=1, initial=0.0) <= 2.0**-20) | ~(sigma <= 2.0**-20)  # NaN counts as unsure
    return eh, el, total_h, total_l, eta, sigma, unsure, x


def round_attention(problem: Problem, fmt: Format, method: str, detail: bool, device="auto") -> Result:
    """Correctly rounded attention; with detail False the Result holds the values only (the rest size 0).

    device: where tier A runs (_torch_tier.device_for): "auto" (CUDA for large problems when torch sees a GPU),
    "numpy", or a torch device name.
    """
    q, k, v, keep = problem.q, problem.k, problem.v, problem.keep
    nb, lq, d = q.shape
    lk, dv = k.shape[1], v.shape[2]
    out = _Collector((nb, lq, dv), fmt, detail)
    undefined = problem.undefined.reshape(nb, lq)
    out.fill(np.broadcast_to(undefined[:, :, None], (nb, lq, dv)), np.nan)
    pending = np.broadcast_to(~undefined[:, :, None], (nb, lq, dv)).copy()
    if method == "auto" and fast_target(fmt) and all(fast_input(a) for a in (q, k, v)) and dv:
        # Elements per query row of each tier's largest temporaries: tier A's scores, tier B's products.
        tiers = (
            [(1, tier_a, lk), (2, tier_b, lk * max(d, dv))] if tier_a_target(fmt) else [(2, tier_b, lk * max(d, dv))]
        )
        plain = problem.bias is None and problem.softcap is None  # (the torch tier knows neither)
        torch_device = _torch_tier.device_for(device, nb * lq * lk) if tier_a_target(fmt) and plain else None
        if torch_device is not None and _torch_tier.run(problem, fmt, torch_device, pending, out):
            tiers = []  # tiers A and B ran on the device: what is left needs tier C
        for b in np.flatnonzero(pending.any(axis=(1, 2))) if tiers else ():
            qb, kb, vb = (a[b].astype(np.float64) for a in (q, k, v))
            big = max(np.abs(kb).max(initial=0.0), np.abs(vb).max(initial=0.0)) >= 2.0**500
            for tier, run, width in tiers:
                rows = np.flatnonzero(pending[b].any(axis=1))
                if tier == 2:
                    rows = rows[np.abs(qb[rows]).max(axis=1, initial=0.0) < 2.0**500] if not big else rows[:0]
                for chunk in row_blocks(rows, width, _BLOCK):
                    with np.errstate(all="ignore"):
                        bias = None if problem.bias is None else problem.bias[b, chunk]
                        approx = run(qb[chunk], kb, vb, keep[b, chunk], problem.scale, bias, problem.softcap)
                        rounded, decided = decide_arrays(approx.hi, approx.lo, approx.err, approx.sign, fmt)
                    decided &= pending[b, chunk]
                    out.put_block((b, chunk), rounded, approx, decided, tier)
                    pending[b, chunk] &= ~decided
    _tier_c(problem, fmt, pending, out)
    _negative_zeros(problem, out)
    shape = problem.shape if detail else (0,) * len(problem.shape)
    parts = (out.hi, out.lo, out.err, out.tier)
    fine = None if out.fine is None else out.fine.reshape(shape)
    return Result(out.array().reshape(problem.shape), *(a.reshape(shape) for a in parts), problem.undefined, fine)


def _negative_zeros(problem: Problem, out: _Collector):
    """-0 where every value a query may attend is -0 in that column, as IEEE arithmetic gives (a sum of p_j * -0);
    the tiers, exact or rational, only know the value 0."""
    v = problem.v
    if v.dtype in _EXPONENT and v.flags.c_contiguous:  # one integer compare: -0 is the sign bit alone
        bits, _ = _EXPONENT[v.dtype]
        negative_zero = v.view(bits) == bits(1 << (8 * v.itemsize - 1))
    else:
        negative_zero = (v == 0) & np.signbit(v)
    if not negative_zero.any():
        return
    others = problem.keep.astype(np.float64) @ (~negative_zero).astype(np.float64)  # (B, Lq, dv): kept non -0 values
    where = (
        (others == 0) & problem.keep.any(axis=2)[:, :, None] & ~problem.undefined.reshape(others.shape[:2])[:, :, None]
    )
    out.fill(where, -0.0)


def _tier_c(problem: Problem, fmt: Format, pending: np.ndarray, out: _Collector):
    scale = None if problem.scale is None else libmp.from_float(problem.scale)
    d = problem.q.shape[2]
    for b, i in zip(*np.nonzero(pending.any(axis=2))):
        keys = np.flatnonzero(problem.keep[b, i])
        q = [exact_mpf(x) for x in problem.q[b, i]]
        ks = [[exact_mpf(x) for x in problem.k[b, j]] for j in keys]
        vs = [[exact_mpf(x) for x in problem.v[b, j]] for j in keys]
        bias = None if problem.bias is None else [exact_mpf(x) for x in problem.bias[b, i, keys]]
        row = _exact_attention.attention_row(q, ks, vs, scale, d, fmt, bias=bias, softcap=problem.softcap)
        for c, (rounded, value, err) in enumerate(row):
            if pending[b, i, c]:
                out.put_exact((b, i, c), rounded, value, err)


def lse_tier_a(q, k, keep, scale, bias=None, softcap=None) -> Approx:
    """The log-sum-exp of each query's scores over its kept keys, in float64, for targets of at most 24 bits:
    lse = m + log(sum_j e**(s_j - m)), m the largest computed score. With the scores within ds of the exact ones
    and each term within eta (tier_a's), the sum is within relative sigma of sum_j e**(exact s_j - m), so log of
    it within sigma (1 + sigma); log (numpy's, assumed within LIBM_LOG1P_REL as log1p is) and the final add round
    once each. A query with nothing kept gets -inf (decided exactly)."""
    lk = k.shape[0]
    s, ds = _scores_a(q, k, scale, bias, softcap)
    s = np.where(keep, s, -np.inf)
    any_key = keep.any(axis=1)
    m = np.where(any_key, s.max(axis=1, initial=-np.inf), 0.0)
    t = s - m[:, None]
    e = np.where(keep, np.exp(t), 0.0)
    first = np.where(keep, ds + U * np.abs(t), 0.0)
    eta = np.where(keep, first * (1 + _SAFE) + LIBM_EXP_REL, 0.0)
    total = _dd.pairwise_sum(e)[0]
    total = np.where(any_key, total, 1.0)
    sigma = (_dd.pairwise_sum(e * eta)[0] / total + _dd.gamma(_dd.depth(lk)) + lk * TINY) * (1 + _SAFE)
    log = np.log(total)
    lse = np.where(any_key, m + log, -np.inf)
    err = (sigma * (1 + sigma) + np.abs(log) * LIBM_LOG1P_REL + U * np.abs(lse)) * (1 + _SAFE) + TINY
    unsure = ~(first.max(axis=1, initial=0.0) <= 2.0**-20) | ~(sigma <= 2.0**-20)
    err = np.where(any_key, np.where(unsure, np.inf, err), 0.0)
    return Approx(lse, np.zeros_like(lse), err, 0.0)


def round_lse(problem: Problem, fmt: Format) -> Result:
    """The correctly rounded log-sum-exp of each query's (modified) scores over its kept keys, the sink's included:
    -inf for a query with nothing kept (whatever it holds); NaN where a kept key or the query is not finite."""
    q, k, keep = problem.q, problem.k, problem.keep
    nb, lq, d = q.shape
    out = _Collector((nb, lq), fmt, True)
    empty = ~keep.any(axis=2)  # log 0 = -inf, whatever the query holds
    undefined = problem.undefined.reshape(nb, lq) & ~empty
    out.fill(undefined, np.nan)
    out.fill(empty, -np.inf)
    pending = ~undefined & ~empty
    if fast_target(fmt) and tier_a_target(fmt) and all(fast_input(a) for a in (q, k)):
        for b in np.flatnonzero(pending.any(axis=1)):
            qb, kb = (a[b].astype(np.float64) for a in (q, k))
            rows = np.flatnonzero(pending[b])
            for chunk in row_blocks(rows, k.shape[1], _BLOCK):
                bias = None if problem.bias is None else problem.bias[b, chunk]
                with np.errstate(all="ignore"):
                    approx = lse_tier_a(qb[chunk], kb, keep[b, chunk], problem.scale, bias, problem.softcap)
                    rounded, decided = decide_arrays(approx.hi, approx.lo, approx.err, 0.0, fmt)
                decided &= pending[b, chunk]
                out.put_block((b, chunk), rounded, approx, decided, 1)
                pending[b, chunk] &= ~decided
    scale = None if problem.scale is None else libmp.from_float(problem.scale)
    for b, i in zip(*np.nonzero(pending)):
        keys = np.flatnonzero(keep[b, i])
        qs = [exact_mpf(x) for x in q[b, i]]
        ks = [[exact_mpf(x) for x in k[b, j]] for j in keys]
        bias = None if problem.bias is None else [exact_mpf(x) for x in problem.bias[b, i, keys]]
        rounded, value, err = _exact_attention.attention_lse_row(qs, ks, scale, d, fmt, bias, problem.softcap)
        out.put_exact((b, i), rounded, value, err)
    shape = problem.shape[:-1]
    fine = None if out.fine is None else out.fine.reshape(shape)
    parts = (out.hi, out.lo, out.err, out.tier)
    return Result(out.array().reshape(shape), *(a.reshape(shape) for a in parts), undefined.reshape(shape), fine)
