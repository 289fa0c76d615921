"""Built-in linear cross-entropy gradient candidates: f(x, weight, target, g, *, bias=None, options) ->
(dx, dweight, dbias), from dz = dloss/dlogits: dx = dz W, dweight = dz^T x, dbias = the column sums of dz.

dz is `cross_entropy_grad.f32acc`'s (best practice in the logits' dtype) and every product `_ops.matmul`'s (float32
products and sums for 16-bit dtypes, rounded once): the candidates differ in where the logits and dz are rounded,
and in how dweight is summed over chunks of rows (Liger-Kernel's fused_linear_cross_entropy, Liger #1391).
"""

from __future__ import annotations

import math

import numpy as np

from ..adapters import candidate
from ._ops import dtype_sum, exp, matmul, row_max, work_dtype
from .cross_entropy import capped
from .cross_entropy_grad import f32acc as _dz
from .linear_cross_entropy import logits

#: Cut Cross-Entropy's gradient filter: entries whose softmax is below this are skipped (its documented default,
#: filter_eps="auto", is 2**-12 for 16-bit dtypes).
FILTER_EPS = 2.0**-12


def _products(dz, x, weight, dtype, work):
    """dx, dweight, dbias from dz: each product in `work`, rounded once to dtype."""
    ones = np.ones((1, len(dz)), work)
    return (
        matmul(dz, weight, work).astype(dtype),
        matmul(dz.T, x, work).astype(dtype),
        matmul(ones, dz, work)[0].astype(dtype),
    )


@candidate(kind="linear_cross_entropy_grad", name="linear_cross_entropy_grad.materialised")
def materialised(x, weight, target, g, *, bias=None, **options):
    """The logits written out in the dtype, dz = p - q formed from them and stored in the dtype (autograd through
    lm_head and F.cross_entropy), then the products. Weakness: the logits' rounding (u |logit|) moves p by as much,
    and dz rounded to the dtype loses 1 - p_y of a confident row's target."""
    dz = _dz(logits(x, weight, bias, x.dtype), target, g, **options)
    return _products(dz, x, weight, x.dtype, work_dtype(x.dtype))


@candidate(kind="linear_cross_entropy_grad", name="linear_cross_entropy_grad.f32_logits")
def f32_logits(x, weight, target, g, *, bias=None, **options):
    """Best practice: the logits and dz in float32 for 16-bit dtypes (the dtype itself otherwise), the products
    summed there, each output rounded once. Weakness: none known beyond the conditioning."""
    w = work_dtype(x.dtype)
    dz = _dz(logits(x, weight, bias, w), target, g, **options)
    return _products(dz, x, weight, x.dtype, w)


def _chunked(x, weight, target, g, bias, options, accumulate):
    """Liger-Kernel's way: dz of the dtype's logits in the dtype (as materialised), dx per chunk of rows, dweight
    and dbias summed chunk by chunk into an accumulator of dtype `accumulate`. Its chunks: about V / H of them (its
    chunk size, the power of two at least N / ceil(V / H), keeps a chunk's logits near the size of x)."""
    d, w = x.dtype, work_dtype(x.dtype)
    chunks = -(-weight.shape[0] // max(weight.shape[1], 1))
    size = 1 << max(0, math.ceil(math.log2(max(1, -(-len(x) // chunks)))))
    dz = _dz(logits(x, weight, bias, d), target, g, **options)
    dx = matmul(dz, weight, w).astype(d)
    dweight = np.zeros(weight.shape, accumulate)
    dbias = np.zeros(weight.shape[0], accumulate)
    with np.errstate(all="ignore"):
        for start in range(0, len(x), size):
            part = slice(start, start + size)
            rows = dz[part]
            dweight = (dweight + matmul(rows.T, x[part], w).astype(accumulate)).astype(accumulate)
            ones = np.ones((1, len(rows)), w)
            dbias = (dbias + matmul(ones, rows, w)[0].astype(accumulate)).astype(accumulate)
    return dx, dweight.astype(d), dbias.astype(d)


@candidate(kind="linear_cross_entropy_grad", name="linear_cross_entropy_grad.chunked")
def chunked(x, weight, target, g, *, bias=None, **options):
    """Liger-Kernel's fused_linear_cross_entropy: rows in chunks, each chunk's logits and dz in the dtype, dweight
    accumulated across chunks in float32 for 16-bit dtypes. Weakness: the materialised version's (the logits and dz
    in the dtype)."""
    return _chunked(x, weight, target, g, bias, options, work_dtype(x.dtype))


@candidate(kind="linear_cross_entropy_grad", name="linear_cross_entropy_grad.accumulated_in_dtype")
def accumulated_in_dtype(x, weight, target, g, *, bias=None, **options):
    """chunked with dweight and dbias accumulated across chunks in the dtype itself (Liger-Kernel #1391). Weakness:
    each chunk's sum is added to a running total rounded to the dtype: in bfloat16 a chunk's contribution below
    2**-8 of the total is lost, and the error grows with the number of chunks."""
    return _chunked(x, weight, target, g, bias, options, x.dtype)


@candidate(
    kind="linear_cross_entropy_grad", name="linear_cross_entropy_grad.filtered", conventions={"filter": "2**-12"}
)
def filtered(x, weight, target, g, *, bias=None, **options):
    """Cut Cross-Entropy's gradient filtering on best practice: dz's entries whose softmax is below FILTER_EPS
    (2**-12) are skipped (the target's kept), a deliberate approximation that saves the products with W, and
    declared (conventions={"filter": "2**-12"}): judged a warn with its size while within the filter's bound.
    Weakness: by design, dx and dweight lose the skipped entries' share, up to FILTER_EPS sum |W| per row."""
    return _filtered(x, weight, target, g, bias, options, FILTER_EPS)


def _filtered(x, weight, target, g, bias, options, threshold):
    """Best practice with dz's entries whose softmax is below threshold skipped (the target's kept)."""
    w = work_dtype(x.dtype)
    z = logits(x, weight, bias, w)
    dz = _dz(z, target, g, **options)
    z = capped(z, options.get("softcap"))  # (the softmax of the capped logits: what the loss's p is)
    with np.errstate(all="ignore"):
        m = row_max(z)
        p = exp(z - m) / dtype_sum(exp(z - m))
        keep = p >= np.array(threshold, w)
        t = np.asarray(target)
        rows = np.flatnonzero((t >= 0) & (t < z.shape[1]))
        keep[rows, t[rows]] = True
        dz = np.where(keep, dz, np.zeros((), w))
    return _products(dz, x, weight, x.dtype, w)
