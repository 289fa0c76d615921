"""Baselines: write one, read one, and compare a run with it (a ratchet: known failures pass, regressions fail).

A baseline holds, per candidate x dtype x family, the verdict, the max ULP error and the event counts, with the
library versions and the machine it was made on. It is sorted and indented so that a diff of it reads well.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from .report._files import machine, versions, write_atomic

EVENTS = ("nan", "overflow", "underflow", "mask_leak")
FORMAT_VERSION = 1


class BaselineError(ValueError):
    """A baseline file that cannot be read: the message is one line for the user."""


def row_key(row) -> str:
    return f"{row['candidate']} | {row['dtype']} | {row['family']}"


def row_entry(row) -> dict:
    max_ulp = row.get("max_ulp")
    entry = {"verdict": row["verdict"], "max_ulp": None if max_ulp is None or math.isnan(max_ulp) else round(float(max_ulp), 6)}
    for event in EVENTS:
        value = row.get(event)
        entry[event] = 0 if value is None or (isinstance(value, float) and math.isnan(value)) else int(value)
    return entry


def baseline_of(result) -> dict:
    rows = {row_key(row): row_entry(row) for row in result.table.to_dict(orient="records")}
    return {"format": FORMAT_VERSION, "settings": result.settings, "versions": versions(), "machine": machine(),
            "rows": dict(sorted(rows.items()))}  # fmt: skip


def write_baseline(result, path) -> Path:
    return write_atomic(Path(path), json.dumps(baseline_of(result), indent=2, sort_keys=True, default=str) + "\n")


def read_baseline(path) -> dict:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BaselineError(f"no such baseline: {path} (write one with --update-baseline)") from None
    except (OSError, ValueError) as exc:
        raise BaselineError(f"{path} is not a readable baseline: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), dict):
        raise BaselineError(f"{path} is not a softaudit baseline (no 'rows')")
    return data


@dataclasses.dataclass
class Change:
    key: str
    what: str  # one line: what changed


@dataclasses.dataclass
class Comparison:
    """A run against a baseline. It fails only on regressions."""

    regressions: list[Change]
    known: list[Change]  # failures the baseline already had
    improvements: list[Change]
    appeared: list[str]
    vanished: list[str]

    @property
    def failed(self) -> bool:
        return bool(self.regressions)

    def as_dict(self) -> dict:
        return {
            "regressions": [dataclasses.asdict(c) for c in self.regressions],
            "known": [dataclasses.asdict(c) for c in self.known],
            "improvements": [dataclasses.asdict(c) for c in self.improvements],
            "appeared": self.appeared,
            "vanished": self.vanished,
        }


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """How much the max ULP error may grow before it is a regression: max(old * (1 + relative), old + absolute)."""

    relative: float = 0.1
    absolute: float = 0.5

    def allows(self, old: float | None, new: float | None) -> bool:
        if old is None or new is None:
            return True
        return new <= max(old * (1 + self.relative), old + self.absolute)


def compare(baseline: dict, current: dict, tolerance: Tolerance = Tolerance()) -> Comparison:
    """Compare two baselines' rows (`baseline_of` gives one for a run)."""
    old_rows, new_rows = baseline["rows"], current["rows"]
    result = Comparison([], [], [], sorted(set(new_rows) - set(old_rows)), sorted(set(old_rows) - set(new_rows)))
    for key in sorted(set(old_rows) & set(new_rows)):
        old, new = old_rows[key], new_rows[key]
        worse = []
        if old["verdict"] == "pass" and new["verdict"] != "pass":
            worse.append(f"pass became {new['verdict']}")
        worse += [f"new {e} events ({new[e]})" for e in EVENTS if new.get(e, 0) and not old.get(e, 0)]
        if not tolerance.allows(old.get("max_ulp"), new.get("max_ulp")):
            worse.append(f"max error {old['max_ulp']:.3g} -> {new['max_ulp']:.3g} ulp")
        if worse:
            result.regressions.append(Change(key, "; ".join(worse)))
        elif new["verdict"] != "pass" and old["verdict"] != "pass":
            result.known.append(Change(key, f"still {new['verdict']} (in the baseline)"))
        elif old["verdict"] != "pass" and new["verdict"] == "pass":
            result.improvements.append(Change(key, f"{old['verdict']} became pass"))
        elif old.get("max_ulp") is not None and new.get("max_ulp") is not None and not tolerance.allows(new["max_ulp"], old["max_ulp"]):
            result.improvements.append(Change(key, f"max error {old['max_ulp']:.3g} -> {new['max_ulp']:.3g} ulp"))
    return result
