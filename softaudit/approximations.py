"""Declared approximations (Kind.approximations: Cut Cross-Entropy's gradient filter) judged for what they are: a
row past the fail line but within u (scale + T) + B at every element, B the declared approximation's bound from the
exact problem, is a warn with its size; past it a fail that says so (docs/policy.md, "linear_cross_entropy's
gradient filtering")."""

from __future__ import annotations

import math

import numpy as np

from . import kinds
from .adapters import Candidate
from .metrics import fail_line
from .policy import Reason
from .reference import Format

#: The cause (and finding) of a row within its declared approximation's bound and past the fail line: a warn.
APPROXIMATION = "approximation"


def bounds(candidate: Candidate, fmt: Format, fam) -> tuple | None:
    """(words, {case index: each output's bound B}) of the approximations the candidate declared
    (Kind.approximations: Cut Cross-Entropy's gradient filter), B summed over them; None where it declared none."""
    kind = kinds.get(candidate.kind)
    declared = kind.approximated(candidate.conventions)
    if not declared:
        return None
    found = {}
    for pc in fam.prepared:
        each = [kind.approximations[name](kind, pc.inputs, pc.case.options, value, fmt) for name, value in declared]
        found[pc.case_in_family] = tuple(sum(parts) for parts in zip(*each))
    words = " and ".join(f"{value} {kind.declarable[name][0]}" for name, value in declared)
    return words, found


def within(pcs: list, outputs: dict, index: int, line, declared: tuple) -> tuple[bool, float, str]:
    """(within, size, words) of one output: whether every compared element is within u L + B (L its fail line,
    metrics.fail_line; B the declared approximation's bound), and the largest |y - r| / B among the elements past
    u L (0 where none is): how much of its bound the approximation used."""
    words, found = declared  # (`bounds`)
    within, size = True, 0.0
    for pc in pcs:
        b, bound = pc.basis, np.asarray(found[pc.case_in_family][index], dtype=np.float64)
        y = np.asarray(outputs[pc.case_in_family][index]).astype(np.float64)
        r = b.hi if b.lo is None else b.hi + b.lo
        compare = b.finite_ref & np.isfinite(y)
        inv_bound = b.inv_scale if b.inv_bound is None else b.inv_bound
        inv_reorder = b.inv_scale if b.inv_reorder is None else b.inv_reorder
        with np.errstate(all="ignore"):
            inverse = fail_line(b.inv_scale, inv_bound, inv_reorder, line)
            rounding = np.where(inverse > 0, math.ldexp(1.0, -b.fmt.precision) / inverse, np.inf)
            err = np.where(compare, np.abs(y - r), 0.0)
            within = within and bool((err <= rounding + bound).all())
            past = (err > rounding) & (bound > 0)
            if past.any():
                size = max(size, float((err[past] / bound[past]).max()))
    return within, size, words


def judged(reasons: list[Reason], within: bool, size: float, words: str) -> list[Reason]:
    """The reasons of a row whose candidate declared an approximation: its accuracy defect a warn with its size
    where every element is within u L + B, else a fail that says so; the other rules as they were, fails first."""
    changed = []
    for reason in reasons:
        if reason.rule != "defect":
            changed.append(reason)
        elif within:
            text = (
                f"past the fail line by what its declared {words} may skip: up to {size:.3g} x that bound B, "
                "and within u (scale + T) + B at every element"
            )
            changed.append(Reason("warn", APPROXIMATION, text))
        else:
            changed.append(Reason("fail", "defect", f"{reason.text}; past u (scale + T) + B of its declared {words}"))
    return [r for r in changed if r.verdict == "fail"] + [r for r in changed if r.verdict != "fail"]
