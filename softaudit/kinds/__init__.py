"""Kinds: what softaudit audits (softmax, log_softmax, logsumexp, masked_softmax, attention), one object each.

A `Kind` holds its calling convention, outputs, comparisons, families, measures and, as functions, the by-kind parts
of the loop (reference, conditioning, the inputs behind an element, the upstream g); each kind is one module named
for it (kinds/softmax.py ...). `KINDS` is the one registry (`softaudit.KINDS`), and `get` looks a kind up with a
one-line error for an unknown name. Nothing here imports the layers above (causes, budget, hunt, report, runner):
they keep their own tables of what they need of a kind.
"""

from ._grads import GRAD_MODIFIERS as GRAD_MODIFIERS
from ._grads import attention_problem as attention_problem
from ._kind import Kind as Kind
from ._registry import KINDS as KINDS
from ._registry import get as get
from .attention_fp8 import Scheme as Scheme
from .attention_fp8 import scheme_of as scheme_of

__all__ = ["GRAD_MODIFIERS", "KINDS", "Kind", "Scheme", "attention_problem", "get", "scheme_of"]
