"""The results contract: what an audit gives everything that presents it (reports, the gate, the command line,
assert_accurate, the pytest plugin).

An audit returns an `AuditResult`: the results table (one row per candidate x dtype x family, and per output for a
kind with several; its columns and their types are `COLUMNS`, defined in docs/metrics.md), the worst input of each
row that had one (`WorstInput`, exact and replayable), one record per case (`CASE_COLUMNS`, what the plots draw)
and the settings the run was made with. A row is named by its `RowKey`; its verdict is one of `VERDICTS`. Whatever
reads results reads them through this module, never through the runner: the runner may change how it makes them.
"""

from __future__ import annotations

import dataclasses
import functools
import shlex
from typing import NamedTuple

#: The results table's columns, in order, with the type of their values. On a row that could not be judged (an
#: `error` or a `skip`) everything after `note` may be missing (NaN), and a column of counts is then float.
COLUMNS = {
    "candidate": str,
    "kind": str,
    "dtype": str,
    "family": str,
    "output": str,
    "verdict": str,
    "cause": str,
    "finding": str,
    "note": str,
    "fix": str,
    "cases": int,
    "elements": int,
    "max_cond_err": float,
    "max_bound_err": float,
    "max_line_err": float,
    "worst_scale": float,
    "max_ulp": float,
    "mean_ulp": float,
    "max_bits": float,
    "correctly_rounded": float,
    "ge2_ulp": float,
    "max_rel_err": float,
    "max_abs_err": float,
    "nan": int,
    "overflow": int,
    "wrong_inf": int,
    "underflow": int,
    "flushed": int,
    "negative": int,
    "mask_leak": int,
    "sum_err": float,
    "argmax_flips": int,
    "undefined_rows": int,
    "nan_not_propagated": int,
    "fully_masked": str,
    "max_ulp_vsum": float,
    "max_normwise": float,
    "invariants": str,
    "repeat_differ": float,
    "repeat_ulp": float,
    "batch_differ": float,
    "batch_ulp": float,
    "split_differ": float,
    "split_ulp": float,
    "sampled": str,
    "ub_ge2_ulp": float,
    "ub_past_warn": float,
    "ub_past_fail": float,
    "plain_cond_err": float,
    "best_ulp": float,
    "fail_above": float,
    "warn_above": float,
    "fa_ratio": float,
    "seconds": float,
}
#: The measures of the table that are NaN where nothing could be compared (a row of NaN outputs reads NaN, not 0).
MEASURES = (
    "max_cond_err",
    "max_bound_err",
    "max_line_err",
    "worst_scale",
    "max_ulp",
    "mean_ulp",
    "max_bits",
    "correctly_rounded",
    "ge2_ulp",
    "max_rel_err",
    "max_abs_err",
    "max_ulp_vsum",
    "max_normwise",
    "sum_err",
)
#: The per-case table's columns (`AuditResult.cases`), followed by the parameters of the case's family (the logit
#: scale, the row length n, the head dimension d, ...). max_cond_err, max_ulp and mean_ulp: NaN where nothing was
#: compared; nonfinite: NaN and inf outputs where the exact result is finite; events: those and mask leaks.
CASE_COLUMNS = {
    "candidate": str,
    "kind": str,
    "dtype": str,
    "family": str,
    "output": str,
    "case": str,
    "size": int,
    "elements": int,
    "max_cond_err": float,
    "max_ulp": float,
    "mean_ulp": float,
    "nonfinite": int,
    "events": int,
}

#: Every verdict a row can get, least to most severe; `skip` (the candidate cannot run this dtype) stands apart.
VERDICTS = ("pass", "warn", "fail", "error", "skip")
#: How much worse each verdict is than a pass (the gate's ratchet: a rise is a regression).
SEVERITY = {"pass": 0, "skip": 1, "warn": 1, "fail": 2, "error": 3}


def failing_verdicts(strict: bool) -> frozenset:
    """The verdicts that fail a run (exit 1): fail and error, and with a strict policy warn too. The rule lives here,
    below the policy (softaudit.Policy.failing reads it), so that a result says whether it passed without it."""
    return frozenset({"fail", "error", "warn"} if strict else {"fail", "error"})


def verdict_counts(table) -> dict[str, int]:
    """How many rows have each verdict (every verdict named, 0 included), in the order of VERDICTS."""
    counts = table.verdict.value_counts()
    return {verdict: int(counts.get(verdict, 0)) for verdict in VERDICTS}


def summary_line(table) -> str:
    """'N rows: a pass, b warn, c fail, d error' (and skips, when there are any): the first line of every report."""
    counts = verdict_counts(table)
    line = f"{len(table)} rows: " + ", ".join(f"{counts[v]} {v}" for v in ("pass", "warn", "fail", "error"))
    return line + (f", {counts['skip']} skip" if counts["skip"] else "")


class RowKey(NamedTuple):
    """What names a row: its key in `AuditResult.worst`, and (as `row_key` writes it) in baselines, annotations
    and junit. output is "" for a kind with one output."""

    candidate: str
    dtype: str
    family: str
    output: str = ""

    @classmethod
    def of(cls, row) -> RowKey:
        """The key of a row of the table (a dict or a record of results.json: an older one may have no output)."""
        return cls(row["candidate"], row["dtype"], row["family"], row.get("output") or "")

    def text(self) -> str:
        """'candidate | dtype | family', and ' | output' for a kind with several outputs."""
        return " | ".join(str(part) for part in (self if self.output else self[:3]))


def row_key(row) -> str:
    """A row's name in baselines, annotations and junit (RowKey.text of the row)."""
    return RowKey.of(row).text()


@dataclasses.dataclass
class WorstInput:
    """The element behind a row's worst error, the case it is in, and how to get that case again.

    It holds the whole case the candidate was called on when that is at most `MAX_VALUES` values, and always the
    recipe that regenerates it bit for bit (softaudit/worst.py replays it). `as_json` writes every float exactly
    (hex); `from_json` reads that back to an equal record."""

    candidate: str
    target: str | None  # what loads the candidate again ("pkg.mod:func", "file.py:func"); None for a closure
    kind: str
    dtype: str
    family: str
    case: str  # the case's description
    case_index: int
    element: list[int]  # position in the case's output
    cond_err: float  # error / (u max(scale, smallest normal)) at the element (inf: NaN or inf there)
    ulp_err: float
    scale: float  # the element's conditioning scale, max(scale, smallest normal) (NaN: not compared)
    output: float
    reference: float  # the exact result correctly rounded to the dtype
    cause: str
    explanation: str
    recipe: dict  # suite, seed, family, case_index, and the case file or corpus folder where there is one
    inputs: dict | None = None  # name -> the whole case's array in the dtype (mask: boolean); None when too big
    device: str | None = None  # where the candidate ran (torch and JAX candidates: "cuda", ...); None: the default
    output_name: str = ""  # which output of a kind with several (attention_grad's "dq", "dk", "dv"); "": the only one

    #: Cases with more values than this keep only the recipe.
    MAX_VALUES = 512

    @property
    def key(self) -> RowKey:
        """The row this is the worst input of."""
        return RowKey(self.candidate, self.dtype, self.family, self.output_name)

    def as_json(self) -> dict:
        """Every float as a hex string (float.hex), so the case replays bit for bit."""
        out = dataclasses.asdict(self) | {"output": float(self.output).hex(), "reference": float(self.reference).hex()}
        if self.inputs is not None:
            out["inputs"] = {name: _exact(a) | _own_dtype(a, self.dtype) for name, a in self.inputs.items()}
        return out

    @classmethod
    def from_json(cls, data: dict) -> WorstInput:
        """The record `as_json` wrote: the inputs back in their dtype (the mask boolean), every float exact."""
        from .reference import format_of

        inputs = data.get("inputs")
        if inputs is not None:
            dtype = format_of(data["dtype"]).dtype
            inputs = {name: _array(spec, spec.get("dtype", dtype)) for name, spec in inputs.items()}
        floats = {"output": float.fromhex(data["output"]), "reference": float.fromhex(data["reference"])}
        return cls(**(data | floats | {"inputs": inputs}))

    def command(self, out: str = "softaudit-replay") -> str:
        """The command that audits this row again (same candidate, dtype, family and cases)."""
        if self.target is None:
            return ""
        if "shape" in self.recipe:  # a production shape's sampled rows (softaudit/sampled.py)
            words = ["softaudit", "run", self.target, "--dtype", self.dtype, "--shape", self.recipe["shape"]]
            words += ["--samples", str(self.recipe["samples"]), "--seed", str(self.recipe["seed"]), "--out", out]
            return shlex.join(words + (["--device", self.device] if self.device else []))
        words = [
            "softaudit",
            "run",
            self.target,
            "--kind",
            self.kind,
            "--dtype",
            self.dtype,
            "--family",
            self.family,
            "--suite",
            self.recipe["suite"],
            "--seed",
            str(self.recipe["seed"]),
            "--out",
            out,
        ]
        if "case_file" in self.recipe:
            words += ["--cases", self.recipe["case_file"]]
        if "corpus" in self.recipe:
            words += ["--corpus", self.recipe["corpus"]]
        if self.device:
            words += ["--device", self.device]
        return shlex.join(words)


def _exact(a) -> dict:
    """An array as JSON: its shape and its values (hex floats; booleans as they are)."""
    import numpy as np

    from ._hex import hex_rows

    a = np.asarray(a)
    values = a.reshape(-1).tolist() if a.dtype == np.bool_ else hex_rows(a.reshape(1, -1))[0]
    return {"shape": list(a.shape), "values": values}


def _own_dtype(a, dtype: str) -> dict:
    """{"dtype": name} for a floating array kept in a dtype of its own, not the row's (attention_fp8's FP8 inputs
    and float32 descales, `Kind.kept`): read back in it, not rounded to the row's dtype; {} otherwise."""
    import numpy as np

    from .reference import format_of

    a = np.asarray(a)
    try:
        own = format_of(a.dtype).dtype
    except ValueError:  # (booleans, integers: as they were)
        return {}
    return {} if own == format_of(dtype).dtype else {"dtype": np.dtype(own).name}


def _array(spec: dict, dtype):
    """The array `_exact` wrote, in `dtype` (a boolean one as booleans)."""
    import numpy as np

    from .reference import round_to

    values = spec["values"]
    if values and isinstance(values[0], bool):
        return np.array(values, bool).reshape(spec["shape"])
    return round_to(np.array([float.fromhex(v) for v in values], np.float64).reshape(spec["shape"]), dtype)


@dataclasses.dataclass
class AuditResult:
    """The results table (one row per candidate x dtype x family), the worst inputs, the settings, and the
    frameworks the candidates ran with."""

    table: object  # pandas.DataFrame with COLUMNS
    worst: dict  # RowKey -> WorstInput (as_json(): exact, hex floats)
    settings: dict  # the settings the run was made with (softaudit/settings.py names them), and "interrupted"
    case_records: list = dataclasses.field(default_factory=list)  # one dict per candidate x dtype x case
    # What the candidates' processes had loaded, wherever they ran: the frameworks' versions (torch, jax, jaxlib,
    # scipy, triton) and the GPU they used (gpu, cuda, cudnn, jax_devices). Part of the platform key.
    frameworks: dict = dataclasses.field(default_factory=dict)
    # The softaudit.Policy the rows were judged by (the audit passes it in: the results contract is read by the
    # policy, not the other way round); settings["policy"] holds its fields.
    policy: object = None

    @functools.cached_property
    def cases(self):
        """pandas.DataFrame with CASE_COLUMNS: one row per candidate x dtype x case (what the plots draw)."""
        import pandas as pd

        return pd.DataFrame(self.case_records)

    @property
    def worst_inputs(self) -> list[WorstInput]:
        """The rows' worst inputs, in the table's order (a row with nothing measured has none)."""
        return list(self.worst.values())

    @property
    def failing(self):
        """The rows that fail the run (fail and error; with a strict policy warn too), as a table."""
        return self.table[self.table.verdict.isin(failing_verdicts(self.settings["policy"]["strict"]))]

    @property
    def passed(self) -> bool:
        """No row failed or errored (and, with a strict policy, none warned); a `skip` is not a failure."""
        return self.failing.empty

    @property
    def interrupted(self) -> bool:
        """Whether the run was stopped before it finished (its rows are those that finished)."""
        return bool(self.settings.get("interrupted"))
