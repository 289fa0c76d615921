"""Bug models: each kind's standard algorithm with one known mistake, beside the same algorithm without it.

softaudit names the cause of a failing or warning row only where one of these reproduces the candidate's output
on the row's worst case, and the model's own fix (the algorithm without the mistake) does not have the error
(softaudit/diagnosis.py). A model is a family of variants, one per choice a kernel makes that the mistake does not
depend on (the working precision, a block size, a fill value, a constant): each variant is a pair of functions with
the kind's calling convention, as a candidate has, the buggy one and the fixed one.

The library grows by adding a model to its kind's module (rows.py, attention.py, cross_entropy.py, grads.py,
lse.py, linear_cross_entropy.py, fp8.py) with a test that an independently written kernel with that mistake gets
its name (tests/test_diagnosis.py, tests/corpus/mistakes.py).
"""

from __future__ import annotations

import functools

from ._model import Inapplicable as Inapplicable
from ._model import Model as Model
from ._model import Variant as Variant


@functools.cache
def _registry() -> dict[str, tuple[Model, ...]]:
    from . import attention, cross_entropy, fp8, grads, linear_cross_entropy, lse, rows

    found: dict[str, list[Model]] = {}
    for module in (rows, attention, cross_entropy, grads, lse, linear_cross_entropy, fp8):
        for model in module.MODELS:
            found.setdefault(model.kind, []).append(model)
    return {kind: tuple(models) for kind, models in found.items()}


def models(kind: str) -> tuple[Model, ...]:
    """The bug models of a kind (none for a kind without a library yet)."""
    return _registry().get(kind, ())


def cause_of(kind: str, name: str) -> str | None:
    """The cause a finding of the model `name` gives its row (`Model.cause`), None where it gives none."""
    found = [m.cause for m in models(kind) if m.name == name]
    return found[0] if found else None


def kinds_modelled() -> tuple[str, ...]:
    """The kinds that have bug models."""
    return tuple(_registry())
