"""Bug models: each kind's standard algorithm with one known mistake, beside the same algorithm without it.

softaudit names the cause of a failing or warning row only where one of these reproduces the candidate's output
on the row's worst case, and the model's own fix (the algorithm without the mistake) does not have the error
(softaudit/diagnosis.py). A model is a family of variants, one per choice a kernel makes that the mistake does not
depend on (the working precision, a block size, a fill value, a constant): each variant is a pair of functions with
the kind's calling convention, as a candidate has, the buggy one and the fixed one.

The library grows by adding a model to its kind's module (rows.py, attention.py, cross_entropy.py, grads.py,
lse.py, linear_cross_entropy.py) with a test that an independently written kernel with that mistake gets its name
(tests/test_diagnosis.py, tests/corpus/mistakes.py).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable


class Inapplicable(Exception):
    """A variant that does not apply to these inputs (a 16-bit-only mistake on float32 data, an option the model
    does not take): the diagnosis skips it."""


@dataclasses.dataclass(frozen=True)
class Variant:
    """One way a kernel can make the mistake: its label ("float32, blocks of 64"), the buggy function and the
    same function without the mistake, both with the kind's calling convention."""

    label: str
    buggy: Callable
    fixed: Callable


@dataclasses.dataclass(frozen=True)
class Model:
    """A known mistake in a kind's standard algorithm: its name (the finding's), what the code does in words, the
    fix in one sentence, and the variants tried. events=False: the mistake is named for an error alone, never for a
    NaN or infinity it would also give (a computation in a narrower type overflows where many mistakes do: its
    overflow names no cause)."""

    name: str
    kind: str
    mistake: str
    fix: str
    variants: tuple[Variant, ...]
    events: bool = True
    #: The row's cause where this model explains it, in place of what the worst element's magnitude suggests (a
    #: leak onto masked lanes reads as an accumulation error there); None leaves the cause as it is.
    cause: str | None = None


@functools.cache
def _registry() -> dict[str, tuple[Model, ...]]:
    from . import attention, cross_entropy, grads, linear_cross_entropy, lse, rows

    found: dict[str, list[Model]] = {}
    for module in (rows, attention, cross_entropy, grads, lse, linear_cross_entropy):
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
