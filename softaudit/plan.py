"""Plan: which units an audit runs (candidate x dtype x family) and in what order, the order of the table's rows.

A plan is decided before anything runs, so every mistake a user can make (an unknown kind, family or device, a
target that does not load, a bad case file) is said first, in one line; what runs it, and where, is the
execute step's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from . import candidates as builtin
from .adapters import Candidate, check_device, check_kind, load_target, parse_device
from .cases import Case, Family, families_for, load_corpus
from .kinds import KINDS
from .reference import Format


def candidates_for(targets, kind, device: str | None = None, check_devices: bool = True) -> list[Candidate]:
    """The candidates of the targets (None: the built-ins), of `kind` if given, framework ones on `device`.

    ValueError (one line) before anything runs: an unknown kind, a target with no candidate of it, an unknown
    device, or one the targets' frameworks do not see (a torch or jax candidate pinned to one included).
    check_devices False leaves that last check to whoever runs them (a cluster's GPU workers)."""
    if kind is not None:
        check_kind(kind)
    parse_device(device)
    if targets is None:  # the built-ins
        found = [c for c in builtin.builtins() if kind is None or c.kind == kind]
    else:
        if isinstance(targets, (str, Path, Candidate)) or callable(targets):
            targets = [targets]
        found = [
            c for target in targets for c in load_target(str(target) if isinstance(target, Path) else target, kind)
        ]
    # A framework candidate not pinned to a device runs on the run's; numpy ones run where numpy does.
    found = [dataclasses.replace(c, device=device) if c.framework != "numpy" and c.device is None else c for c in found]
    for framework, where in dict.fromkeys((c.framework, c.device) for c in found) if check_devices else ():
        check_device(framework, where)
    return found


@dataclasses.dataclass(frozen=True)
class Source:
    """What one family of a kind in one dtype is prepared from: a built-in family's generator (None: none of that
    name), and the cases of case files and the corpus that belong to it."""

    kind: str
    name: str
    builtin: Family | None
    extra: tuple[Case, ...] = ()


@dataclasses.dataclass(frozen=True)
class Group:
    """The units of one kind in one dtype: its families (in row order) times its candidates (in target order)."""

    kind: str
    fmt: Format
    sources: tuple[Source, ...]
    candidates: tuple[Candidate, ...]


def check_families(only: set | None) -> None:
    """ValueError (one line) for a family name that is neither built in, nor a case file's, nor the corpus."""
    builtin_names = {f.name for k in KINDS for f in families_for(k)}
    unknown = sorted(n for n in only or () if n not in builtin_names and not n.startswith("file:") and n != "corpus")
    if unknown:
        raise ValueError(f"unknown family {unknown[0]!r}; `softaudit cases` lists them")


def groups(found: list[Candidate], formats: list[Format], from_files: dict, only: set | None, corpus) -> list[Group]:
    """The audit's units, kind by kind (in the kinds' order) and dtype by dtype: the row order of the table.

    from_files: each kind's cases from case files (read once, before anything runs); corpus: a folder of hunt
    findings (each case in its own dtype), or None."""
    planned = []
    its_kinds = [k for k in KINDS if any(c.kind == k for c in found)]
    left_out = [k for k in its_kinds if not _dtypes_of(k, formats)]
    if left_out and len(left_out) == len(its_kinds):  # (nothing to run: one line; else those kinds are left out)
        own = KINDS[left_out[0]].dtypes
        which = f"{', '.join(own[:-1])} or {own[-1]}" if len(own) > 1 else own[0]
        named = ", ".join(f.name for f in formats)
        raise ValueError(f"{left_out[0]} is audited in {which} (its output's dtype); --dtype named {named}")
    for kind in its_kinds:
        mine = tuple(c for c in found if c.kind == kind)
        for fmt in _dtypes_of(kind, formats):
            extra = list(from_files[kind]) + (load_corpus(corpus, kind, fmt.name) if corpus else [])
            planned.append(Group(kind, fmt, sources(kind, [c for c in extra if wanted(c.family, only)], only), mine))
    return planned


def _dtypes_of(kind: str, formats: list[Format]) -> list[Format]:
    """The audited dtypes a kind is audited in (`Kind.dtypes`: attention_fp8's o, quantize_fp8's FP8 format)."""
    own = KINDS[kind].dtypes
    return [f for f in formats if own is None or f.name in own]


def check_planned(planned: list[Group], only: set | None) -> None:
    """ValueError (one line) where `families=` leaves the targets' kinds nothing to run (an audit of 0 rows would
    pass any gate)."""
    if only is None or any(group.sources for group in planned):
        return
    kinds = ", ".join(dict.fromkeys(group.kind for group in planned))
    raise ValueError(
        f"no family named {', '.join(sorted(only))} applies to the targets' kinds ({kinds}) or is among their "
        "case files and corpus; `softaudit cases --kind K` lists a kind's families"
    )


def sources(kind: str, extra: list[Case], only: set | None) -> tuple[Source, ...]:
    """The families of a kind: the built-in ones `families=` keeps, in registration order, then those of the case
    files and the corpus in the order their cases come; a case joins the built-in family of its name, if any."""
    by_name = {f.name: Source(kind, f.name, f) for f in families_for(kind) if wanted(f.name, only)}
    for case in extra:
        found = by_name.get(case.family) or Source(kind, case.family, None)
        by_name[case.family] = dataclasses.replace(found, extra=found.extra + (case,))
    return tuple(by_name.values())


def wanted(name: str, only: set | None) -> bool:
    """Whether `families=` keeps a family. Case files and the corpus are always kept unless `only` names one of them."""
    if only is None or name in only:
        return True
    own = name.startswith("file:") or name == "corpus"
    return own and not any(n.startswith("file:") or n == "corpus" for n in only)
