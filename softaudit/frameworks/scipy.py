"""SciPy's scipy.special.softmax, log_softmax and logsumexp (numpy arrays in, numpy arrays out)."""

from __future__ import annotations

from ..adapters import candidate
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

    return special.logsumexp(x, axis=axis)
