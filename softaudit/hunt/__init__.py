"""The hunt: Hypothesis-driven search for the inputs where an implementation fails, and the corpus it keeps."""

from ._corpus import load as load_corpus
from ._engine import Finding as Finding
from ._engine import hunt as hunt
from ._show import describe as describe

__all__ = ["Finding", "describe", "hunt", "load_corpus"]
