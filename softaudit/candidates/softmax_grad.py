"""Built-in softmax backward candidates: dx = p * (g - <g, p>), p = softmax(x), each recomputing p from x.

"In the dtype" as in `softmax`: every step rounded to the dtype, exp and log the portable ones of `_ops`, sums
pairwise in the dtype (`dtype_sum`).
"""

from __future__ import annotations

from ..adapters import candidate
from ._ops import dtype_sum, exp, row_max, rowwise, work_dtype
from .log_softmax import shifted as _log_softmax_in_dtype
from .softmax import max_shifted as _softmax_in_dtype


def vjp(p, g):
    """p * (g - <g, p>) along the last axis, every step in p's dtype (the dot pairwise in it)."""
    return p * (g - dtype_sum(g * p))


@candidate(kind="softmax_grad", name="softmax_grad.in_dtype")
@rowwise
def in_dtype(x, g):
    """Softmax backward in the dtype: p max-shifted, then p * (g - <g, p>). Weakness: p and the dot <g, p> are
    rounded to the dtype (the dot about log2(n) ulps on long rows), and g - <g, p> cancels where g is near its
    p-weighted mean, so a 16-bit dtype loses the gradient's small entries."""
    return vjp(_softmax_in_dtype.__wrapped__(x), g.astype(x.dtype))


@candidate(kind="softmax_grad", name="softmax_grad.from_logp")
@rowwise
def from_logp(x, g):
    """Softmax backward from saved log-probabilities, p = exp(logp), as a backward that keeps log-softmax does.
    Weakness: the rounding of logp (half an ulp of |logp|) becomes a relative error of p of about |logp| u, so the
    small probabilities, and their gradient entries, lose digits in proportion to how negative logp is."""
    p = exp(_log_softmax_in_dtype.__wrapped__(x))
    return vjp(p, g.astype(x.dtype))


@candidate(kind="softmax_grad", name="softmax_grad.f32acc")
@rowwise
def f32acc(x, g):
    """Best practice: softmax backward in float32 for 16-bit inputs (p, the dot and the product), rounded once.
    Weakness: none known beyond the conditioning (g - <g, p> cancels; only the final rounding is the dtype's)."""
    w = work_dtype(x.dtype)
    return vjp(_softmax_in(x, w), g.astype(w)).astype(x.dtype)


@candidate(kind="softmax_grad", name="softmax_grad.saved_output")
@rowwise
def saved_output(x, g):
    """What autograd does (PyTorch's softmax backward, jax.nn.softmax's VJP): the forward's output y, computed in
    float32 for 16-bit inputs and rounded to the dtype, is saved, and the backward computes y (g - <g, y>) from it
    in float32, rounded once. Weakness: y's rounding (up to half an ulp of each p) enters <g, y> and the product,
    so where g - <g, p> cancels a 16-bit dtype loses the small entries, and a dominant p rounded to 1 hides 1 - p."""
    w = work_dtype(x.dtype)
    y = _softmax_in(x, w).astype(x.dtype).astype(w)
    return vjp(y, g.astype(w)).astype(x.dtype)


def _softmax_in(x, w):
    """p = softmax(x) max-shifted, every step in the work dtype w."""
    x32 = x.astype(w)
    e = exp(x32 - row_max(x32))
    return e / dtype_sum(e)
