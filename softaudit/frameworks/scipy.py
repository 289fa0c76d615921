"""SciPy's scipy.special.softmax, log_softmax and logsumexp (numpy arrays in, numpy arrays out)."""

from __future__ import annotations

import numpy as np

from ..adapters import CandidateSkip, candidate
from ._need import need

need("scipy", "scipy")


@candidate(kind="softmax", name="scipy.special.softmax")
def softmax(x, axis=-1):
    """scipy.special.softmax(x, axis)."""
    from scipy import special

    return special.softmax(x, axis=axis)


@candidate(kind="log_softmax", name="scipy.special.log_softmax")
def log_softmax(x, axis=-1):
    """scipy.special.log_softmax(x, axis)."""
    from scipy import special

    return special.log_softmax(x, axis=axis)


@candidate(kind="logsumexp", name="scipy.special.logsumexp")
def logsumexp(x, axis=-1):
    """scipy.special.logsumexp(x, axis)."""
    from scipy import special

    try:
        return special.logsumexp(x, axis=axis)
    except TypeError as exc:
        if x.dtype.kind == "f":  # (numpy's own float types: the error is SciPy's, and an error row says so)
            raise
        said = f"scipy.special.logsumexp does not take {x.dtype} arrays with numpy {np.__version__}: {exc}"
        raise CandidateSkip(said) from exc
