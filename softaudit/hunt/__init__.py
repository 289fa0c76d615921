"""The hunt: Hypothesis-driven search for the inputs where an implementation fails, saved to the corpus (a source of
cases: softaudit.cases.load_corpus reads it, re-exported here)."""

from ..cases import load_corpus as load_corpus
from ._engine import Finding as Finding
from ._engine import hunt as hunt
from ._show import describe as describe

__all__ = ["Finding", "describe", "hunt", "load_corpus"]
