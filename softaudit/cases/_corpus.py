"""The corpus, a source of cases: every failure the hunt found, one JSON file per candidate, inputs as exact hex floats.

`softaudit run` replays the corpus as a family named `corpus` (each case in its own dtype), so the gate keeps
testing what a hunt once found. The hunt writes it (`save_corpus`); the plan, `worst.replay` and the hunt's tests
read it (`load_corpus`): reading it needs neither the hunt nor Hypothesis.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from .._atomic import write_atomic
from .._hex import hex_rows
from ._case import Case


def corpus_file(corpus: Path, candidate: str) -> Path:
    """The file of `corpus` (a folder) that holds `candidate`'s failures."""
    return Path(corpus) / (re.sub(r"[^A-Za-z0-9_.-]+", "_", candidate).strip("_") + ".json")


def save(
    corpus: Path,
    candidate: str,
    kind: str,
    dtype: str,
    inputs: dict,
    mask,
    reason: str,
    error: float,
    options: dict | None = None,
) -> Path:
    """Add one failing input to the candidate's corpus file (an identical input is not added twice); error: its
    conditioning-scaled error; options: the call's keywords (Case.options), kept where there are any (integer
    targets are exact as hex floats too)."""
    path = corpus_file(corpus, candidate)
    data = (
        json.loads(path.read_text(encoding="utf-8"))
        if path.exists()
        else {"candidate": candidate, "kind": kind, "cases": []}
    )
    entry = {
        "dtype": dtype,
        "reason": reason,
        "max_cond_err": None if not np.isfinite(error) else error,
        "inputs": {
            name: {
                "shape": list(np.shape(a)),
                "values": hex_rows(np.reshape(a, (-1, np.shape(a)[-1]) if np.ndim(a) else (1, 1))),
            }
            for name, a in inputs.items()
        },
        "mask": None if mask is None else {"shape": list(mask.shape), "values": np.asarray(mask).reshape(-1).tolist()},
    }
    if options:
        entry["options"] = json.loads(json.dumps(dict(options)))  # (a window's tuple as a list: as read back)
    same = ("inputs", "mask", "dtype", "options")
    if all(any(c.get(n) != entry.get(n) for n in same) for c in data["cases"]):
        data["cases"].append(entry)
    return write_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def _array(spec) -> np.ndarray:
    values = np.array([[float.fromhex(v) for v in row] for row in spec["values"]], dtype=np.float64)
    return values.reshape(spec["shape"])


def load(corpus, kind: str, dtype: str) -> list[Case]:
    """The corpus cases of `kind` in `dtype`, as Cases of the family `corpus`."""
    cases = []
    for path in sorted(Path(corpus).glob("*.json")) if Path(corpus).is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if data.get("kind") != kind:
            continue
        for entry in data.get("cases", []):
            if entry.get("dtype") != dtype:
                continue
            arrays = {name: _array(spec) for name, spec in entry["inputs"].items()}
            mask = (
                None
                if entry["mask"] is None
                else np.array(entry["mask"]["values"], bool).reshape(entry["mask"]["shape"])
            )
            options = entry.get("options", {})
            cases.append(Case(kind, "corpus", arrays, mask, None, f"{path.name}: {entry['reason']}", options=options))
    return cases
