"""Baselines: write one, read one, and compare a run with it (a ratchet: known findings pass, regressions fail).

A baseline holds, per candidate x dtype x family, the verdict, the max ULP and conditioning-scaled errors and the
event counts, with the library versions, the machine and its platform key (the CPU features numpy dispatches to,
the BLAS and its kernels, the numeric libraries, the frameworks the candidates loaded where they ran and their GPU:
softaudit.report.platform_key). It is sorted and indented so that a diff of it reads well.

On the platform the baseline was made on, every change for the worse is a regression: a verdict, a new event, an
error grown past the tolerance. On any platform, a row the baseline does not have (a new candidate, dtype or
family) is a regression when it fails or errors; a new row that passes or warns is listed as new. On another
platform the same code may round differently (numpy's SIMD functions and BLAS kernels differ per CPU), so only a
worse verdict is a regression; other differences are reported as platform differences.
"""

from __future__ import annotations

import dataclasses
import json
import math
import reprlib
from pathlib import Path

from ._atomic import write_atomic
from .report import machine, platform_key, versions
from .results import SEVERITY, row_key
from .settings import default

EVENTS = ("nan", "overflow", "wrong_inf", "underflow", "flushed", "mask_leak")
FORMAT_VERSION = 2


class BaselineError(ValueError):
    """A baseline file that cannot be read: the message is one line for the user."""


def _measure(value) -> float | None:
    """A measure as a baseline keeps it: 7 significant digits, None where nothing was compared."""
    return None if value is None or math.isnan(value) else float(f"{float(value):.7g}")


def row_entry(row) -> dict:
    entry = {
        "verdict": row["verdict"],
        "max_ulp": _measure(row.get("max_ulp")),
        "max_cond_err": _measure(row.get("max_cond_err")),
    }
    for event in EVENTS:
        value = row.get(event)
        entry[event] = 0 if value is None or (isinstance(value, float) and math.isnan(value)) else int(value)
    return entry


def baseline_of(result) -> dict:
    rows = {row_key(row): row_entry(row) for row in result.table.to_dict(orient="records")}
    return {
        "format": FORMAT_VERSION,
        "settings": result.settings,
        "versions": versions(),
        "machine": machine(),
        "platform": platform_key(result.frameworks),
        "rows": dict(sorted(rows.items())),
    }


def write_baseline(result, path) -> Path:
    return write_atomic(Path(path), json.dumps(baseline_of(result), indent=2, sort_keys=True, default=str) + "\n")


def read_baseline(path) -> dict:
    """A baseline file, every row checked (BaselineError, one line, for anything compare() could not use)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BaselineError(f"no such baseline: {path} (write one with --update-baseline)") from None
    except (OSError, ValueError) as exc:
        raise BaselineError(f"{path} is not a readable baseline: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), dict):
        raise BaselineError(f"{path} is not a softaudit baseline (no 'rows')")
    check_rows(data["rows"], path)
    return data


def _row_problem(entry) -> str | None:
    """What is wrong with one baseline row, as the end of a sentence naming it (None: nothing). compare() reads
    each row's verdict, max_ulp and event counts: a malformed one is said here, not met as a KeyError there."""
    if not isinstance(entry, dict):
        return f"is {reprlib.repr(entry)}, not an object"
    for field in ("verdict", "max_ulp"):
        if field not in entry:
            return f"has no {field!r}"
    verdict, max_ulp = entry["verdict"], entry["max_ulp"]
    if verdict not in SEVERITY:
        return f"has 'verdict' {reprlib.repr(verdict)}, not one of {', '.join(SEVERITY)}"
    number = isinstance(max_ulp, (int, float)) and not isinstance(max_ulp, bool) and not math.isnan(max_ulp)
    if max_ulp is not None and not number:
        return f"has 'max_ulp' {reprlib.repr(max_ulp)}, not a number or null"
    for event in EVENTS:
        count = entry.get(event, 0)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return f"has {event!r} {reprlib.repr(count)}, not a count (an integer >= 0)"
    return None


def check_rows(rows: dict, source) -> dict:
    """Raise BaselineError, one line naming the row and the field, at the first malformed row of a baseline read
    from `source` (JSON: its keys are strings); return the rows."""
    for key, entry in rows.items():
        problem = _row_problem(entry)
        if problem:
            raise BaselineError(f"{source}: row {key!r} {problem}")
    return rows


@dataclasses.dataclass
class Change:
    key: str
    what: str  # one line: what changed


@dataclasses.dataclass
class Comparison:
    """A run against a baseline. It fails only on regressions."""

    regressions: list[Change]
    known: list[Change]  # warnings and failures the baseline already had
    improvements: list[Change]
    platform: list[Change]  # on another platform: changes that leave the verdict as it was
    appeared: list[str]
    vanished: list[str]
    same_platform: bool = True
    platform_change: str = ""  # how the platforms differ, in one line ("" when they are the same)

    @property
    def failed(self) -> bool:
        return bool(self.regressions)

    def as_dict(self) -> dict:
        return {
            "regressions": [dataclasses.asdict(c) for c in self.regressions],
            "known": [dataclasses.asdict(c) for c in self.known],
            "improvements": [dataclasses.asdict(c) for c in self.improvements],
            "platform": [dataclasses.asdict(c) for c in self.platform],
            "appeared": self.appeared,
            "vanished": self.vanished,
            "same_platform": self.same_platform,
            "platform_change": self.platform_change,
        }


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """How much the max ULP error may grow before it is a regression: max(old * (1 + relative), old + absolute)."""

    relative: float = default("tolerance")
    absolute: float = 0.5

    def allows(self, old: float | None, new: float | None) -> bool:
        if old is None or new is None:
            return True
        return new <= max(old * (1 + self.relative), old + self.absolute)


def platform_change(old: dict | None, new: dict | None) -> str:
    """How two platform keys differ, in one line ("": they do not)."""
    if old == new:
        return ""
    if old is None or new is None:
        return "the baseline records no platform" if old is None else "this run records no platform"
    fields = sorted(set(old) | set(new))
    return "; ".join(f"{f} {old.get(f)} -> {new.get(f)}" for f in fields if old.get(f) != new.get(f))


def compare(baseline: dict, current: dict, tolerance: Tolerance = Tolerance()) -> Comparison:
    """Compare two baselines' rows (`baseline_of` gives one for a run), by the rules of their platforms."""
    old_rows, new_rows = baseline["rows"], current["rows"]
    change = platform_change(baseline.get("platform"), current.get("platform"))
    result = Comparison(
        [],
        [],
        [],
        [],
        sorted(set(new_rows) - set(old_rows)),
        sorted(set(old_rows) - set(new_rows)),
        same_platform=not change,
        platform_change=change,
    )
    for key in result.appeared:  # a new row that fails is not a known failure: adding a broken kernel fails CI
        if SEVERITY[new_rows[key]["verdict"]] >= SEVERITY["fail"]:
            result.regressions.append(Change(key, f"new row: {new_rows[key]['verdict']} (not in the baseline)"))
    for key in sorted(set(old_rows) & set(new_rows)):
        old, new = old_rows[key], new_rows[key]
        before, after = SEVERITY[old["verdict"]], SEVERITY[new["verdict"]]
        drift = [f"new {e} events ({new[e]})" for e in EVENTS if new.get(e, 0) and not old.get(e, 0)]
        if not tolerance.allows(old.get("max_ulp"), new.get("max_ulp")):
            drift.append(f"max error {old['max_ulp']:.3g} -> {new['max_ulp']:.3g} ulp")
        if after > before or (drift and not change):
            became = [f"{old['verdict']} became {new['verdict']}"] if after > before else []
            result.regressions.append(Change(key, "; ".join(became + drift)))
        elif drift:
            result.platform.append(Change(key, "; ".join(drift) + f" (still {new['verdict']})"))
        elif after < before:
            result.improvements.append(Change(key, f"{old['verdict']} became {new['verdict']}"))
        elif after:
            result.known.append(Change(key, f"still {new['verdict']} (in the baseline)"))
        elif (
            old.get("max_ulp") is not None
            and new.get("max_ulp") is not None
            and not tolerance.allows(new["max_ulp"], old["max_ulp"])
        ):
            result.improvements.append(Change(key, f"max error {old['max_ulp']:.3g} -> {new['max_ulp']:.3g} ulp"))
    return result
