"""Kinds: what softaudit audits (softmax, log_softmax, logsumexp, masked_softmax, attention), one object each.

A `Kind` holds its calling convention, outputs, reference, comparisons, families, measures and the by-kind parts
of the loop; `KINDS` is the one registry and `get` looks a kind up with a one-line error for an unknown name.
"""

from ._kind import Kind as Kind
from ._registry import KINDS as KINDS
from ._registry import get as get

__all__ = ["KINDS", "Kind", "get"]
