"""The audit loop: for candidate x dtype x family, round the inputs to the dtype, call, compare, judge.

The reference of each case is computed once per dtype and shared by every candidate of the kind; so is the
comparison implementation's error, which sets the ULP threshold. Both are kept between audit() calls in one
process (`CACHE_BYTES`) and in a folder for later processes (softaudit/_store.py): the families are deterministic,
so a later audit of the same kind, dtype, suite and seed reuses them. A candidate that raises, hangs or returns
garbage on a family gives an `error` row for that family and the run goes on, keeping every finished row.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from . import candidates as builtin
from .adapters._bridge import CandidateSkip
from .adapters._call import CandidateError, call, time_limits
from .adapters._candidate import KINDS, Candidate
from .adapters._targets import load_target
from .cases import Case, families_for, hex_rows, load_case_file
from . import _store, invariants
from .metrics import Tally, basis, measure
from .policy import Policy
from .reference import Format, evaluate, evaluate_attention, format_of, round_to, undefined_rows

DEFAULT_DTYPES = ("float16", "bfloat16", "float32", "float64")
COLUMNS = (
    "candidate", "kind", "dtype", "family", "cases", "elements", "max_ulp", "mean_ulp", "max_bits",
    "correctly_rounded", "ge2_ulp", "max_rel_err", "max_abs_err", "nan", "overflow", "underflow", "negative",
    "mask_leak", "sum_err", "argmax_flips", "undefined_rows", "nan_not_propagated", "fully_masked",
    "max_ulp_vsum", "max_normwise", "invariants", "comparison_max_ulp", "threshold_ulp", "seconds", "verdict", "note",
)  # fmt: skip


class Prepared:
    """One case with its inputs rounded to the audited dtype and, computed once, its reference."""

    def __init__(self, case: Case, fmt: Format, case_in_family: int):
        self.case, self.fmt, self.case_in_family = case, fmt, case_in_family
        self.inputs = {name: round_to(a, fmt.dtype) for name, a in case.arrays.items()}
        self.mask = case.mask

    @property
    def nbytes(self) -> int:
        """About what this case holds once its reference and basis exist (about 100 bytes per input element)."""
        return 100 * sum(a.size for a in self.inputs.values())

    @functools.cached_property
    def reference(self):
        if self.case.kind == "attention":
            return evaluate_attention(self.inputs["q"], self.inputs["k"], self.inputs["v"], self.mask, dtype=self.fmt.dtype)
        return evaluate(self.case.kind, self.inputs["x"], self.mask, dtype=self.fmt.dtype)

    @functools.cached_property
    def basis(self):
        """The reference side of the measures, shared by every candidate."""
        return basis(self.case.kind, self.fmt, self.reference, **self._extras())

    def _extras(self) -> dict:
        """What the metrics need beyond the reference: undefined rows, rows with nothing kept, masked entries..."""
        kind = self.case.kind
        if kind == "attention":
            q, k, v = (self.inputs[n].astype(np.float64) for n in ("q", "k", "v"))
            scores_shape = np.broadcast_shapes(q.shape[:-1] + (k.shape[-2],), k.shape[:-2] + (1, 1))
            keep = np.broadcast_to(True if self.mask is None else self.mask, scores_shape)
            with np.errstate(all="ignore"):  # sum_j p_j |v_j| in float64: a scale for the error, not a result
                s = np.where(keep, q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]), -np.inf)
                p = np.exp(s - s.max(axis=-1, keepdims=True))
                p = p / p.sum(axis=-1, keepdims=True)
                vsum = np.nan_to_num(p) @ np.abs(v)
            nothing_kept = ~keep.any(axis=-1) if self.mask is not None else None
            return {"undefined": self.reference.undefined, "nothing_kept": nothing_kept, "vsum": vsum}
        x = self.inputs["x"].astype(np.float64)
        # The policy's undefined rows for every row kind (log-sum-exp included): a NaN or +inf logit, nothing kept.
        undefined = undefined_rows(x, self.mask)
        kept_nan = (np.isnan(x) & (True if self.mask is None else self.mask)).any(axis=-1)
        if kind == "masked_softmax":
            masked = ~np.broadcast_to(self.mask, x.shape)
            return {"undefined": undefined, "nothing_kept": masked.all(axis=-1), "masked": masked, "kept_nan_rows": kept_nan}
        return {"undefined": undefined, "kept_nan_rows": kept_nan}

    def complete(self) -> None:
        """Compute now what is otherwise computed when first needed (reference, basis, probes), to keep it."""
        for name in ("reference", "basis", "probes", "leak_probe"):
            getattr(self, name)

    @property
    def output_shape(self) -> tuple:
        return self.reference.value.shape

    @functools.cached_property
    def probes(self) -> invariants.Probes | None:
        """The invariants' transformed inputs (row kinds, cases up to invariants.MAX_ELEMENTS elements)."""
        x = self.inputs.get("x")
        if self.case.kind not in invariants.ROW_KINDS or x is None or x.size > invariants.MAX_ELEMENTS:
            return None
        return invariants.Probes(self.case.kind, self.inputs, self.mask, self.fmt.dtype, seed=self.case_in_family)

    @functools.cached_property
    def leak_probe(self) -> tuple[dict, np.ndarray] | None:
        """For attention with a mask: inputs with some masked keys' k and v replaced, and the queries that must not
        change (those that may attend none of the replaced keys in any batch entry)."""
        if self.case.kind != "attention" or self.mask is None:
            return None
        rng = np.random.default_rng(self.case_in_family)
        keep = self.mask.reshape((-1,) + self.mask.shape[-2:]).any(axis=0)  # (Lq, Lk): may attend anywhere
        masked_counts = np.where(keep.any(axis=1), (~keep).sum(axis=1), 0)
        if not masked_counts.any():
            return None
        replaced = ~keep[int(np.argmax(masked_counts))]  # the masked keys of the most masked query
        unaffected = ~keep[:, replaced].any(axis=1)
        inputs = dict(self.inputs)
        for name in ("k", "v"):
            arr = inputs[name].astype(np.float64)
            arr[..., replaced, :] = rng.standard_normal(arr[..., replaced, :].shape) * 8
            inputs[name] = round_to(arr, self.fmt.dtype)
        return inputs, unaffected


@dataclasses.dataclass
class AuditResult:
    """The results table (one row per candidate x dtype x family), the worst inputs, and the settings."""

    table: object  # pandas.DataFrame
    worst: dict  # (candidate, dtype, family) -> WorstInput (as_json(): exact, hex floats)
    settings: dict
    case_records: list = dataclasses.field(default_factory=list)  # one dict per candidate x dtype x case

    @functools.cached_property
    def cases(self):
        """pandas.DataFrame: one row per candidate x dtype x case (what the plots draw), made when first read."""
        import pandas as pd

        return pd.DataFrame(self.case_records)

    @property
    def passed(self) -> bool:
        """No row failed or errored (a `skip`, a dtype the candidate cannot do, is not a failure)."""
        return not self.table["verdict"].isin(["fail", "error"]).any()


def candidates_for(targets, kind) -> list[Candidate]:
    """The candidates of the targets (None: the built-ins), filtered by kind."""
    if targets is None:
        found = builtin.builtins()
        return [c for c in found if kind is None or c.kind == kind]
    if isinstance(targets, (str, Path)) or callable(targets):
        targets = [targets]
    return [c for target in targets for c in load_target(str(target) if isinstance(target, Path) else target, kind)]


@dataclasses.dataclass
class _Family:
    """One built-in family's prepared cases for a kind, dtype, suite and seed, and the comparison's error on them."""

    prepared: list[Prepared]
    comparison_max: float | None = None  # max ULP error of the comparison implementation (None: not run yet)


#: Prepared built-in families kept between audit() calls in this process, least recently used dropped first
#: once they hold more than about this many bytes. 0 turns the cache off; `clear_cache()` empties it.
CACHE_BYTES = 512 << 20
_CACHE: collections.OrderedDict[tuple, _Family] = collections.OrderedDict()
_UNWRITABLE: set[Path] = set()  # cache folders a write failed in
_WRITTEN: set[Path] = set()  # cache folders written since they were last pruned


def clear_cache() -> None:
    """Forget every prepared family (inputs, references, comparison errors) kept between audits."""
    _CACHE.clear()


def _family(family, kind: str, fmt: Format, suite: str, seed: int, cache: bool, folder: Path | None, timeout) -> _Family:
    """A built-in family prepared: from this process's cache, from the folder on disk, or computed (and then kept)."""
    key = (family.name, kind, fmt.name, suite, seed)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    path = folder / f"{_store.fingerprint()}-{family.name}-{kind}-{fmt.name}-{suite}-{seed}.pkl" if folder else None
    found = _store.load(path) if path else None
    if found is None:
        found = _Family([Prepared(case, fmt, i) for i, case in enumerate(family.cases(kind, fmt, suite, seed))])
        if path and folder not in _UNWRITABLE and _compare(found, kind, timeout):  # (a failed comparison is not kept)
            for pc in found.prepared:
                pc.complete()
            try:
                _store.save(path, found)
                _WRITTEN.add(folder)
                found = _store.load(path) or found  # mapped: the pages are the system's to drop and read again
            except OSError as exc:  # said once; the folder is not tried again in this process
                _UNWRITABLE.add(folder)
                warnings.warn(f"softaudit: cannot keep prepared cases in {folder}: {exc}", stacklevel=4)
    if cache and CACHE_BYTES > 0:
        _CACHE[key] = found
        held = sum(pc.nbytes for f in _CACHE.values() for pc in f.prepared)
        while held > CACHE_BYTES and len(_CACHE) > 1:
            _, dropped = _CACHE.popitem(last=False)
            held -= sum(pc.nbytes for pc in dropped.prepared)
    return found


def _compare(fam: _Family, kind: str, timeout) -> bool:
    """Set the family's comparison_max (the sound built-in's max ULP error), if not yet set; False if it failed."""
    if fam.comparison_max is None:
        try:
            fam.comparison_max = _run_family(builtin.sound(kind), fam.prepared, timeout, check_invariants=False)[0].max_ulp
        except CandidateError:
            fam.comparison_max = 0.0
            return False
    return True


def _prepare(kind: str, fmt: Format, suite: str, files: list, only, seed: int, corpus, cache: bool, folder, timeout) -> dict[str, _Family]:
    """Every family of the kind in the dtype, prepared, with the comparison implementation's max ULP error."""
    from .hunt import load_corpus

    by_family = {f.name: _family(f, kind, fmt, suite, seed, cache, folder, timeout) for f in families_for(kind) if only is None or f.name in only}
    by_family = {name: fam for name, fam in by_family.items() if fam.prepared}  # (a family may have no case in a dtype)
    extra = [c for path in files for c in load_case_file(path, kind)]
    extra += load_corpus(corpus, kind, fmt.name) if corpus else []
    shared = set(by_family)  # possibly cached: copied before a case file adds to one
    for case in extra:  # case files and the corpus are read fresh every time (they may have changed)
        if case.family in shared:
            by_family[case.family] = _Family(list(by_family[case.family].prepared))
            shared.discard(case.family)
        group = by_family.setdefault(case.family, _Family([])).prepared
        group.append(Prepared(case, fmt, len(group)))
    for fam in by_family.values():  # (a family a case file added to is compared afresh, every case)
        _compare(fam, kind, timeout)
    return by_family


def _run_family(candidate: Candidate, prepared: list[Prepared], timeout, check_invariants: bool = True):
    """Run one candidate on one family's cases: the tally, the seconds spent in the candidate, notes, whether
    every output was NaN where something is defined (None when nothing is), and one record per case."""
    tally, seconds, notes = Tally(), 0.0, set()
    per_case = []
    all_nan, anything = True, False  # every output NaN, on cases where something is defined
    for pc in prepared:
        fmt = pc.fmt
        start = time.perf_counter()
        # reuse: y (if the candidate returns its input) lives until the next case's call; everything below reads
        # it, the invariants and the leak probe call with copies of their own
        y, note = call(candidate, pc.inputs, pc.mask, pc.output_shape, fmt.dtype, timeout, reuse=True)
        seconds += time.perf_counter() - start
        notes.add(note)
        defined = ~np.asarray(pc.reference.undefined)
        if defined.any():
            anything = True
            all_nan = all_nan and y.size > 0 and bool(np.isnan(y).all())  # (ml_dtypes have isnan too)
        part = measure(pc.basis, y, case_index=pc.case_in_family)
        if check_invariants and pc.probes is not None:
            part.invariants = invariants.check(candidate, pc.probes, y, pc.output_shape, timeout, part.max_ulp)
        probe = pc.leak_probe
        if probe is not None:
            inputs, unaffected = probe
            moved, _ = call(candidate, inputs, pc.mask, pc.output_shape, fmt.dtype, timeout)
            a, b = y.astype(np.float64)[..., unaffected, :], moved.astype(np.float64)[..., unaffected, :]
            part.mask_leak = int((~((a == b) | (np.isnan(a) & np.isnan(b)))).sum())
        tally.merge(part)
        per_case.append({"case": pc.case.description, "size": int(y.size), "max_ulp": part.max_ulp,
                         "mean_ulp": part.mean_ulp, "events": part.nan + part.overflow + part.mask_leak,
                         **pc.case.params})  # fmt: skip
    notes = "; ".join(sorted(n for n in notes if n))
    return tally, seconds, notes, (all_nan if anything else None), per_case


@dataclasses.dataclass
class WorstInput:
    """The input behind the worst element of a row: its row (or query, with every key and value), exactly.

    `as_json()` gives it with every value as a hex float (float.hex), so anyone can replay it bit for bit.
    """

    candidate: str
    kind: str
    dtype: str
    family: str
    case: str
    seed: int | None
    element: list[int]
    ulp_error: float
    reference: float
    inputs: dict  # name -> array in the audited dtype (mask: boolean)
    replay: dict  # suite, seed and case index: the families are deterministic, so these regenerate the case

    #: Inputs larger than this are written as `replay` (and, for attention, the query row) instead of every value:
    #: the families are deterministic, so suite, seed, family and case index regenerate them bit for bit.
    MAX_VALUES = 4096

    def as_json(self) -> dict:
        def exact(a):
            a = np.asarray(a)
            return a.tolist() if a.dtype == np.bool_ else hex_rows(a)

        out = dataclasses.asdict(self) | {"reference": float(self.reference).hex()}
        big = sum(np.asarray(a).size for a in self.inputs.values()) > self.MAX_VALUES
        out["inputs"] = {name: exact(a) for name, a in self.inputs.items() if not big or name == "q"}
        return out


def _worst_input(candidate: Candidate, pc: Prepared, flat: int, tally: Tally, suite: str, seed: int) -> WorstInput:
    shape = pc.output_shape
    position = np.unravel_index(flat, shape)
    value = float(np.asarray(pc.reference.value)[position])  # one element, not the whole array in float64
    if candidate.kind == "attention":
        lead = position[:-1]
        pick = lambda a: a[tuple(min(i, s - 1) for i, s in zip(lead[:-1], a.shape[:-2]))]  # noqa: E731
        inputs = {"q": pick(pc.inputs["q"])[lead[-1]][None, :], "k": pick(pc.inputs["k"]), "v": pick(pc.inputs["v"])}
        if pc.mask is not None:
            inputs["mask"] = np.broadcast_to(pc.mask, shape[:-1] + (pc.inputs["k"].shape[-2],))[lead][None, :]
    else:
        row = position if candidate.kind == "logsumexp" else position[:-1]
        inputs = {"x": pc.inputs["x"][row][None, :]}
        if pc.mask is not None:
            inputs["mask"] = np.broadcast_to(pc.mask, pc.inputs["x"].shape)[row][None, :]
    replay = {"suite": suite, "seed": seed, "family": pc.case.family, "case_index": pc.case_in_family}
    return WorstInput(candidate.name, candidate.kind, pc.fmt.name, pc.case.family, pc.case.description, pc.case.seed,
                      [int(i) for i in position], float(tally.worst[0]), value, inputs, replay)  # fmt: skip


def audit(
    targets=None,
    *,
    kind: str | None = None,
    dtypes: Iterable = DEFAULT_DTYPES,
    suite: str = "default",
    cases=None,
    families: Iterable[str] | None = None,
    corpus=None,
    policy: Policy | None = None,
    seed: int = 0,
    timeout: float | None = 60.0,
    progress: Callable[[int, int, str], None] | None = None,
    cache: bool = True,
    cache_dir: str | Path | None = None,
) -> AuditResult:
    """Audit candidates against the reference on every family of their kind, in every dtype.

    targets: None (the built-ins), or a module, file, "module:function", function, or a list of them. kind: needed
    for unmarked functions, and filters otherwise. cases: case files (.npy / .npz) added as families of their own.
    families: only these built-in families (case files are always run). timeout: seconds per candidate call.
    seed: varies the random families (the same seed always gives the same cases). corpus: a folder of hunt
    findings, replayed as the family `corpus` (each case in its own dtype). cache: keep the prepared built-in
    families (inputs, references, the comparison's errors) for later audits, in this process (`CACHE_BYTES`)
    and in cache_dir (None: $SOFTAUDIT_CACHE_DIR, else ~/.cache/softaudit; "off": none) for later processes.
    """
    import pandas as pd

    from .cases import SUITES

    if suite not in SUITES:
        raise ValueError(f"suite must be one of {', '.join(SUITES)}, got {suite!r}")
    policy = policy or Policy()
    formats = [format_of(d) for d in dtypes]
    files = [cases] if isinstance(cases, (str, Path)) else list(cases or [])
    only = None if families is None else set(families)
    unknown = sorted(only - {f.name for k in KINDS for f in families_for(k)}) if only else []
    if unknown:
        raise ValueError(f"unknown family {unknown[0]!r}; `softaudit cases` lists them")
    folder = _store.folder(cache_dir) if cache else None
    found = candidates_for(targets, kind)
    kinds = [k for k in KINDS if any(c.kind == k for c in found)]
    plan = [(k, fmt) for k in kinds for fmt in formats]
    rows, worst, case_rows = [], {}, []
    total = sum(1 for c in found for _ in formats)
    done = 0
    with time_limits():  # the SIGALRM handler installed once; each call only sets its timer
        for k, fmt in plan:
            prepared = _prepare(k, fmt, suite, files, only, seed, corpus, cache, folder, timeout)
            for candidate in (c for c in found if c.kind == k):
                rows += _audit_candidate(candidate, fmt, prepared, policy, timeout, (suite, seed), worst, case_rows)
                done += 1
                if progress:
                    progress(done, total, f"{candidate.name} {fmt.name}")
    if folder in _WRITTEN:  # (an audit that wrote nothing leaves the folder unread)
        _WRITTEN.discard(folder)
        _store.prune(folder)
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    settings = {"suite": suite, "dtypes": [f.name for f in formats], "policy": dataclasses.asdict(policy),
                "timeout": timeout, "cases": [str(f) for f in files], "families": sorted(only) if only else None,
                "seed": seed, "corpus": str(corpus) if corpus else None}  # fmt: skip
    return AuditResult(table, worst, settings, case_rows)


def _audit_candidate(candidate, fmt, prepared: dict, policy, timeout, replay, worst: dict, case_rows: list) -> list:
    """One candidate in one dtype on every family: its rows. Adds its worst inputs and per-case records to those
    given. replay: (suite, seed), which regenerate a case."""
    mine, nan_everywhere = [], []
    for family, fam in prepared.items():
        pcs, compare = fam.prepared, fam.comparison_max
        row = {"candidate": candidate.name, "kind": candidate.kind, "dtype": fmt.name, "family": family,
               "comparison_max_ulp": compare, "threshold_ulp": policy.threshold(compare)}  # fmt: skip
        try:
            tally, seconds, note, all_nan, per_case = _run_family(candidate, pcs, timeout)
        except CandidateError as exc:
            mine.append(row | {"cases": len(pcs), "verdict": "error", "note": str(exc)})
            continue
        except CandidateSkip as exc:
            mine.append(row | {"cases": len(pcs), "verdict": "skip", "note": str(exc)})
            continue
        if all_nan is not None:
            nan_everywhere.append(all_nan)
        case_rows += [{"candidate": candidate.name, "kind": candidate.kind, "dtype": fmt.name, "family": family} | c for c in per_case]
        verdict, reasons = policy.judge(candidate.kind, tally, compare)
        mine.append(row | _row(tally) | {"seconds": seconds, "verdict": verdict, "note": "; ".join(filter(None, [note] + reasons))})
        if tally.worst is not None:
            worst[(candidate.name, fmt.name, family)] = _worst_input(candidate, pcs[tally.worst[1]], tally.worst[2], tally, *replay)
    if nan_everywhere and all(nan_everywhere):  # (rows skipped are left as they are)
        # NaN on every family: the candidate never returned a number, an error rather than a verdict.
        mine = [r | {"verdict": "error", "note": "returned NaN everywhere"} if r["verdict"] != "skip" else r for r in mine]
    return mine


def _row(t: Tally) -> dict:
    return {
        "cases": t.cases, "elements": t.elements, "max_ulp": t.max_ulp, "mean_ulp": t.mean_ulp,
        "max_bits": float(np.log2(1 + t.max_ulp)), "correctly_rounded": t.correctly_rounded / t.elements if t.elements else 0.0,
        "ge2_ulp": t.ge2_ulp / t.elements if t.elements else 0.0, "max_rel_err": t.max_rel_err, "max_abs_err": t.max_abs_err,
        "nan": t.nan, "overflow": t.overflow, "underflow": t.underflow, "negative": t.negative, "mask_leak": t.mask_leak,
        "sum_err": t.sum_err, "argmax_flips": t.argmax_flips, "undefined_rows": t.undefined_rows,
        "nan_not_propagated": t.nan_not_propagated, "fully_masked": t.fully_masked_behaviour,
        "max_ulp_vsum": t.max_ulp_vsum, "max_normwise": t.max_normwise, "invariants": t.invariants_broken,
    }  # fmt: skip
