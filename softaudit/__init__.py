"""softaudit: how wrong is a softmax or attention implementation, where, and did a change make it worse?

`audit` runs implementations against the exact reference on case families and returns a results table;
`candidate` marks a function as an implementation to audit; `softaudit.reference` holds the ground truth.
"""

from . import reference as reference
from .adapters._candidate import KINDS as KINDS
from .adapters._candidate import Candidate as Candidate
from .adapters._candidate import candidate as candidate
from .policy import Policy as Policy
from .runner import AuditResult as AuditResult
from .runner import audit as audit

__version__ = "0.1.0"

__all__ = ["KINDS", "AuditResult", "Candidate", "Policy", "__version__", "audit", "candidate", "reference"]
