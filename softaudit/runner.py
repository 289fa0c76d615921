"""The audit loop: for candidate x dtype x family, round the inputs to the dtype, call, compare, judge.

The reference of each case is computed once per dtype and shared by every candidate of the kind; so are the errors
of the two comparison implementations (the plain one in the dtype and best practice), which set the verdict's
bounds. All of it is kept between audit() calls in one process (`CACHE_BYTES`) and in a folder for later
processes (softaudit/_store.py): the families are deterministic, so a later audit of the same kind, dtype, suite
and seed reuses them. A candidate that raises, hangs or returns garbage on a family gives an `error` row for that
family and the run goes on, keeping every finished row.

Every call of a candidate, and of the comparisons, goes through the audit's one executor (softaudit/execute/): by
default a worker process, so a crash, an exit or a hang in other people's code is an error row, not the end of the
run. `stop` (a threading.Event, set by `softaudit run` on Ctrl-C) ends the audit between families, keeping what
finished.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import math
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from . import _store, causes, invariants
from . import candidates as builtin
from . import kinds
from .adapters import (Candidate, CandidateError, CandidateSkip, check_device, check_kind, load_target, parse_device,
                       time_limits)
from .cases import Case, families_for, load_case_files
from .execute import Executor, InProcess, executor
from .metrics import Tally, basis, measure
from .policy import Policy, Reason
from .kinds import KINDS, Kind
from .reference import Format, format_of, round_to
from .results import COLUMNS, MEASURES, AuditResult, WorstInput
from .settings import audit_default
from .worst import element_ulp, row_inputs


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

    @property
    def kind(self) -> Kind:
        return kinds.get(self.case.kind)

    @functools.cached_property
    def references(self) -> tuple:
        """The exact results, one reference Result per output of the kind."""
        return self.kind.part("reference")(self.kind, self.inputs, self.mask, self.fmt.dtype)

    @functools.cached_property
    def bases(self) -> tuple:
        """The reference side of the measures, one per output, shared by every candidate."""
        extras = self.kind.part("conditioning")(self.kind, self.inputs, self.mask, self.references)
        return tuple(basis(self.case.kind, self.fmt, ref, **extra) for ref, extra in zip(self.references, extras))

    @property
    def reference(self):
        """The reference of the first output (a forward kind's only one)."""
        return self.references[0]

    @property
    def basis(self):
        """The basis of the first output (a forward kind's only one)."""
        return self.bases[0]

    def complete(self) -> None:
        """Compute now what is otherwise computed when first needed (reference, basis, probes), to keep it."""
        for name in ("references", "bases", "probes", "leak_probe"):
            getattr(self, name)

    @property
    def output_shapes(self) -> tuple[tuple, ...]:
        return tuple(ref.value.shape for ref in self.references)

    @property
    def output_shape(self) -> tuple:
        """The shape of the first output (a forward kind's only one)."""
        return self.reference.value.shape

    def output(self, index: int) -> "Prepared | OutputView":
        """This case seen through one output of the kind (a forward kind's only output is the case itself)."""
        return self if index == 0 else OutputView(self, index)

    @functools.cached_property
    def probes(self) -> invariants.Probes | None:
        """The invariants' transformed inputs (row kinds, cases up to invariants.MAX_ELEMENTS elements)."""
        x = self.inputs.get("x")
        if not self.kind.invariants or x is None or x.size > invariants.MAX_ELEMENTS:
            return None
        return invariants.Probes(self.case.kind, self.inputs, self.mask, self.fmt.dtype, seed=self.case_in_family)

    @functools.cached_property
    def leak_probe(self) -> tuple[dict, np.ndarray] | None:
        """For a kind with the leak probe (attention) and a mask: inputs with some masked keys' k and v replaced, and
        the queries that must not change (those that may attend none of the replaced keys in any batch entry, and
        some key in one)."""
        if not self.kind.leak_probe or self.mask is None:
            return None
        rng = np.random.default_rng(self.case_in_family)
        keep = self.mask.reshape((-1,) + self.mask.shape[-2:]).any(axis=0)  # (Lq, Lk): may attend anywhere
        masked_counts = np.where(keep.any(axis=1), (~keep).sum(axis=1), 0)
        if not masked_counts.any():
            return None
        replaced = ~keep[int(np.argmax(masked_counts))]  # the masked keys of the most masked query
        # Queries with nothing kept are judged by the fully-masked rule (whatever they give moves with every key).
        unaffected = ~keep[:, replaced].any(axis=1) & keep.any(axis=1)
        inputs = dict(self.inputs)
        for name in ("k", "v"):
            arr = inputs[name].astype(np.float64)
            arr[..., replaced, :] = rng.standard_normal(arr[..., replaced, :].shape) * 8
            inputs[name] = round_to(arr, self.fmt.dtype)
        return inputs, unaffected


class OutputView:
    """A prepared case seen through one of its kind's outputs (attention_grad's dk, dv): that output's reference,
    basis and shape; everything else is the case's."""

    def __init__(self, pc: Prepared, index: int):
        self.pc, self.index = pc, index
        self.case, self.fmt, self.case_in_family, self.inputs, self.mask = pc.case, pc.fmt, pc.case_in_family, pc.inputs, pc.mask

    @property
    def reference(self):
        return self.pc.references[self.index]

    @property
    def basis(self):
        return self.pc.bases[self.index]

    @property
    def output_shape(self) -> tuple:
        return self.pc.output_shapes[self.index]


def candidates_for(targets, kind, device: str | None = None) -> list[Candidate]:
    """The candidates of the targets (None: the built-ins), of `kind` if given, framework ones on `device`.

    ValueError (one line) before anything runs: an unknown kind, a target with no candidate of it, an unknown
    device, or one the targets' frameworks do not see (a torch or jax candidate pinned to one included)."""
    if kind is not None:
        check_kind(kind)
    parse_device(device)
    if targets is None:  # the built-ins (a kind that is not in the default run only when asked for)
        found = [c for c in builtin.builtins() if c.kind == kind or (kind is None and kinds.get(c.kind).default_run)]
    else:
        if isinstance(targets, (str, Path, Candidate)) or callable(targets):
            targets = [targets]
        found = [c for target in targets for c in load_target(str(target) if isinstance(target, Path) else target, kind)]
    # A framework candidate not pinned to a device runs on the run's; numpy ones run where numpy does.
    found = [dataclasses.replace(c, device=device) if c.framework != "numpy" and c.device is None else c for c in found]
    for framework, where in dict.fromkeys((c.framework, c.device) for c in found):
        check_device(framework, where)
    return found


@dataclasses.dataclass
class Comparison:
    """A comparison implementation's errors on a family (None: it computed nothing comparable)."""

    name: str
    max_cond: float | None  # its max conditioning-scaled error: the plain one's bounds a fail
    max_ulp: float | None  # its max ULP error: best practice's bounds a warn
    case_abs: list  # per case, its max |y - r| (NaN where nothing was compared)
    error: str = ""  # why it could not run, if it could not


@dataclasses.dataclass
class _Family:
    """One family's prepared cases for a kind, dtype, suite and seed, and the comparisons' errors on them."""

    prepared: list[Prepared]
    # Each a list with one Comparison per output of the kind (None: not run yet):
    plain: list | None = None  # the plain implementation in the dtype
    best: list | None = None  # best practice
    others: list | None = None  # the other standard same-dtype algorithms, each a list

    @property
    def comparisons(self) -> list[Comparison]:
        """Every comparison of every output."""
        return [c for per_output in (self.plain, self.best, *(self.others or ())) if per_output for c in per_output]

    def plain_cond(self, output: int) -> float | None:
        """The largest max_cond_err of the standard same-dtype algorithms on one output: a fail is worse than
        factor x this."""
        found = [c[output].max_cond for c in (self.plain, *(self.others or ())) if c and c[output].max_cond is not None]
        return max(found) if found else None


#: Prepared built-in families kept between audit() calls in this process, least recently used dropped first
#: once they hold more than about this many bytes. 0 turns the cache off; `clear_cache()` empties it.
CACHE_BYTES = 512 << 20
_CACHE: collections.OrderedDict[tuple, _Family] = collections.OrderedDict()
_UNWRITABLE: set[Path] = set()  # cache folders a write failed in
_WRITTEN: set[Path] = set()  # cache folders written since they were last pruned


def clear_cache() -> None:
    """Forget every prepared family (inputs, references, comparison errors) kept between audits."""
    _CACHE.clear()


def _family(family, kind: str, fmt: Format, suite: str, seed: int, cache: bool, folder: Path | None, timeout,
            ex: Executor) -> _Family:  # fmt: skip
    """A built-in family prepared: from this process's cache, from the folder on disk, or computed (and then kept)."""
    key = (family.name, kind, fmt.name, suite, seed)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    path = folder / f"{_store.fingerprint()}-{family.name}-{kind}-{fmt.name}-{suite}-{seed}.pkl" if folder else None
    found = _store.load(path) if path else None
    if found is None:
        found = _Family([Prepared(case, fmt, i) for i, case in enumerate(family.cases(kind, fmt, suite, seed))])
        if path and folder not in _UNWRITABLE and _compare(found, kind, timeout, ex):  # (a failed comparison is not kept)
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


def _compare(fam: _Family, kind: str, timeout, ex: Executor) -> bool:
    """Run the comparisons on the family (the plain implementation, the other standard same-dtype algorithms, best
    practice), where not yet run; False if one of them failed to run."""
    for role, pick in (("plain", builtin.plain), ("best", builtin.best)):
        if getattr(fam, role) is None:
            setattr(fam, role, _comparison(pick(kind), fam.prepared, timeout, ex))
    if fam.others is None:
        fam.others = [_comparison(c, fam.prepared, timeout, ex) for c in builtin.standard(kind)[1:]]
    return not any(c.error for c in fam.comparisons)


def _comparison(candidate: Candidate, prepared: list[Prepared], timeout, ex: Executor) -> list[Comparison]:
    """The comparison's errors on the family, one Comparison per output of the kind."""
    outputs = len(kinds.get(candidate.kind).outputs)
    try:
        _, _, measured = _run_family(candidate, prepared, timeout, ex, check_invariants=False)
    except (CandidateError, CandidateSkip) as exc:
        return [Comparison(candidate.name, None, None, [math.nan] * len(prepared), str(exc))] * outputs
    found = []
    for m in measured:
        case_abs = [p.max_abs_err if p.elements else math.nan for p in m.parts]
        compared = m.tally.elements > 0
        found.append(Comparison(candidate.name, m.tally.max_cond_err if compared else None,
                                m.tally.max_ulp if compared else None, case_abs))  # fmt: skip
    return found


def _wanted(name: str, only: set | None) -> bool:
    """Whether `families=` keeps a family. Case files and the corpus are always kept unless `only` names one of them."""
    if only is None or name in only:
        return True
    own = name.startswith("file:") or name == "corpus"
    return own and not any(n.startswith("file:") or n == "corpus" for n in only)


def _prepare(kind: str, fmt: Format, suite: str, from_files: list, only, seed: int, corpus, cache: bool, folder, timeout,
             ex: Executor, stopped: Callable[[], bool]) -> dict[str, _Family]:  # fmt: skip
    """Every family of the kind in the dtype, prepared, with the comparison implementations' errors.

    from_files: the cases of the case files for this kind (read once per audit, before anything runs). Once
    stopped() says so, no further family is prepared (the audit runs nothing more)."""
    from .hunt import load_corpus

    by_family = {}
    for f in families_for(kind):
        if _wanted(f.name, only) and not stopped():
            by_family[f.name] = _family(f, kind, fmt, suite, seed, cache, folder, timeout, ex)
    by_family = {name: fam for name, fam in by_family.items() if fam.prepared}  # (a family may have no case in a dtype)
    extra = list(from_files) + (load_corpus(corpus, kind, fmt.name) if corpus else [])
    extra = [case for case in extra if _wanted(case.family, only)]
    shared = set(by_family)  # possibly cached: copied before a case file adds to one
    for case in extra:  # case files and the corpus are read fresh every time (they may have changed)
        if case.family in shared:
            by_family[case.family] = _Family(list(by_family[case.family].prepared))
            shared.discard(case.family)
        group = by_family.setdefault(case.family, _Family([])).prepared
        group.append(Prepared(case, fmt, len(group)))
    for fam in by_family.values():  # (a family a case file added to is compared afresh, every case)
        _compare(fam, kind, timeout, ex)
    return by_family


@dataclasses.dataclass
class Measured:
    """One output's measures over a family: the tally, whether every output was NaN where something is defined
    (None when nothing is), one record per case (for the plots) and each case's own tally."""

    tally: Tally
    all_nan: bool | None
    per_case: list
    parts: list


def _run_family(candidate: Candidate, prepared: list[Prepared], timeout, ex: Executor, check_invariants: bool = True):
    """Run one candidate on one family's cases: the seconds spent in the candidate, notes, and one Measured per
    output of its kind (each output against its own reference)."""
    kind = kinds.get(candidate.kind)
    seconds, notes = 0.0, set()
    measured = [Measured(Tally(), True, [], []) for _ in kind.outputs]
    anything = [False] * len(kind.outputs)  # something is defined, on some case
    for pc in prepared:
        fmt = pc.fmt
        start = time.perf_counter()
        # reuse: y (if the candidate returns its input) lives until the next case's call; everything below reads
        # it, the invariants and the leak probe call with copies of their own
        ys, note = ex.call_all(candidate, pc.inputs, pc.mask, pc.output_shapes, fmt.dtype, timeout, reuse=True)
        seconds += time.perf_counter() - start
        notes.add(note)
        for index, (m, y) in enumerate(zip(measured, ys)):
            view = pc.output(index)
            part = measure(view.basis, y, case_index=pc.case_in_family)
            defined = ~np.asarray(view.reference.undefined)
            if defined.any():
                anything[index] = True
                m.all_nan = m.all_nan and y.size > 0 and bool(np.isnan(y).all())  # (ml_dtypes have isnan too)
            if check_invariants and pc.probes is not None:  # (forward row kinds: one output)
                part.invariants = invariants.check(candidate, pc.probes, y, pc.output_shape, timeout, part.max_ulp, ex)
            probe = pc.leak_probe  # (forward attention: one output)
            if probe is not None:
                inputs, unaffected = probe
                moved, _ = ex.call(candidate, inputs, pc.mask, pc.output_shape, fmt.dtype, timeout)
                a, b = y.astype(np.float64)[..., unaffected, :], moved.astype(np.float64)[..., unaffected, :]
                part.mask_leak = int((~((a == b) | (np.isnan(a) & np.isnan(b)))).sum())
            m.tally.merge(part)
            m.parts.append(part)
            compared = part.elements > 0
            m.per_case.append({"case": pc.case.description, "size": int(y.size), "elements": part.elements,
                               "max_cond_err": part.max_cond_err if compared else math.nan,
                               "max_ulp": part.max_ulp if compared else math.nan,
                               "mean_ulp": part.mean_ulp if compared else math.nan,
                               "nonfinite": part.nan + part.overflow, "events": part.nan + part.overflow + part.mask_leak,
                               **pc.case.params})  # fmt: skip
    for m, any_defined in zip(measured, anything):
        m.all_nan = m.all_nan if any_defined else None
    notes = "; ".join(sorted(n for n in notes if n))
    return seconds, notes, measured


def audit(
    targets=audit_default("targets"),
    *,
    kind: str | None = audit_default("kind"),
    dtypes: Iterable = audit_default("dtypes"),
    suite: str = audit_default("suite"),
    cases=audit_default("cases"),
    families: Iterable[str] | None = audit_default("families"),
    corpus=audit_default("corpus"),
    policy: Policy | None = None,
    seed: int = audit_default("seed"),
    timeout: float | None = audit_default("timeout"),
    progress: Callable[[int, int, str], None] | None = None,
    cache: bool = True,
    cache_dir: str | Path | None = audit_default("cache_dir"),
    device: str | None = audit_default("device"),
    isolation: str = audit_default("isolation"),
    memory_limit_mib: int | None = audit_default("memory_limit"),
    stop=None,
) -> AuditResult:
    """Audit candidates against the reference on every family of their kind, in every dtype.

    targets: None (the built-ins), or a module, file, "module:function", any callable, a Candidate, or a list of
    them. kind: needed for unmarked functions, and filters otherwise (a target with none of that kind is a
    ValueError naming the kinds it has). device: where torch and jax candidates not pinned to a device run
    ("cpu", "cuda", "cuda:N", "gpu"; None: the CPU); numpy ones run on the CPU. cases: case files (.npy / .npz)
    added as families of their own.
    families: only these families (case files and the corpus are run too, unless a `file:` family or `corpus` is
    named: then only those named). timeout: seconds per candidate call.
    seed: varies the random families (the same seed always gives the same cases). corpus: a folder of hunt
    findings, replayed as the family `corpus` (each case in its own dtype). cache: keep the prepared built-in
    families (inputs, references, the comparison's errors) for later audits, in this process (`CACHE_BYTES`)
    and in cache_dir (None: $SOFTAUDIT_CACHE_DIR, else ~/.cache/softaudit; "off": none) for later processes.
    isolation: "worker" (every call in a worker process: a crash, exit or hang is an error row, and the caller's
    signal handlers and timers are left alone) or "none" (in this process, time limits by SIGALRM on the main
    thread). memory_limit_mib: the worker's address-space limit (isolation "worker" only; None: none).
    stop: a threading.Event (anything with is_set()); once set, nothing new starts and the audit returns the rows
    it finished, with settings["interrupted"] True.
    """
    import pandas as pd

    from .cases import SUITES

    if suite not in SUITES:
        raise ValueError(f"suite must be one of {', '.join(SUITES)}, got {suite!r}")
    policy = policy or Policy()
    formats = [format_of(d) for d in dtypes]
    files = [cases] if isinstance(cases, (str, Path)) else list(cases or [])
    only = None if families is None else set(families)
    builtin_names = {f.name for k in KINDS for f in families_for(k)}
    unknown = sorted(n for n in only or () if n not in builtin_names and not n.startswith("file:") and n != "corpus")
    if unknown:
        raise ValueError(f"unknown family {unknown[0]!r}; `softaudit cases` lists them")
    folder = _store.folder(cache_dir) if cache else None
    ex = executor(isolation, memory_limit_mib)  # (a bad value: ValueError before anything runs)
    found = candidates_for(targets, kind, device)
    kinds = [k for k in KINDS if any(c.kind == k for c in found)]
    from_files = load_case_files(files, kinds)  # read before anything runs: a bad file stops the audit here
    plan = [(k, fmt) for k in kinds for fmt in formats]
    rows, worst, case_rows = [], {}, []
    total = sum(1 for c in found for _ in formats)
    done = 0
    stopped = _Stop(stop)
    # In process, the SIGALRM handler is installed once and each call only sets its timer; isolated, no signal is
    # touched at all (the time limit is a wait in this process).
    with ex, time_limits() if isinstance(ex, InProcess) else contextlib.nullcontext():
        for k, fmt in plan:
            prepared = _prepare(k, fmt, suite, from_files[k], only, seed, corpus, cache, folder, timeout, ex, stopped)
            for candidate in (c for c in found if c.kind == k):
                if stopped():
                    break
                rows += _audit_candidate(candidate, fmt, prepared, policy, timeout, (suite, seed, corpus), worst,
                                         case_rows, ex, stopped)  # fmt: skip
                done += 1
                if progress:
                    progress(done, total, f"{candidate.name} {fmt.name}")
    if folder in _WRITTEN:  # (an audit that wrote nothing leaves the folder unread)
        _WRITTEN.discard(folder)
        _store.prune(folder)
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    settings = {"suite": suite, "dtypes": [f.name for f in formats], "policy": dataclasses.asdict(policy),
                "timeout": timeout, "cases": [str(f) for f in files], "families": sorted(only) if only else None,
                "seed": seed, "corpus": str(corpus) if corpus else None, "device": device, "isolation": isolation,
                "memory_limit_mib": memory_limit_mib, "interrupted": stopped.hit}  # fmt: skip
    return AuditResult(table, worst, settings, case_rows)


class _Stop:
    """Asks the audit's `stop` event whether to start the next piece of work; `hit` remembers that some work was
    left undone (the run is then interrupted: an event set after the last unit finished changes nothing)."""

    def __init__(self, event):
        self.event, self.hit = event, False

    def __call__(self) -> bool:
        self.hit = self.hit or (self.event is not None and self.event.is_set())
        return self.hit


def _audit_candidate(candidate, fmt, prepared: dict, policy, timeout, recipe, worst: dict, case_rows: list, ex: Executor,
                     stopped: Callable[[], bool]) -> list:  # fmt: skip
    """One candidate in one dtype on every family: its rows, one per family and output of its kind (the `output`
    column names it where the kind has several). Adds its worst inputs and per-case records to those given.
    recipe: (suite, seed, corpus), which regenerate a case. Once stopped() says so, no further family is run."""
    outputs = kinds.get(candidate.kind).outputs
    names = outputs if len(outputs) > 1 else ("",)
    mine, nan_everywhere = [], []
    for family, fam in prepared.items():
        if stopped():
            break
        rows = []
        for index, name in enumerate(names):
            plain = fam.plain_cond(index)
            best = fam.best[index].max_ulp if fam.best else None
            rows.append({"candidate": candidate.name, "kind": candidate.kind, "dtype": fmt.name, "family": family,
                         "output": name, "cases": len(fam.prepared), "plain_cond_err": plain, "best_ulp": best,
                         "fail_above": policy.fail_above(fmt, plain), "warn_above": policy.warn_above(best)})  # fmt: skip
        try:
            seconds, note, measured = _run_family(candidate, fam.prepared, timeout, ex)
        except CandidateError as exc:
            mine += [row | {"verdict": "error", "cause": "error", "note": str(exc)} for row in rows]
            continue
        except CandidateSkip as exc:
            mine += [row | {"verdict": "skip", "cause": "skip", "note": str(exc)} for row in rows]
            continue
        for index, (row, m) in enumerate(zip(rows, measured)):
            pcs = [pc.output(index) for pc in fam.prepared]
            tally = m.tally
            if m.all_nan is not None:
                nan_everywhere.append(m.all_nan)
            case_rows += [{"candidate": candidate.name, "kind": candidate.kind, "dtype": fmt.name, "family": family,
                           "output": row["output"]} | c for c in m.per_case]  # fmt: skip
            record = _worst_record(candidate, fmt, pcs, tally, recipe, family, row["output"]) if tally.worst is not None else None
            if record is not None:
                worst[record.key] = record
            verdict, cause, text, fix = _verdict(candidate.kind, fmt, pcs, tally, record, policy, row["plain_cond_err"], row["best_ulp"])
            failed = dict.fromkeys(f"{c.name} could not run: {c.error}" for c in fam.comparisons if c.error)
            notes = [note, *failed, text]
            plain = fam.plain[index] if fam.plain else None
            mine.append(row | _row(tally) | {"seconds": seconds, "verdict": verdict, "cause": cause, "fix": fix,
                                             "note": "; ".join(filter(None, notes)), "fa_ratio": _fa_ratio(m.parts, plain),
                                             "worst_scale": record.scale if record and tally.elements else math.nan})  # fmt: skip
    if nan_everywhere and all(nan_everywhere):  # (rows skipped are left as they are)
        # NaN on every family: the candidate never returned a number, an error rather than a verdict.
        mine = [r | {"verdict": "error", "cause": "error", "note": "returned NaN everywhere"} if r["verdict"] != "skip" else r
                for r in mine]  # fmt: skip
    return mine


def _verdict(kind, fmt, pcs, tally: Tally, record, policy: Policy, plain, best) -> tuple[str, str, str, str]:
    """(verdict, cause, note, fix) of one row: the rules it broke, in plain words, with the known fix."""
    reasons = policy.judge(kind, fmt, tally, plain, best)
    if not tally.elements and not reasons and not _undefined_rows_judged(pcs):
        return "error", "nothing_compared", _nothing_compared(pcs, fmt), ""
    if not reasons:
        return "pass", "", "", ""
    first = reasons[0]
    cause = record.cause if first.rule in ("defect", "below_best") and record is not None else first.rule
    texts = [_explain(r, kind, fmt, pcs, tally, record) for r in reasons]
    return policy.verdict(reasons), cause, "; ".join(texts), causes.fix(first.rule, kind, cause)


def _explain(reason: Reason, kind, fmt, pcs, tally: Tally, record) -> str:
    """A reason's text, with what explains it: the input pattern behind a NaN, the worst element's cause."""
    if reason.rule in ("nan", "overflow") and tally.event_at is not None:
        case, flat = tally.event_at
        pc = pcs[case]
        inputs, mask = row_inputs(kind, pc, np.unravel_index(flat, pc.output_shape))
        why = causes.diagnose(kind, fmt, inputs, mask)
        return f"{reason.text}: {why}" if why else reason.text
    if reason.rule in ("defect", "below_best") and record is not None:
        return f"{reason.text}; worst element: {record.explanation}"
    return reason.text


def _undefined_rows_judged(pcs) -> bool:
    """Whether any case has rows the rules on undefined rows judge (a NaN to propagate, nothing kept)."""
    return any((b.kept_nan_rows is not None and b.kept_nan_rows.any()) or (b.nothing_kept is not None and b.nothing_kept.any())
               for b in (pc.basis for pc in pcs))  # fmt: skip


def _nothing_compared(pcs, fmt) -> str:
    """Why a row had nothing to judge: usually inputs that overflow the dtype (every row is then undefined)."""
    values = sum(a.size for pc in pcs for a in pc.case.arrays.values())
    overflowed = sum(int(np.count_nonzero(np.isfinite(pc.case.arrays[n]) & ~np.isfinite(pc.inputs[n].astype(np.float64))))
                     for pc in pcs for n in pc.inputs)  # fmt: skip
    why = f": {overflowed} of {values} input values overflow {fmt.name}" if overflowed else ""
    return f"nothing could be compared (every row is undefined in {fmt.name}{why})"


def _fa_ratio(parts: list[Tally], plain: Comparison | None) -> float:
    """FlashAttention's test ratio, max over cases of max|y - r| / max|plain - r| (NaN where none applies)."""
    if plain is None:
        return math.nan
    ratios = []
    for part, plain_abs in zip(parts, plain.case_abs):
        if part.elements and math.isfinite(plain_abs):
            ratios.append(part.max_abs_err / plain_abs if plain_abs > 0 else (0.0 if part.max_abs_err == 0 else math.inf))
    return max(ratios, default=math.nan)


def _worst_record(candidate: Candidate, fmt: Format, pcs: list, tally: Tally, recipe, family: str, output: str) -> WorstInput:
    cond, case, flat, value = tally.worst
    pc = pcs[case]
    b = pc.basis
    position = [int(i) for i in np.unravel_index(flat, pc.output_shape)]
    exact = float(b.hi.reshape(-1)[flat]) + (0.0 if b.lo is None else float(b.lo.reshape(-1)[flat]))
    rounded = float(b.rounded.reshape(-1)[flat])
    inv = float(b.inv_scale.reshape(-1)[flat])
    scale = 1 / inv if inv else math.nan
    name, axis = kinds.get(candidate.kind).reduction
    length = pc.inputs[name].shape[axis]
    cause, explanation = causes.classify(candidate.kind, fmt, value, exact, rounded, scale, length)
    suite, seed, corpus = recipe
    where = {"case_file": pc.case.description} if family.startswith("file:") else {"corpus": str(corpus)} if family == "corpus" else {}
    arrays = dict(pc.inputs) | ({} if pc.mask is None else {"mask": pc.mask})
    small = sum(np.size(a) for a in arrays.values()) <= WorstInput.MAX_VALUES
    return WorstInput(candidate.name, candidate.source, candidate.kind, fmt.name, family, pc.case.description,
                      pc.case_in_family, position, cond, element_ulp(pc, flat, value), scale, value, rounded, cause,
                      explanation, {"suite": suite, "seed": seed, "family": family, "case_index": pc.case_in_family} | where,
                      arrays if small else None, candidate.device, output)  # fmt: skip


def _row(t: Tally) -> dict:
    compared = t.elements > 0
    row = {
        "elements": t.elements, "max_cond_err": t.max_cond_err,
        "max_ulp": t.max_ulp, "mean_ulp": t.mean_ulp, "max_bits": float(np.log2(1 + t.max_ulp)),
        "correctly_rounded": t.correctly_rounded / t.elements if compared else 0.0,
        "ge2_ulp": t.ge2_ulp / t.elements if compared else 0.0, "max_rel_err": t.max_rel_err, "max_abs_err": t.max_abs_err,
        "nan": t.nan, "overflow": t.overflow, "underflow": t.underflow, "flushed": t.flushed, "negative": t.negative,
        "mask_leak": t.mask_leak, "sum_err": t.sum_err, "argmax_flips": t.argmax_flips, "undefined_rows": t.undefined_rows,
        "nan_not_propagated": t.nan_not_propagated, "fully_masked": t.fully_masked_behaviour,
        "max_ulp_vsum": t.max_ulp_vsum, "max_normwise": t.max_normwise, "invariants": t.invariants_broken,
    }  # fmt: skip
    return row if compared else row | dict.fromkeys(MEASURES, math.nan)
