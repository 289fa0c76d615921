"""Built-in candidates: the implementations people write, each with its known weakness in its docstring.

Each is a plain numpy function of the audited dtype, marked with @softaudit.candidate, so `softaudit.candidates`
is itself a target. Every built-in gives the same bits on every x86-64 CPU: its exp, log, sums and matrix products
come from `_ops`, built from IEEE basic operations, never from numpy's CPU-dispatched ufuncs or from BLAS.

Per kind two built-ins serve as comparisons in verdicts: PLAIN, the implementation a kernel engineer writes in the
low precision without upcasting (FlashAttention's tests compare against exactly such a reference), and BEST, the
best practice (computed in float32 for 16-bit dtypes and rounded once, in the dtype itself otherwise).
"""

from ..adapters._candidate import Candidate
from ..adapters._targets import load_target
from . import attention, log_softmax, logsumexp, masked_softmax, softmax
from .attention import tiled_attention as tiled_attention
from .softmax import online_softmax as online_softmax

#: The plain same-dtype implementation per kind: every step rounded to the audited dtype, no upcast.
PLAIN = {
    "softmax": "softmax.max_shifted",
    "log_softmax": "log_softmax.shifted",
    "logsumexp": "logsumexp.shifted",
    "masked_softmax": "masked_softmax.where_in_dtype",
    "attention": "attention.naive",
}

#: The best-practice built-in per kind: computed in float32 for 16-bit dtypes, in the dtype itself otherwise.
BEST = {
    "softmax": "softmax.max_shifted_f32acc",
    "log_softmax": "log_softmax.log1p_form_f32acc",
    "logsumexp": "logsumexp.log1p_form_f32acc",
    "masked_softmax": "masked_softmax.where",
    "attention": "attention.upcast",
}


def builtins() -> list[Candidate]:
    """Every built-in candidate, kind by kind, in definition order."""
    return [c for module in (softmax, log_softmax, logsumexp, masked_softmax, attention) for c in load_target(module.__name__)]


def _named(name: str) -> Candidate:
    return next(c for c in builtins() if c.name == name)


def plain(kind: str) -> Candidate:
    """The plain comparison for `kind`: what a kernel written in the audited dtype, without upcasting, gives."""
    return _named(PLAIN[kind])


def best(kind: str) -> Candidate:
    """The best-practice comparison for `kind`: float32 arithmetic for 16-bit dtypes, rounded once."""
    return _named(BEST[kind])


__all__ = ["BEST", "PLAIN", "best", "builtins", "online_softmax", "plain", "tiled_attention"]
