"""Built-in log-sum-exp candidates, each in the audited dtype unless its name says otherwise (as in softmax)."""

from __future__ import annotations

from ..adapters import candidate
from ._ops import dtype_sum, exp, log, log1p, row_max, rowwise, running_sum, work_dtype
from .softmax import _rest_sum


@candidate(kind="logsumexp", name="logsumexp.naive")
@rowwise
def naive(x):
    """log(sum(exp(x))) in the dtype. Weakness: exp overflows for logits above log(max) (about 11.1 in float16),
    giving inf; rows far below 0 underflow to log(0) = -inf."""
    return log(dtype_sum(exp(x)))[..., 0]


@candidate(kind="logsumexp", name="logsumexp.shifted")
@rowwise
def shifted(x):
    """max + log(sum exp(x - max)) in the dtype. Weakness: when one entry dominates, log of a sum near 1 loses the
    small part: the error is up to u |max| plus a few ulps of log."""
    m = row_max(x)
    return (m + log(dtype_sum(exp(x - m))))[..., 0]


@candidate(kind="logsumexp", name="logsumexp.shifted_running")
@rowwise
def shifted_running(x):
    """logsumexp.shifted with the sum taken one term at a time (recursive summation) in the dtype. Weakness: a sum
    error growing with n, and results below u lost as in shifted."""
    m = row_max(x)
    return (m + log(running_sum(exp(x - m))))[..., 0]


@candidate(kind="logsumexp", name="logsumexp.log1p_form")
@rowwise
def log1p_form(x):
    """max + log1p(s'), s' the sum without the max (Blanchard, Higham & Higham 2021), in the dtype. Weakness: the
    final addition rounds in the dtype; where max and log1p(s') nearly cancel, relative accuracy goes."""
    m = row_max(x)
    return (m + log1p(_rest_sum(exp(x - m))))[..., 0]


@candidate(kind="logsumexp", name="logsumexp.log1p_form_f32acc")
@rowwise
def log1p_form_f32acc(x):
    """Best practice: the log1p form computed in float32 for 16-bit inputs, rounded once. Weakness: none known."""
    return log1p_form.__wrapped__(x.astype(work_dtype(x.dtype))).astype(x.dtype)
