"""Adapters: loading targets, the candidate contract, calling a candidate within limits, framework bridges.

This is the package's public face: other packages import these names from here, never from the private modules
(tests/test_layers.py checks). Names load on first use, so marking a candidate (`softaudit.candidate`) imports
neither the reference nor a framework.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import _lazy

_PUBLIC = {
    "Candidate": "._candidate",
    "candidate": "._candidate",
    "check_kind": "._candidate",
    "marking": "._candidate",
    "CandidateSkip": "._bridge",
    "check_device": "._bridge",
    "parse_device": "._bridge",
    "CandidateError": "._call",
    "call": "._call",
    "call_all": "._call",
    "raised_at": "._call",
    "taken": "._call",
    "time_limits": "._call",
    "TargetError": "._targets",
    "load_target": "._targets",
}

if TYPE_CHECKING:
    from ._bridge import CandidateSkip as CandidateSkip
    from ._bridge import check_device as check_device
    from ._bridge import parse_device as parse_device
    from ._call import CandidateError as CandidateError
    from ._call import call as call
    from ._call import call_all as call_all
    from ._call import raised_at as raised_at
    from ._call import taken as taken
    from ._call import time_limits as time_limits
    from ._candidate import Candidate as Candidate
    from ._candidate import candidate as candidate
    from ._candidate import check_kind as check_kind
    from ._candidate import marking as marking
    from ._targets import TargetError as TargetError
    from ._targets import load_target as load_target


__getattr__ = _lazy.first_use(__name__, _PUBLIC)


__all__ = sorted(_PUBLIC)
