"""attention_grad with K and V broadcast against q: one K/V head shared by several query heads (multi-query, or
grouped-query heads arriving as broadcast axes of size 1).

The gradient of a shared K/V head is the sum over every query head that shares it, as autograd gives for
expand. Every query row has its own softmax over the keys and is independent of the other rows, so the G query
heads sharing one K/V head are one head of G x Lq queries against the shared keys, with the mask's rows stacked
the same way: that head's dk and dv are the exact sums, and the tiers round them once (a sum of separately rounded
per-head gradients is not correctly rounded). Its dq rows are each query head's own. The undefined bookkeeping
follows: a key attended by an undefined query of any head sharing it is undefined, a key no query of those heads
attends gets dk = dv = 0. docs/reference.md, "Gradients".

This module stacks the problem before `_grad_attention.attention_grad` (whose tiers take one batch shape) and
takes the results back to q's, k's and v's shapes. A problem where no query meets a key (no query: a batch or head
axis of size 0, or Lq = 0; or no key: Lk = 0) needs no arithmetic: every gradient is an exact 0 (`_no_pairs`), as
`attention` gives an empty output there (or, for Lk = 0, queries with nothing to attend).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import _grad_attention
from ._attention import check_shapes
from ._engine import Result, _Collector
from ._formats import Format
from ._validate import bool_mask, float_array


@dataclasses.dataclass(frozen=True)
class Stacking:
    """How the broadcast problem maps onto the stacked one. The batch axes are permuted to K/V's own axes first,
    then the shared ones (size 1 in k and v, larger in q), which merge with the query axis, head by head."""

    batch: tuple[int, ...]  # the broadcast batch shape (q's, with leading axes of size 1 where q has fewer)
    order: tuple[int, ...]  # the permutation of the batch axes: K/V's own axes, then the shared ones
    own: tuple[int, ...]  # the sizes of K/V's own axes, in that order
    shared: tuple[int, ...]  # the sizes of the shared axes
    lq: int

    def queries(self, a: np.ndarray) -> np.ndarray:
        """q, g or the mask (batch..., Lq, n) as the stacked problem's (own..., G Lq, n)."""
        nb = len(self.batch)
        a = a.reshape(self.batch + a.shape[-2:])  # (q may lack leading axes of size 1)
        a = a.transpose(list(self.order) + [nb, nb + 1])
        return a.reshape(self.own + (math.prod(self.shared) * self.lq, a.shape[-1]))  # (not -1: size 0 is allowed)

    def unstack(self, a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """A stacked (own..., G Lq, ...) array back to `shape`: q's shape for dq, q's without d for its rows."""
        nb = len(self.batch)
        a = a.reshape(self.own + self.shared + (self.lq,) + a.shape[len(self.own) + 1 :])
        return a.transpose(list(np.argsort(self.order)) + list(range(nb, a.ndim))).reshape(shape)


def plan(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> Stacking | None:
    """The stacking for q, k, v, or None where there is nothing to stack (one batch shape, or arguments the tiers'
    own checks reject). ValueError where the gradient would need a sum that no stacking makes exact."""
    if min(q.ndim, k.ndim, v.ndim) < 2 or q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        return None
    try:
        batch = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    except ValueError:
        return None  # (prepare names the shapes that do not broadcast)
    nb = len(batch)

    def padded(a):
        return (1,) * (nb - (a.ndim - 2)) + a.shape[:-2]

    # dq has q's shape: a query shared by several K/V heads would need the sum of its dq over heads with different
    # softmaxes, which is not one problem.
    if padded(q) != batch:
        raise ValueError(
            f"attention_grad needs q of the whole batch shape {batch} (k and v may broadcast against q, q may not "
            f"broadcast against them), got q {q.shape}, k {k.shape}, v {v.shape}"
        )
    # A K head shared by query heads whose V heads differ would need a sum over problems with different values.
    if padded(k) != padded(v):
        raise ValueError(
            f"attention_grad needs k and v broadcast along the same batch axes, got k {k.shape} and v {v.shape}"
        )
    kv = padded(k)
    own = [i for i in range(nb) if kv[i] == batch[i]]
    shared = [i for i in range(nb) if kv[i] != batch[i]]
    return Stacking(
        batch, tuple(own + shared), tuple(batch[i] for i in own), tuple(batch[i] for i in shared), q.shape[-2]
    )


def attention_grad(
    q,
    k,
    v,
    g,
    mask,
    scale,
    fmt: Format,
    method: str,
    detail: bool = False,
    bias=None,
    sinks=None,
    softcap=None,
    derivative=True,
):
    """(dq, dk, dv) correctly rounded, with K and V broadcast against q or not: dq of q's shape, dk and dv of k's
    and v's (each the exact sum over the query heads sharing it, rounded once). With detail, three Results
    (undefined per query for dq, per key for dk and dv). bias: broadcastable to (..., Lq, Lk), added to the scores
    after the softcap (-inf removes a key); sinks: one logit per batch entry (`with_sinks`); softcap: each raw score
    s becomes softcap tanh(s / softcap) (derivative False: the gradient without the cap's derivative)."""
    q, k, v = (float_array(a, name, min_ndim=2) for a, name in ((q, "q"), (k, "k"), (v, "v")))
    stacking = plan(q, k, v)
    empty = _no_pairs(q, k, v, g, mask, scale, fmt, detail) if sinks is None else None
    if empty is not None:
        return empty
    extra = 0
    if sinks is not None:
        k, v, mask, bias = with_sinks(q, k, v, mask, bias, sinks)
        extra = 1
    if stacking is None:
        args = (q, k, v, g, mask, scale, fmt, method, detail, bias, extra, softcap, derivative)
        return _grad_attention.attention_grad(*args)
    rows = stacking.batch + (stacking.lq,)
    g = _grad_attention.upstream(g, rows + v.shape[-1:])
    keep = None if mask is None else stacking.queries(bool_mask(mask, "mask", rows + k.shape[-2:-1]))
    if bias is not None:
        bias = float_array(bias, "bias", min_ndim=0).astype(np.float64)
        bias = stacking.queries(np.broadcast_to(bias, rows + k.shape[-2:-1]))
    own = stacking.own
    args = (stacking.queries(q), k.reshape(own + k.shape[-2:]), v.reshape(own + v.shape[-2:]), stacking.queries(g))
    dq, dk, dv = _grad_attention.attention_grad(
        *args, keep, scale, fmt, method, detail, bias, extra, softcap, derivative
    )
    shapes = [a.shape[:-2] + (a.shape[-2] - extra, a.shape[-1]) for a in (k, v)]
    if not detail:
        return stacking.unstack(dq, q.shape), dk.reshape(shapes[0]), dv.reshape(shapes[1])
    parts = ("value", "hi", "lo", "err", "tier")
    dq = Result(
        *(stacking.unstack(getattr(dq, p), q.shape) for p in parts),
        stacking.unstack(dq.undefined, q.shape[:-1]),
        None if dq.fine is None else stacking.unstack(dq.fine, q.shape),
    )
    dk, dv = (
        Result(
            *(getattr(r, p).reshape(shape) for p in parts),
            r.undefined.reshape(shape[:-1]),
            None if r.fine is None else r.fine.reshape(shape),
        )
        for r, shape in ((dk, shapes[0]), (dv, shapes[1]))
    )
    return dq, dk, dv


def with_sinks(q, k, v, mask, bias, sinks):
    """The problem with each batch entry's sink as one more key (k = 0, v = 0, kept by every query, its score the
    sink's logit z, through the bias), at the end: (k, v, mask, bias). k and v keep their own batch shape (a K/V head
    shared by query heads gets one zero key; its column's bias is each query head's own z)."""
    batch = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    lq, lk = q.shape[-2], k.shape[-2]
    z = float_array(sinks, "sinks", min_ndim=0).astype(np.float64)
    try:
        z = np.broadcast_to(z, batch)
    except ValueError:
        raise ValueError(f"sinks of shape {z.shape} do not broadcast to the batch shape {batch}") from None
    k = np.concatenate([k, np.zeros(k.shape[:-2] + (1, k.shape[-1]), k.dtype)], axis=-2)
    v = np.concatenate([v, np.zeros(v.shape[:-2] + (1, v.shape[-1]), v.dtype)], axis=-2)
    scores = batch + (lq, lk)
    keep = np.ones(scores, bool) if mask is None else np.broadcast_to(bool_mask(mask, "mask", scores), scores)
    mask = np.concatenate([keep, np.ones(batch + (lq, 1), bool)], axis=-1)
    if bias is None:
        bias = np.zeros(scores)
    else:
        b = float_array(bias, "bias", min_ndim=0).astype(np.float64)
        try:
            bias = np.broadcast_to(b, scores)
        except ValueError:
            raise ValueError(f"bias of shape {b.shape} does not broadcast to {scores}") from None
    bias = np.concatenate([bias, np.broadcast_to(z[..., None, None], batch + (lq, 1))], axis=-1)
    return k, v, mask, bias


def _no_pairs(q, k, v, g, mask, scale, fmt: Format, detail: bool):
    """(dq, dk, dv) of a problem in which no query meets a key, checked as the tiers check their arguments: exact
    zeros of q's, k's and v's shapes (a query that may attend no key has dq = 0, a key no query attends dk = dv = 0;
    the tiers give the same for Lq = 0 without batch axes). None where there is something to compute."""
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    try:
        batch = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    except ValueError:
        return None  # (the tiers' checks name the shapes that do not broadcast)
    if lk and math.prod(batch) * lq:
        return None
    check_shapes(q, k, v, scale)
    if mask is not None:
        bool_mask(mask, "mask", batch + (lq, lk))
    _grad_attention.upstream(g, batch + (lq, dv))
    results = []
    for a in (q, k, v):
        out = _Collector(a.shape, fmt, detail=detail)
        out.fill(np.ones(a.shape, bool), 0.0)
        value = out.array()
        if detail:
            value = Result(value, out.hi, out.lo, out.err, out.tier, np.zeros(a.shape[:-1], bool))
        results.append(value)
    return tuple(results)
