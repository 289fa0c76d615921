"""Built-in softmax candidates, each in the audited dtype unless its name says otherwise.

"In the dtype": every step rounded to the dtype, exp and log the portable ones of `_ops` (float64, rounded once to
the dtype), sums pairwise in the dtype (`dtype_sum`).
"""

from __future__ import annotations

import itertools

import numpy as np

from ..adapters import candidate
from ._ops import const, dtype_sum, exp, log, log1p, row_max, rowwise, running_sum, work_dtype
from ._ops import exp2 as _exp2  # the name exp2 is the candidate below


@candidate(kind="softmax", name="softmax.naive")
@rowwise
def naive(x):
    """exp(x) / sum(exp(x)) in the dtype. Weakness: exp overflows past log(max): logits above about 11.1 in
    float16, 88.7 in float32 and bfloat16, 709.8 in float64 give inf / inf = NaN; rows far below 0 underflow to 0/0."""
    e = exp(x)
    return e / dtype_sum(e)


@candidate(kind="softmax", name="softmax.max_shifted")
@rowwise
def max_shifted(x):
    """exp(x - max) / sum in the dtype. Weakness: the sum accumulates in the dtype, so long 16-bit rows carry the
    dtype's rounding once per level of the sum (about log2(n) ulps)."""
    e = exp(x - row_max(x))
    return e / dtype_sum(e)


@candidate(kind="softmax", name="softmax.max_shifted_running")
@rowwise
def max_shifted_running(x):
    """exp(x - max) / sum in the dtype, the sum taken one term at a time (recursive summation), as a loop does and
    as numpy sums bfloat16. Weakness: the sum's error grows with n ((n - 1) u at worst); in bfloat16 a sum of
    terms near 1 stops growing at 256."""
    e = exp(x - row_max(x))
    return e / running_sum(e)


@candidate(kind="softmax", name="softmax.max_shifted_f32acc")
@rowwise
def max_shifted_f32acc(x):
    """Best practice: upcast 16-bit inputs to float32, max-shift, sum (pairwise), divide, round once. Weakness: none
    known; float32 and float64 are computed in their own precision."""
    w = x.astype(work_dtype(x.dtype))
    e = exp(w - w.max(axis=-1, keepdims=True, initial=-np.inf))
    return (e / dtype_sum(e)).astype(x.dtype)


@candidate(kind="softmax", name="softmax.split_by_batch")
@rowwise
def split_by_batch(x):
    """Best practice's arithmetic (16-bit inputs in float32, pairwise sums, one rounding), but each row's sum cut
    into 64 // rows chunks (at least one), as split-K heuristics choose them to fill the machine whatever the batch.
    Weakness: not batch-invariant: in another batch a row is summed in other chunks, and its outputs move by an
    ulp or so; accurate otherwise."""
    w = x.astype(work_dtype(x.dtype))
    n = x.shape[-1]
    splits = max(1, min(64 // max(int(np.prod(x.shape[:-1])), 1), n))
    e = exp(w - w.max(axis=-1, keepdims=True, initial=-np.inf))
    bounds = [n * i // splits for i in range(splits + 1)]
    parts = np.concatenate([dtype_sum(e[..., a:b]) for a, b in itertools.pairwise(bounds)], axis=-1)
    return (e / dtype_sum(parts)).astype(x.dtype)


def online_softmax(block: int = 128):
    """A streaming softmax that reads the row in blocks of `block`, keeping a running max and rescaled sum."""

    @rowwise
    def online(x):
        """Streaming (online) softmax in the dtype, blocks of {block}: running max m, sum s *= exp(m_old - m_new).
        Weakness: the running sum accumulates block by block in the dtype and stalls on long 16-bit rows once it
        dwarfs each block's sum; a row of -inf gives NaN (-inf - -inf)."""
        m = row_max(x[..., :block])
        s = dtype_sum(exp(x[..., :block] - m))
        for start in range(block, x.shape[-1], block):
            chunk = x[..., start : start + block]
            new_m = np.maximum(m, row_max(chunk))
            s = s * exp(m - new_m) + dtype_sum(exp(chunk - new_m))
            m = new_m
        return exp(x - m) / s

    online.__doc__ = online.__doc__.format(block=block)
    online.__name__ = online.__qualname__ = f"online_b{block}"
    return candidate(online, kind="softmax", name=f"softmax.online_b{block}")


online_b128 = online_softmax(128)


@candidate(kind="softmax", name="softmax.exp2")
@rowwise
def exp2(x):
    """exp2((x - max) * log2(e)) / sum in the dtype, as fused GPU kernels compute exp. Weakness: log2(e) rounded to
    the dtype and the rounded product add relative error about |x - max| u: large spreads lose ulps."""
    t = (x - row_max(x)) * const(LOG2_E, x.dtype)
    e = _exp2(t)
    return e / dtype_sum(e)


@candidate(kind="softmax", name="softmax.division_free")
@rowwise
def division_free(x):
    """exp(x - lse) with lse = max + log(sum exp(x - max)), in the dtype. Weakness: the error of lse (about u |lse|)
    becomes a relative error of every output: large logits lose accuracy."""
    m = row_max(x)
    lse = m + log(dtype_sum(exp(x - m)))
    return exp(x - lse)


#: log2(e) rounded to float64 (a literal: numpy's own log2 may round differently on another CPU).
LOG2_E = 1.4426950408889634


def _rest_sum(e: np.ndarray) -> np.ndarray:
    """Sum of e over every entry but the first maximum (whose e is 1), in e's dtype."""
    top = np.argmax(e, axis=-1)[..., None]
    rest = np.where(np.arange(e.shape[-1]) == top, np.zeros((), e.dtype), e)
    return dtype_sum(rest)


@candidate(kind="softmax", name="softmax.log1p_form")
@rowwise
def log1p_form(x):
    """exp(x - max - log1p(s')) with s' the sum without the max (Blanchard, Higham & Higham 2021), in the dtype.
    Weakness: exp of a sum of rounded terms: about (2 + |x - max|) u relative error per output."""
    t = x - row_max(x)
    return exp(t - log1p(_rest_sum(exp(t))))
