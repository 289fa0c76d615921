"""Built-in log-softmax candidates, each in the audited dtype unless its name says otherwise (as in softmax)."""

from __future__ import annotations

from ..adapters import candidate
from ._ops import dtype_sum, exp, log, log1p, row_max, rowwise, running_sum, work_dtype
from .softmax import _rest_sum, max_shifted


@candidate(kind="log_softmax", name="log_softmax.log_of_softmax")
@rowwise
def log_of_softmax(x):
    """log(softmax(x)), the softmax max-shifted in the dtype. Weakness: probabilities that underflow give
    log(0) = -inf where the log-softmax is finite (below about -17 in float16, -104 in float32)."""
    return log(max_shifted(x))


@candidate(kind="log_softmax", name="log_softmax.shifted")
@rowwise
def shifted(x):
    """(x - max) - log(sum exp(x - max)) in the dtype. Weakness: when one entry dominates, the sum rounds to 1 and
    log-softmax of the top entry, a tiny negative number, comes out 0 (or wrong in every digit)."""
    t = x - row_max(x)
    return t - log(dtype_sum(exp(t)))


@candidate(kind="log_softmax", name="log_softmax.shifted_running")
@rowwise
def shifted_running(x):
    """log_softmax.shifted with the sum taken one term at a time (recursive summation) in the dtype. Weakness:
    those of shifted, and a sum error growing with n."""
    t = x - row_max(x)
    return t - log(running_sum(exp(t)))


@candidate(kind="log_softmax", name="log_softmax.log1p_form")
@rowwise
def log1p_form(x):
    """(x - max) - log1p(s'), s' the sum without the max (Blanchard, Higham & Higham 2021), in the dtype.
    Weakness: s' and log1p are rounded in the dtype: a few ulps, relative, even for the top entry."""
    t = x - row_max(x)
    return t - log1p(_rest_sum(exp(t)))


@candidate(kind="log_softmax", name="log_softmax.log1p_form_f32acc")
@rowwise
def log1p_form_f32acc(x):
    """Best practice: the log1p form computed in float32 for 16-bit inputs, rounded once. Weakness: none known."""
    w = x.astype(work_dtype(x.dtype))
    return log1p_form.__wrapped__(w).astype(x.dtype)
