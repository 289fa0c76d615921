"""A bug model's parts: the model, its variants, and the exception a variant raises where it does not apply. They
live below the package's face, which assembles the models of its kind modules (and each imports these)."""

from __future__ import annotations

import dataclasses
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
