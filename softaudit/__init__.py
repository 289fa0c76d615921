"""softaudit: how wrong is a softmax or attention implementation, where, and did a change make it worse?

`audit` runs implementations against the exact reference on case families and returns a results table;
`audit_shapes` runs them on production shapes, measured on sampled rows (`Shape` names one);
`candidate` marks a callable as an implementation to audit; a candidate raises `CandidateSkip` for an input it
does not support; `assert_accurate` fails a test with a table of what failed; `softaudit.reference` holds the
ground truth; `KINDS` is every kind it audits, by name (a `softaudit.kinds.Kind`: calling convention, outputs,
comparisons, families). The errors a user catches: `TargetError` (a target that does not load), `CaseFileError`
(a case file that cannot be read), `CandidateError` (a candidate that raised, hung or returned garbage, as
`softaudit.worst.replay` reports it). Names load on first use, so `import softaudit` (and the pytest plugin)
stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _lazy

__version__ = "0.1.0"

_PUBLIC = {
    "KINDS": ".kinds",
    "Candidate": ".adapters",
    "candidate": ".adapters",
    "CandidateSkip": ".adapters",
    "CandidateError": ".adapters",
    "TargetError": ".adapters",
    "CaseFileError": ".cases",
    "Policy": ".policy",
    "AuditResult": ".results",
    "audit": ".runner",
    "audit_shapes": ".sampled",
    "Shape": ".sampled",
    "assert_accurate": "._assertions",
    "reference": ".reference",
}

if TYPE_CHECKING:
    from . import reference as reference
    from ._assertions import assert_accurate as assert_accurate
    from .adapters import Candidate as Candidate
    from .adapters import CandidateError as CandidateError
    from .adapters import CandidateSkip as CandidateSkip
    from .adapters import TargetError as TargetError
    from .adapters import candidate as candidate
    from .cases import CaseFileError as CaseFileError
    from .kinds import KINDS as KINDS
    from .policy import Policy as Policy
    from .results import AuditResult as AuditResult
    from .runner import audit as audit
    from .sampled import Shape as Shape
    from .sampled import audit_shapes as audit_shapes


__getattr__ = _lazy.first_use(__name__, _PUBLIC, whole=("reference",))


__all__ = [
    "KINDS",
    "AuditResult",
    "Candidate",
    "CandidateError",
    "CandidateSkip",
    "CaseFileError",
    "Policy",
    "Shape",
    "TargetError",
    "__version__",
    "assert_accurate",
    "audit",
    "audit_shapes",
    "candidate",
    "reference",
]
