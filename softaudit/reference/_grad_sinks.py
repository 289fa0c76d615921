"""The gradient of attention with sinks with respect to each sink's logit z, correctly rounded.

A sink is one more key of value 0 whose score is z (`with_sinks`), attended by every query of its head. Its weight
is P_i,z = e**z / (e**z + sum_j e**s_ij) and, its value being 0, its dP is 0, so dS_i,z = P_i,z (0 - D_i) and

    dz = sum over the queries i of every batch entry that shares the sink of dS_i,z = -sum_i P_i,z D_i.

A sink shared by several batch entries (sinks broadcast along a batch axis) sums over all of them, as autograd gives
for a broadcast logit. Tiers A and B (`_grad_attention.score_grad_a`, `_probabilities` and `_score_grad`) bound
each query's dS_i,z; the sum over the queries is formed exactly (math.fsum twice: the correctly rounded sum and
what it leaves, a double-double within 2**-104 of it) and decided with the sum of the bounds. What they leave goes
to tier C: each query's dS_i,z is a cov form of its row's exact weights (`score_grad_form`), their sum decided by
`decide_terms` (exact zeros found first, as for dk: dz is 0 exactly where every query's D_i is). docs/reference.md,
"Gradients".
"""

from __future__ import annotations

import functools
import math

import numpy as np

from . import _dd, _grad_exact, _grad_softcap, _ozaki
from ._attention import prepare
from ._engine import Result, _Collector, fast_input, fast_target, row_blocks, tier_a_target
from ._formats import Format, decide_arrays
from ._grad_attention import (
    _probabilities,
    _score_grad,
    _wide_exponents,
    exact_rows,
    score_grad_a,
    score_grad_form,
    upstream,
)
from ._grad_broadcast import with_sinks
from ._rational import Fraction
from ._rows import Approx
from ._validate import float_array

_BLOCK = 1 << 20  # scores per block of query rows in tier B, as attention_grad's


def sink_grad(q, k, v, g, mask, scale, fmt: Format, method: str, bias=None, sinks=None, softcap=None) -> Result:
    """dz of sinks' shape (each sink's logit), with its parts; undefined (NaN) where a query of a batch entry that
    shares the sink is (a NaN or infinity in its q, g, or a key, value or bias it attends). Under a softcap the
    weights are the capped scores' (the sink's logit is not capped: its key is 0) and dz keeps its form; tier B
    does not run (no double-double tanh) and tier C evaluates directly (`_grad_softcap.sink_entry`)."""
    if sinks is None:
        raise ValueError("the sinks' gradient needs sinks")
    q, k, v = (float_array(a, name, min_ndim=2) for a, name in ((q, "q"), (k, "k"), (v, "v")))
    z = float_array(sinks, "sinks", min_ndim=0)
    batch = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    k1, v1, mask1, bias1 = with_sinks(
        q, np.broadcast_to(k, batch + k.shape[-2:]), np.broadcast_to(v, batch + v.shape[-2:]), mask, bias, z
    )
    problem = prepare(q, k1, v1, mask1, scale, bias=bias1, softcap=softcap)
    qs, ks, vs, keep, b3 = problem.q, problem.k, problem.v, problem.keep, problem.bias
    nb, lq, _ = qs.shape
    g3 = upstream(g, problem.shape).reshape(nb, lq, vs.shape[2])
    with np.errstate(invalid="ignore"):
        bad = problem.undefined.reshape(nb, lq) | ~np.isfinite(g3).all(axis=2)
    owner = np.broadcast_to(np.arange(z.size).reshape(z.shape), batch).reshape(-1)  # each batch entry's sink
    undefined = np.zeros(z.size, bool)
    np.logical_or.at(undefined, owner, bad.any(axis=1))
    out = _Collector((z.size,), fmt, detail=True)
    out.fill(undefined, np.nan)
    pending = ~undefined
    if method == "auto" and fast_target(fmt) and all(fast_input(a) for a in (qs, ks, vs, g3)):
        column_a = functools.partial(_column_a, softcap=softcap)
        tiers = ([(1, column_a)] if tier_a_target(fmt) else []) + ([(2, _column_b)] if softcap is None else [])
        for tier, column in tiers:
            if not pending.any():
                break
            approx = _summed(column, (qs, ks, vs, g3, keep, b3), problem.scale, fmt, owner, pending)
            rounded, decided = decide_arrays(approx.hi, approx.lo, approx.err, approx.sign, fmt)
            decided &= pending
            out.put_block(slice(None), rounded, approx, decided, tier)
            pending &= ~decided
    for s in np.flatnonzero(pending):
        entries = np.flatnonzero(owner == s)
        if softcap is not None:
            arrays = [(qs[b], ks[b], vs[b], g3[b], keep[b], bad[b], None if b3 is None else b3[b]) for b in entries]
            out.put_exact((s,), *_grad_softcap.sink_entry(arrays, problem.scale, softcap, fmt))
            continue
        terms = _exact_terms((qs, ks, vs, g3, keep, b3), problem.scale, entries, bad)
        out.put_exact((s,), *_grad_exact.decide_terms(terms, _grad_exact.ONE, fmt))
    parts = (out.array(), out.hi, out.lo, out.err, out.tier)
    fine = None if out.fine is None else out.fine.reshape(z.shape)
    return Result(*(a.reshape(z.shape) for a in parts), undefined.reshape(z.shape), fine)


def _summed(column, arrays, scale, fmt: Format, owner, pending):
    """Each pending sink's dz from a tier's columns: (hi, lo, err) per query of its batch entries, summed exactly
    (math.fsum: the correctly rounded sum, then what it leaves), the bounds added and rounded up. A sink with an
    entry the tier cannot bound gets err = inf."""
    values: dict[int, list] = {int(s): [] for s in np.flatnonzero(pending)}
    bounds: dict[int, list] = {s: [] for s in values}
    for b in np.flatnonzero(pending[owner]):
        with np.errstate(all="ignore"):
            found = column(*(a[b] if a is not None else None for a in arrays), scale, fmt)
        s = int(owner[b])
        hi, lo, err = (np.array([np.inf]),) * 3 if found is None else found
        values[s] += list(hi) + list(lo)
        bounds[s] += list(err)
    hi, lo, errs = (np.zeros(len(pending)) for _ in range(3))
    for s, terms in values.items():
        errs[s] = math.fsum(bounds[s]) if all(np.isfinite(terms)) else np.inf
        if np.isfinite(errs[s]):
            hi[s] = math.fsum(terms)
            lo[s] = math.fsum(terms + [-hi[s]])
    # fsum's roundings: lo within 2**-53 |lo|, the bounds' sum within 2**-53 of it (2**-50 rounds it up)
    err = errs * (1 + 2.0**-50) + np.abs(lo) * 2.0**-52 + 4 * _dd.TINY
    return Approx(hi, lo, np.where(pending & ~np.isnan(err), err, np.inf), 0.0)


def _defined(q, k, v, g, keep, bias):
    """One batch entry's arrays for the fast tiers: non-finite values (only where undefined or never read) as 0,
    the bias 0 where not kept."""
    head = [np.where(np.isfinite(a), a, 0).astype(np.float64) for a in (q, k, v, g)]
    return (*head, None if bias is None else np.where(keep, bias, 0.0))


def _column_a(q, k, v, g, keep, bias, scale, fmt, softcap=None):
    """Tier A: the sink's column of dS (the last key) in float64 and its bound, per query."""
    q, k, v, g, bias = _defined(q, k, v, g, keep, bias)
    *_, ds, ds_err = score_grad_a(q, k, v, g, keep, scale, bias, softcap)
    return ds[:, -1], np.zeros(len(ds)), ds_err[:, -1]


def _column_b(q, k, v, g, keep, bias, scale, fmt):
    """Tier B: the sink's column of dS as double-doubles and its bound, in blocks of queries; None where the
    inputs pass 2**500 or the weights spread past float64's range (tier C then)."""
    q, k, v, g, bias = _defined(q, k, v, g, keep, bias)
    if max(np.abs(a).max(initial=0.0) for a in (q, k, v, g, bias) if a is not None) >= 2.0**500:
        return None
    d, lk = q.shape[1], k.shape[0]
    ch, cl, c_rel = _dd.scale_dd(scale, d)
    if _wide_exponents(q, k, keep, ch, bias) is not None:
        return None
    slices = 3 if fmt.precision <= 24 else 5
    k_rows, v_rows = (_ozaki.slice_rows([a], slices) for a in (k, v))
    hi, lo, err = (np.zeros(len(q)) for _ in range(3))
    for rows in row_blocks(np.arange(len(q)), lk, _BLOCK):
        b = None if bias is None else bias[rows]
        p, p_err, _ = _probabilities(q[rows], k_rows, keep[rows], b, ch, cl, c_rel, slices, False)
        (sh, sl), s_err, _ = _score_grad(p, p_err, None, g[rows], v_rows, keep[rows], slices)
        hi[rows], lo[rows], err[rows] = sh[:, -1], sl[:, -1], s_err[:, -1]
    return hi, lo, err


def _exact_terms(arrays, scale, entries, bad) -> list[tuple[Fraction, _grad_exact.Form]]:
    """Tier C: the sink's dS_i,z of every query of the given batch entries as (1, form) terms, queries with the same
    weights and dP row sharing one form."""
    merged: dict = {}
    for b in entries:
        q, k, v, g, keep, bias = (a[b] if a is not None else None for a in arrays)
        *_, rows = exact_rows(q, k, v, g, keep, scale, bad[b], bias)
        sink = k.shape[0] - 1
        for row in rows.values():
            _, w, dp, _, key_of, _ = row
            sig = (tuple(w.keys), key_of[sink], tuple(dp))
            if sig not in merged:
                merged[sig] = [Fraction(0), score_grad_form(row, sink)]
            merged[sig][0] += 1
    return [(weight, form) for weight, form in merged.values()]
