"""Built-in candidates: the implementations people write, each with its known weakness in its docstring.

Each is a plain numpy function of the audited dtype, marked with @softaudit.candidate, so `softaudit.candidates`
is itself a target. SOUND names, per kind, the best-practice built-in that serves as the comparison in verdicts.
"""

from ..adapters._candidate import Candidate
from ..adapters._targets import load_target
from . import attention, log_softmax, logsumexp, masked_softmax, softmax
from .attention import tiled_attention as tiled_attention
from .softmax import online_softmax as online_softmax

#: The best-practice built-in per kind: computed in float32 for 16-bit dtypes, in the dtype itself otherwise.
SOUND = {
    "softmax": "softmax.max_shifted_f32acc",
    "log_softmax": "log_softmax.log1p_form_f32acc",
    "logsumexp": "logsumexp.log1p_form_f32acc",
    "masked_softmax": "masked_softmax.where",
    "attention": "attention.upcast",
}


def builtins() -> list[Candidate]:
    """Every built-in candidate, kind by kind, in definition order."""
    return [c for module in (softmax, log_softmax, logsumexp, masked_softmax, attention) for c in load_target(module.__name__)]


def sound(kind: str) -> Candidate:
    """The comparison implementation for `kind`."""
    return next(c for c in builtins() if c.name == SOUND[kind])


__all__ = ["SOUND", "builtins", "online_softmax", "sound", "tiled_attention"]
