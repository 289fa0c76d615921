"""The kinds softaudit audits, assembled: each kind is one module holding its Kind whole (kinds/softmax.py ...
kinds/cross_entropy.py), and adding one is that module, its reference and families, plus one line here; a layer
above that needs more of it (the hunt's strategy, the rounding budget) finds it in its own table, and a kind missing
there goes without."""

from __future__ import annotations

from ._kind import Kind
from .attention import ATTENTION
from .attention_fp8 import ATTENTION_FP8
from .attention_grad import ATTENTION_GRAD
from .attention_lse import ATTENTION_LSE
from .attention_sinks_grad import ATTENTION_SINKS_GRAD
from .cross_entropy import CROSS_ENTROPY, CROSS_ENTROPY_GRAD
from .linear_cross_entropy import LINEAR_CROSS_ENTROPY, LINEAR_CROSS_ENTROPY_GRAD
from .log_softmax import LOG_SOFTMAX
from .log_softmax_grad import LOG_SOFTMAX_GRAD
from .logsumexp import LOGSUMEXP
from .logsumexp_grad import LOGSUMEXP_GRAD
from .masked_softmax import MASKED_SOFTMAX
from .masked_softmax_grad import MASKED_SOFTMAX_GRAD
from .merge_attention import MERGE_ATTENTION
from .quantize_fp8 import QUANTIZE_FP8
from .softmax import SOFTMAX
from .softmax_grad import SOFTMAX_GRAD

#: Every kind by name, in the order the audit runs them.
KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        SOFTMAX,
        LOG_SOFTMAX,
        LOGSUMEXP,
        MASKED_SOFTMAX,
        ATTENTION,
        ATTENTION_LSE,
        CROSS_ENTROPY,
        LINEAR_CROSS_ENTROPY,
        MERGE_ATTENTION,
        ATTENTION_FP8,
        QUANTIZE_FP8,
        SOFTMAX_GRAD,
        LOG_SOFTMAX_GRAD,
        LOGSUMEXP_GRAD,
        MASKED_SOFTMAX_GRAD,
        ATTENTION_GRAD,
        ATTENTION_SINKS_GRAD,
        CROSS_ENTROPY_GRAD,
        LINEAR_CROSS_ENTROPY_GRAD,
    )
}


def get(name) -> Kind:
    """The kind called `name`; ValueError in one line for an unknown one."""
    try:
        return KINDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown kind {name!r}; known: {', '.join(KINDS)}") from None
