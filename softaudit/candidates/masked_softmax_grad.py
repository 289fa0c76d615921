"""Built-in masked softmax backward candidates: dx = p * (g - <g, p>) on kept entries, exactly 0 on masked entries
and on fully masked rows (whose forward result is all zeros, a constant).

As in `masked_softmax`, the idioms compute around a float32-accumulated softmax, so each shows what its masking
alone does; `where_in_dtype` is the plain comparison, the best-practice idiom computed in the dtype itself.
"""

from __future__ import annotations

import numpy as np

from ..adapters import candidate
from ._ops import const, dtype_sum, exp, row_max, rowwise, work_dtype
from .masked_softmax import _normalised
from .softmax_grad import f32acc as _softmax_grad_f32acc
from .softmax_grad import vjp


@candidate(kind="masked_softmax_grad", name="masked_softmax_grad.fill_neginf")
@rowwise
def fill_neginf(x, mask, g):
    """Backward of softmax(where(mask, x, -inf)), in float32 for 16-bit inputs. Weakness: a fully masked row is
    -inf - (-inf) = NaN in the forward, and a backward from that p is NaN too (the exact gradient is 0): a
    documented defect. (Autograd through masked_fill zeroes the filled entries' gradient instead; the NaN forward
    output still poisons the loss.)"""
    return _softmax_grad_f32acc.__wrapped__(np.where(mask, x, const(-np.inf, x.dtype)), g)


def _where_vjp(x, mask, g, saved=None):
    """The where idiom in x's dtype: max over kept entries, exp only where kept, p = 0 on masked entries and on
    fully masked rows, g ignored where masked (an inf there must not leak as 0 * inf). saved: a dtype p is rounded
    to between forward and backward, as autograd saves the forward's output."""
    zero = np.zeros((), x.dtype)
    m = row_max(np.where(mask, x, const("finfo_min", x.dtype)))  # (float8_e4m3fn has no -inf)
    e = np.where(mask, exp(x - np.where(np.isfinite(m), m, zero)), zero)
    p = _normalised(e, dtype_sum(e), mask)
    if saved is not None:
        p = p.astype(saved).astype(x.dtype)
    return np.where(mask, vjp(p, np.where(mask, g.astype(x.dtype), zero)), zero)


@candidate(kind="masked_softmax_grad", name="masked_softmax_grad.where")
@rowwise
def where(x, mask, g):
    """Best practice: the where idiom's backward (p only over kept entries, exactly 0 on masked entries and fully
    masked rows), in float32 for 16-bit inputs, rounded once. Weakness: none known."""
    w = work_dtype(x.dtype)
    return _where_vjp(x.astype(w), mask, g.astype(w)).astype(x.dtype)


@candidate(kind="masked_softmax_grad", name="masked_softmax_grad.where_in_dtype")
@rowwise
def where_in_dtype(x, mask, g):
    """The where idiom's backward with every step rounded to the dtype, as a kernel written for a 16-bit dtype
    without upcasting does. Weakness: the dtype's rounding of p and of the dot <g, p> (about log2(n) ulps)."""
    return _where_vjp(x, mask, g)


@candidate(kind="masked_softmax_grad", name="masked_softmax_grad.where_saved_output")
@rowwise
def where_saved_output(x, mask, g):
    """The where idiom as autograd runs it (jax.nn.softmax(where=mask)'s VJP, a masked softmax's saved output): the
    forward's p in float32 for 16-bit inputs, rounded to the dtype and saved, then the backward in float32 from
    it, rounded once. Weakness: p's rounding enters <g, p> and the product (see softmax_grad.saved_output)."""
    w = work_dtype(x.dtype)
    return _where_vjp(x.astype(w), mask, g.astype(w), saved=x.dtype).astype(x.dtype)
