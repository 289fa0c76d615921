"""Replaying the worst input of a row (`softaudit.results.WorstInput`): `replay` reproduces a row's worst error.

A row's worst element is the one with the largest conditioning-scaled error (or, where nothing could be compared,
the first NaN or inf). Its record holds the whole case the candidate was called on (every array, as hex floats)
when that is at most `WorstInput.MAX_VALUES` (512) values, and always the recipe that regenerates it bit for bit: the
families are deterministic, so suite, seed, family and case index give the same arrays again; a case file or a
corpus is read again. Replaying calls the candidate on the whole case, as the audit did: a BLAS kernel can round a
batch differently from one row taken alone.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import kinds
from .results import WorstInput


def case_of(record: dict):
    """The Case a worst-input record (as_json()) was found on: from its inputs, or regenerated from its recipe."""
    from .cases import FAMILIES, Case, load_case_file, load_corpus
    from .reference import format_of

    fmt = format_of(record["dtype"])
    kind, recipe = record["kind"], record["recipe"]
    if record.get("inputs"):
        arrays = dict(WorstInput.from_json(record).inputs)
        mask = arrays.pop("mask", None)
        arrays = {name: a.astype(np.float64) for name, a in arrays.items()}
        return Case(kind, record["family"], arrays, mask, None, record["case"])
    if "shape" in recipe:
        raise ValueError(
            f"{record['family']} was audited by sampled rows of a whole problem: its command runs it again "
            f"(softaudit run --shape {recipe['shape']} --samples {recipe['samples']} --seed {recipe['seed']})"
        )
    if "case_file" in recipe:
        found = load_case_file(recipe["case_file"], kind)
    elif "corpus" in recipe:
        found = load_corpus(recipe["corpus"], kind, fmt.name)
    else:
        found = FAMILIES[recipe["family"]].cases(kind, fmt, recipe["suite"], recipe["seed"])
    return found[recipe["case_index"]]


def replay(record, candidate=None, *, isolation: str = "worker", timeout: float | None = None) -> dict:
    """Call the candidate again on the worst input's whole case; its max error and the element it is at.

    record: a WorstInput or its as_json(); candidate: the Candidate or function (None: load record's target).
    isolation and timeout (seconds; None: no limit) as softaudit.audit takes them: a candidate that crashes is a
    CandidateError naming the cause. Returns {"cond_err", "ulp_err", "element", "output", "reference"}: the same
    numbers the row had.
    """
    from .adapters import load_target
    from .execute import executor
    from .metrics import measure
    from .prepare import Prepared
    from .reference import format_of

    record = record.as_json() if isinstance(record, WorstInput) else record
    if candidate is None or not hasattr(candidate, "kind"):
        source = record["target"] if candidate is None else candidate
        if source is None:
            raise ValueError(f"{record['candidate']} cannot be loaded again by name: pass the function")
        candidate = load_target(source, record["kind"])[0]
        if record.get("device") and candidate.framework != "numpy" and candidate.device is None:
            candidate = dataclasses.replace(candidate, device=record["device"])  # where the row ran
    fmt = format_of(record["dtype"])
    whole = Prepared(case_of(record), fmt, record["recipe"]["case_index"], conventions=candidate.conventions)
    index = kinds.get(record["kind"]).outputs.index(record["output_name"]) if record.get("output_name") else 0
    with executor(isolation) as ex:
        ys, _ = ex.call_all(candidate, whole.inputs, whole.mask, whole.output_shapes, fmt.dtype, timeout)
    pc = whole.output(index)
    tally = measure(pc.basis, ys[index], case_index=pc.case_in_family)
    if tally.worst is None:
        return {"cond_err": 0.0, "ulp_err": 0.0, "element": None, "output": None, "reference": None}
    cond, _, flat, value, _ = tally.worst
    position = [int(i) for i in np.unravel_index(flat, pc.output_shape)]
    return {
        "cond_err": cond,
        "ulp_err": element_ulp(pc, flat, value),
        "element": position,
        "output": value,
        "reference": float(pc.basis.rounded.reshape(-1)[flat]),
    }


def element_ulp(pc, flat: int, value: float) -> float:
    """The ULP error of output `value` at one element, as `measure` computes it (inf where it is NaN or inf)."""
    b = pc.basis
    if not math.isfinite(value):
        return math.inf
    lo = 0.0 if b.lo is None else float(b.lo.reshape(-1)[flat])
    diff = abs((value - float(b.hi.reshape(-1)[flat])) - lo)
    return diff * float(b.inv_ulp.reshape(-1)[flat]) if b.inv_ulp is not None else diff / float(b.ulp.reshape(-1)[flat])


def row_inputs(kind: str, pc, position: tuple) -> tuple[dict, np.ndarray | None]:
    """The inputs that made one output element: its row (and mask row), or its query with the keys and values of
    its batch entry (and its mask row)."""
    kind = kinds.get(kind)
    return kind.element_inputs(kind, pc, position)
