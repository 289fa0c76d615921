"""Built-in split-KV merges: f(outputs, lses) -> (o, lse) over the splits on axis 0 (softaudit.kinds.merge_attention),
each with its known weakness. Sums over the splits are pairwise in the working dtype (`dtype_sum`)."""

from __future__ import annotations

import numpy as np

from ..adapters import candidate
from ._ops import dtype_sum, exp, log, work_dtype


def _merge(outputs, lses, dtype, guard=True, shift=True):
    """The textbook merge in `dtype`: m = max lse, w = e**(lse - m), lse = m + log(sum w), o = sum w o / sum w.
    guard: empty splits (lse -inf) take no weight and read no output, every split empty gives o = 0, lse = -inf."""
    o = np.asarray(outputs).astype(dtype)
    lse = np.asarray(lses).astype(dtype)
    zero = np.zeros((), dtype)
    with np.errstate(all="ignore"):
        m = lse.max(axis=0) if shift else np.zeros(lse.shape[1:], dtype)
        if guard:
            m = np.where(m == -np.inf, zero, m)
        w = exp(lse - m)
        if guard:
            w = np.where(lse == -np.inf, zero, w)
            o = np.where((lse == -np.inf)[..., None], zero, o)
        total = dtype_sum(np.moveaxis(w, 0, -1))[..., 0]
        weighted = dtype_sum(np.moveaxis(w[..., None] * o, 0, -1))[..., 0]
        merged = weighted / total[..., None]
        merged_lse = m + log(total)
        if guard:
            empty = total == 0
            merged = np.where(empty[..., None], zero, merged)
            merged_lse = np.where(empty, np.array(-np.inf, dtype), merged_lse)
    # (a NaN's sign and payload depend on which SIMD path made it: every NaN out is the one NaN, on every CPU)
    nan = np.array(np.nan, dtype)
    return np.where(np.isnan(merged), nan, merged), np.where(np.isnan(merged_lse), nan, merged_lse)


@candidate(kind="merge_attention", name="merge_attention.in_dtype")
def in_dtype(outputs, lses):
    """The textbook merge with every step in the dtype, empty splits guarded. Weakness: the weights e**(lse - m)
    and both sums are rounded to the dtype (in float16 and bfloat16 a few ulps of o, more with many splits)."""
    o, lse = _merge(outputs, lses, np.asarray(outputs).dtype)
    return o, lse


@candidate(kind="merge_attention", name="merge_attention.textbook")
def textbook(outputs, lses):
    """Best practice: the textbook merge in float32 for 16-bit dtypes (the dtype itself otherwise), empty splits
    guarded, each result rounded once. Weakness: none known beyond the conditioning."""
    dtype = np.asarray(outputs).dtype
    o, lse = _merge(outputs, lses, work_dtype(dtype))
    return o.astype(dtype), lse.astype(dtype)


@candidate(kind="merge_attention", name="merge_attention.unguarded")
def unguarded(outputs, lses):
    """The textbook merge in float32 without the guards (vLLM PR #39148). Weakness: a query whose splits are all
    empty gives m = -inf and lse - m = -inf - -inf = NaN; an empty split's NaN junk reaches o (0 x NaN)."""
    dtype = np.asarray(outputs).dtype
    o, lse = _merge(outputs, lses, work_dtype(dtype), guard=False)
    return o.astype(dtype), lse.astype(dtype)


@candidate(kind="merge_attention", name="merge_attention.exp_lse")
def exp_lse(outputs, lses):
    """Weights e**lse_s with no shift by the max, in float32 (TransformerEngine PR #716: lse.exp()). Weakness: e**lse
    overflows past 88.7 in float32 (inf / inf is NaN) and underflows below -103."""
    dtype = np.asarray(outputs).dtype
    o, lse = _merge(outputs, lses, work_dtype(dtype), shift=False)
    return o.astype(dtype), lse.astype(dtype)
