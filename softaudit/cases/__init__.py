"""Case families: named, seeded, documented generators of inputs that matter, grouped in suites.

Suites quick (seconds), default (minutes) and full hold the same families at growing sizes. A user's case file
(`load_case_file`) becomes a family of its own, and so does the hunt's corpus (`load_corpus`, family `corpus`).
"""

from .._hex import hex_rows as hex_rows
from ..settings import SUITES as SUITES
from . import _attention, _case, _grad, _grid, _reported, _rows  # noqa: F401  (they register their families)
from ._case import FAMILIES as FAMILIES
from ._case import SIZES as SIZES
from ._case import Case as Case
from ._case import Family as Family
from ._case import families_for as families_for
from ._corpus import corpus_file as corpus_file
from ._corpus import load as load_corpus
from ._corpus import save as save_corpus
from ._files import CaseFileError as CaseFileError
from ._files import check_case_file as check_case_file
from ._files import load_case_file as load_case_file
from ._files import load_case_files as load_case_files
from ._grid import GRIDS as GRIDS
from ._reported import REPORTED as REPORTED

_case.register_kinds_families()

__all__ = [
    "FAMILIES",
    "REPORTED",
    "SIZES",
    "SUITES",
    "Case",
    "CaseFileError",
    "Family",
    "check_case_file",
    "corpus_file",
    "families_for",
    "hex_rows",
    "load_case_file",
    "load_case_files",
    "load_corpus",
    "save_corpus",
]
