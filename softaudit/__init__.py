"""softaudit: how wrong is a softmax or attention implementation, where, and did a change make it worse?

`audit` runs implementations against the exact reference on case families and returns a results table;
`candidate` marks a function as an implementation to audit; `assert_accurate` fails a test with a table of what
failed; `softaudit.reference` holds the ground truth. Names load on first use, so `import softaudit` (and the
pytest plugin) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_PUBLIC = {
    "KINDS": ".adapters._candidate",
    "Candidate": ".adapters._candidate",
    "candidate": ".adapters._candidate",
    "Policy": ".policy",
    "AuditResult": ".runner",
    "audit": ".runner",
    "assert_accurate": "._assertions",
    "reference": ".reference",
}

if TYPE_CHECKING:
    from . import reference as reference
    from ._assertions import assert_accurate as assert_accurate
    from .adapters._candidate import KINDS as KINDS
    from .adapters._candidate import Candidate as Candidate
    from .adapters._candidate import candidate as candidate
    from .policy import Policy as Policy
    from .runner import AuditResult as AuditResult
    from .runner import audit as audit


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'softaudit' has no attribute {name!r}")
    module = importlib.import_module(_PUBLIC[name], __name__)
    value = module if name == "reference" else getattr(module, name)
    globals()[name] = value
    return value


__all__ = ["KINDS", "AuditResult", "Candidate", "Policy", "__version__", "assert_accurate", "audit", "candidate", "reference"]
