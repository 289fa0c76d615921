"""Built-in log-softmax backward candidates: dx = g - p * sum(g), p = exp(log_softmax(x)), as autograd does.

"In the dtype" as in `softmax`.
"""

from __future__ import annotations

from ..adapters import candidate
from ._ops import dtype_sum, exp, rowwise, work_dtype
from .log_softmax import log1p_form as _log1p_form
from .log_softmax import shifted as _shifted


@candidate(kind="log_softmax_grad", name="log_softmax_grad.in_dtype")
@rowwise
def in_dtype(x, g):
    """Log-softmax backward in the dtype: g - exp(logp) * sum(g), logp max-shifted. Weakness: sum(g) is pairwise
    in the dtype (about log2(n) ulps), p = exp(logp) carries |logp| u of relative error, and g - p sum(g) cancels
    where they agree (the target entry of a cross-entropy gradient, p near 1), leaving the rounding of p."""
    g = g.astype(x.dtype)
    return g - exp(_shifted.__wrapped__(x)) * dtype_sum(g)


@candidate(kind="log_softmax_grad", name="log_softmax_grad.f32acc")
@rowwise
def f32acc(x, g):
    """Best practice: the same formula with logp in the log1p form, all in float32 for 16-bit inputs, rounded
    once. Weakness: none known beyond the conditioning (the cancellation of g - p sum(g))."""
    w = work_dtype(x.dtype)
    g = g.astype(w)
    return (g - exp(_log1p_form.__wrapped__(x.astype(w))) * dtype_sum(g)).astype(x.dtype)
