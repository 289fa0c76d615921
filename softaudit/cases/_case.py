"""The Case contract, families, suites, and the registry that lists them."""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Mapping

import numpy as np

from .. import kinds as _kinds
from ..reference import Format


@dataclasses.dataclass(frozen=True)
class Case:
    """Inputs for one call of a candidate: exact float64 values, rounded to the audited dtype by the runner."""

    kind: str
    family: str
    arrays: Mapping[str, np.ndarray]  # "x" for the row kinds; "q", "k", "v" for attention
    mask: np.ndarray | None  # boolean, True = keep / may attend
    seed: int | None
    description: str
    params: Mapping[str, float] = dataclasses.field(default_factory=dict)  # e.g. {"scale": 1e3}: what plots use
    #: Keywords of the call beyond the calling convention (cross_entropy's reduction, ignore_index, ...): the
    #: candidate and the reference both get them.
    options: Mapping[str, object] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Size:
    """How big a suite's cases are."""

    rows: int  # rows per row-kind case
    n: int  # entries per row
    long: tuple[int, ...]  # lengths of the long rows
    lq: int  # queries per attention case
    lk: int  # keys in the long attention family
    d: tuple[int, ...]  # head dimensions


SIZES = {
    "quick": Size(rows=4, n=32, long=(1024,), lq=4, lk=256, d=(16, 64)),
    "default": Size(rows=16, n=128, long=(4096, 65536), lq=16, lk=4096, d=(16, 64, 128, 256)),
    "full": Size(rows=64, n=512, long=(4096, 16384, 65536), lq=64, lk=4096, d=(16, 32, 64, 128, 256)),
}


@dataclasses.dataclass(frozen=True)
class Family:
    """A named, seeded, documented generator of cases for the kinds that list it (`Kind.families`)."""

    name: str
    description: str
    make: Callable  # make(kind, fmt, size, rng) -> list of (arrays, mask, description[, params])

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds that run this family."""
        return tuple(k.name for k in _kinds.KINDS.values() if self.name in k.families)

    def cases(self, kind: str, fmt: Format, suite: str, seed: int = 0) -> list[Case]:
        """The family's cases for kind and dtype; the same arguments always give the same cases."""
        seed = zlib.crc32(f"{self.name}/{kind}/{fmt.name}/{suite}/{seed}".encode())
        rng = np.random.default_rng(seed)
        made = self.make(kind, fmt, SIZES[suite], rng)
        entry = _kinds.get(kind)
        if entry.upstream is not None:  # a gradient kind: a Gaussian g where the family gives none
            add = entry.upstream
            made = [(m[0] if "g" in m[0] else m[0] | {"g": add(entry, m[0], m[1], rng)}, *m[1:]) for m in made]
        return [Case(kind, self.name, *m[:2], seed, *m[2:]) for m in made]


FAMILIES: dict[str, Family] = {}


def register_kinds_families() -> None:
    """Register the families a kind holds itself (`Kind.makers`), after the ones registered here."""
    for kind in _kinds.KINDS.values():
        for name, (description, make) in kind.makers.items():
            FAMILIES.setdefault(name, Family(name, description, make))


def family(name: str, description: str):
    """Register a family generator under `name` (the decorated function is its `make`); the kinds that run it list
    it in their `families`."""

    def register(make):
        FAMILIES[name] = Family(name, description, make)
        return make

    return register


def families_for(kind: str) -> list[Family]:
    """The families the kind runs, in registration order."""
    names = _kinds.get(kind).families
    return [f for f in FAMILIES.values() if f.name in names]
