"""The audit: for candidate x dtype x family, round the inputs to the dtype, call, compare, judge; a row each.

The steps, each in its own module along the data's way: plan (softaudit/plan.py: which units, in the table's order)
-> prepare (softaudit/prepare.py: a family's inputs, references and comparisons, once per kind x dtype x family,
kept between audits) -> execute (softaudit/execute/: where a unit runs, in this process, in worker processes or on
a Dask cluster, and its candidate's calls) -> judge (softaudit/judge.py: measures, policy, rows). This module wires
them: `audit`, the results it returns, and the two tasks a unit's worker runs. A candidate that raises, hangs,
crashes or returns garbage on a family gives an `error` row for that family and the run goes on. `stop` (a
threading.Event, set by `softaudit run` on Ctrl-C) ends the audit between units, keeping what finished; the table
is the same, row for row and bit for bit, whatever runs the units.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
from collections.abc import Callable, Iterable
from pathlib import Path

from . import _store, execute, judge, plan, prepare
from .cases import load_case_files
from .kinds import KINDS
from .plan import candidates_for as candidates_for
from .policy import Policy
from .prepare import Prepared as Prepared
from .prepare import clear_cache as clear_cache
from .reference import format_of
from .results import COLUMNS, AuditResult
from .settings import audit_default


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
    workers: int | str = audit_default("workers"),
    scheduler=audit_default("scheduler"),
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
    it finished, with settings["interrupted"] True; a KeyboardInterrupt after it is set (softaudit run's second
    Ctrl-C) abandons the units running, whose workers are killed, and returns the rows finished before it.
    workers: units run in up to this many processes on this machine, this one among them (1: this one alone;
    "auto": one per core this process may use); the others start only once the work queued would keep this one
    busy a while (execute/_lanes.py: their start would cost more than they give a small plan). scheduler: a Dask
    scheduler's address ("tcp://HOST:PORT") or a distributed.Client: units run on its workers (GPU candidates only
    on those with a GPU resource; docs/scale.md). The table is the same whatever runs the units.
    progress: called progress(done, total, label) as each candidate finishes in a dtype (done of total candidate x
    dtype pairs; label "NAME dtype"); where it has a `weigh` method, weigh(spent, whole) comes just before, the work
    done and the whole in estimated cost (`costs`), for an estimate of the time left that counts a cold family's
    preparation at its weight.
    """
    import pandas as pd

    from .cases import SUITES

    if suite not in SUITES:
        raise ValueError(f"suite must be one of {', '.join(SUITES)}, got {suite!r}")
    policy = policy or Policy()
    formats = [format_of(d) for d in dtypes]
    files = [cases] if isinstance(cases, (str, Path)) else list(cases or [])
    only = None if families is None else set(families)
    plan.check_families(only)
    folder = _store.folder(cache_dir) if cache else None
    stopped = _Stop(stop)
    results = None
    try:
        # (a bad isolation, memory limit, workers or scheduler: ValueError before anything runs)
        with contextlib.ExitStack() as held:
            where = held.enter_context(execute.pool(workers, scheduler, isolation, memory_limit_mib, folder))
            if where.share is not None:  # (the families this process kept for its own lane's units: let go at the end)
                held.callback(prepare.forget, where.share)
            found = candidates_for(targets, kind, device, check_devices=scheduler is None)
            where.check(found)
            its_kinds = [k for k in KINDS if any(c.kind == k for c in found)]
            from_files = load_case_files(files, its_kinds, warn=True)  # (a bad file: here)
            planned = plan.groups(found, formats, from_files, only, corpus)
            plan.check_planned(planned, only)
            job = _Job(suite, seed, corpus, cache and not where.parallel, folder, timeout, policy)
            results = _run(planned, where, job, stopped, progress)
            prepare.finish(folder, last=True, others=where.parallel)
    except KeyboardInterrupt as interrupt:
        # Ctrl-C again once stopped (softaudit run's second): the units running are abandoned (the pool was closed
        # killing its workers on the way out) and the finished ones kept. Without a stop asked first, the caller's.
        results = interrupt.results if isinstance(interrupt, _Abandoned) else results
        if results is None or not stopped():
            raise
    rows, worst, case_rows, frameworks = [], {}, [], {}
    for unit in results:
        rows += unit.rows
        worst |= unit.worst
        case_rows += unit.case_rows
        frameworks |= unit.frameworks
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    settings = {
        "suite": suite,
        "dtypes": [f.name for f in formats],
        "policy": dataclasses.asdict(policy),
        "timeout": timeout,
        "cases": [str(f) for f in files],
        "families": sorted(only) if only else None,
        "seed": seed,
        "corpus": str(corpus) if corpus else None,
        "device": device,
        "isolation": isolation,
        "memory_limit_mib": memory_limit_mib,
        "interrupted": stopped.hit,
    }
    return AuditResult(table, worst, settings, case_rows, frameworks, policy)


#: Seconds a waiting audit sleeps between looks at its stop event and (Local) its own lane's queue, which a family
#: prepared elsewhere fills without a unit finishing.
POLL = 0.05


@dataclasses.dataclass(frozen=True)
class _Job:
    """What every task of one audit shares: how families are made and kept, the time limit, the policy."""

    suite: str
    seed: int
    corpus: object
    cache: bool  # keep prepared families in the memory of the process that prepares them
    folder: Path | None  # the cache folder on disk
    timeout: float | None
    policy: Policy

    @property
    def recipe(self) -> tuple:
        """(suite, seed, corpus): what regenerates a case."""
        return self.suite, self.seed, self.corpus


class _Stop:
    """Asks the audit's `stop` event whether to start the next piece of work; `hit` remembers that some work was
    left undone (the run is then interrupted: an event set after the last unit finished changes nothing)."""

    def __init__(self, event):
        self.event, self.hit = event, False

    def __call__(self) -> bool:
        self.hit = self.hit or (self.event is not None and self.event.is_set())
        return self.hit


def _run(planned: list[plan.Group], where, job: _Job, stopped: _Stop, progress) -> list[judge.UnitResult]:
    """Every unit of the plan run where `where` runs it, and their results in the plan's order (the units that
    did not run left out), settled candidate by candidate. Each family is prepared once, before its units; a
    pool that runs units in parallel is given every family at once, then every unit. A KeyboardInterrupt while
    they run is raised again as _Abandoned, holding the results of the units that finished."""
    weights = costs(planned, lambda source, fmt, d: prepare.kept(source, fmt, job.suite, job.seed, job.folder, d), job)
    units = _Units(where, job, progress, weights)
    try:
        ahead = [_prepare_all(group, where, job, stopped) for group in planned] if where.parallel else None
        for gi, group in enumerate(planned):
            families = ahead[gi] if ahead else _prepare_all(group, where, job, stopped)
            for ci, candidate in enumerate(group.candidates):
                for si, (source, fams) in enumerate(zip(group.sources, families)):
                    if stopped():
                        break
                    fam = fams[_departures(source, group.fmt, job, candidate)]
                    units.submit((gi, ci, si), fam, candidate, group.fmt, source.name)
                units.collect(block=False, stopped=stopped)
        units.collect(block=True, stopped=stopped)
    except KeyboardInterrupt:
        units.harvest()
        raise _Abandoned(_settled(planned, units)) from None
    return _settled(planned, units)


#: A family's preparation where its exact results are not kept (the references, and the comparisons' calls), in
#: units of one candidate's calls on the family: most of a cold run's extra time is there, and the candidate that
#: comes first in its kind and dtype waits for it (a run on a few candidates is mostly preparation). The main job's
#: cold and warm runs (docs/benchmarks.md) put it near this; it only weighs the estimate of the time left.
COLD = 6.0


def costs(planned: list[plan.Group], kept, job: _Job) -> dict[tuple, float]:
    """Each candidate x dtype's estimated cost, known before anything runs, by (group, candidate) index: 1 for each
    family it runs on, and COLD more for each family it is the first to need prepared where that family is not kept
    already (kept(source, fmt, departures) False). Equal weights would read the first candidate of a cold
    kind, which waits for every family's references, as the pace of the rest."""
    weights = {}
    for gi, group in enumerate(planned):
        needed = set()
        for ci, candidate in enumerate(group.candidates):
            cost = 0.0
            for si, source in enumerate(group.sources):
                wanted = (si, _departures(source, group.fmt, job, candidate))
                if wanted not in needed and not kept(source, group.fmt, wanted[1]):
                    cost += COLD
                needed.add(wanted)
                cost += 1.0
            weights[gi, ci] = cost
    return weights


class _Abandoned(KeyboardInterrupt):
    """A KeyboardInterrupt while units ran, with the results of those that finished."""

    def __init__(self, results: list[judge.UnitResult]):
        super().__init__()
        self.results = results


def _settled(planned: list[plan.Group], units: _Units) -> list[judge.UnitResult]:
    """The finished units' results in the plan's order, settled candidate by candidate."""
    settled = []
    for gi, group in enumerate(planned):
        for ci in range(len(group.candidates)):
            found = [units.finished.get((gi, ci, si)) for si in range(len(group.sources))]
            settled += judge.settle([result for result in found if result is not None])
    return settled


def _prepare_all(group: plan.Group, where, job: _Job, stopped: _Stop) -> list[dict]:
    """The group's families submitted to be prepared, in order (in this process: prepared now), until stopped: each
    once per set of declared conventions that changes its exact results for one of the candidates (`_departures`),
    by that set (() for the kind's defaults)."""
    families = []
    for source in group.sources:
        if stopped():
            break
        wanted = dict.fromkeys(_departures(source, group.fmt, job, c) for c in group.candidates)
        families.append({d: where.submit(_prepare_task, source, group.fmt, job, where.share, d) for d in wanted})
    return families


def _departures(source: plan.Source, fmt, job: _Job, candidate) -> tuple:
    """The conventions the candidate declared that change the family's exact results (prepare.departures)."""
    return prepare.departures(source, fmt, job.suite, job.seed, candidate.conventions)


class _Units:
    """The units submitted and their results as they finish, by (group, candidate, family) index. Progress is told
    per candidate x dtype once all its units are done, with its weight (`costs`). Once a unit ran past its time
    limit, the candidate's later units in that dtype that have not started are answered without calling it (their
    rows say it was not called again, as a serial run's do); once stopped, every unit not yet started is cancelled."""

    def __init__(self, where, job: _Job, progress, weights: dict[tuple, float]):
        self.where, self.job, self.progress, self.weights = where, job, progress, weights
        self.total, self.whole, self.spent = len(weights), sum(weights.values()), 0.0
        self.pending: dict = {}  # future -> key
        self.done = queue.SimpleQueue()  # the futures as they finish (or are cancelled)
        self.submitted: dict = {}  # key -> (fam, candidate, fmt, family): what it was submitted with
        self.refused: set = set()  # the keys answered without a call (not called again)
        self.finished: dict = {}  # key -> UnitResult, or None for a family with no case in the dtype
        self.open: dict = {}  # (group, candidate) -> the keys of its units not finished
        self.reported = 0

    def submit(self, key: tuple, fam, candidate, fmt, family: str, called: bool = True) -> None:
        who, runnable = self.where.sent(candidate)
        future = self.where.submit_staged(
            _unit_task, fam, who, runnable, fmt, family, self.job, called, gpu=execute.needs_gpu(candidate)
        )
        self.pending[future] = key
        future.add_done_callback(self.done.put)  # (one queue: waiting on a thousand futures at once costs seconds)
        self.submitted[key] = (fam, candidate, fmt, family)
        self.open.setdefault(key[:2], set()).add(key)

    def collect(self, block: bool, stopped: _Stop) -> None:
        """Take the finished units' results, as their futures report them done; with block, until none is pending
        (cancelling what is not started once stopped)."""
        if block:
            self.where.finish()
        while self.pending:
            if stopped():
                for future in self.where.cancel(list(self.pending)):
                    self._close(self.pending.pop(future))
            future = self._next(block)
            if future is None:
                if block:
                    continue
                return
            key = self.pending.pop(future, None)
            if key is None:  # (cancelled: closed then)
                continue
            self.finished[key] = future.result()
            if self.finished[key] is not None and self.finished[key].timed_out:
                self._not_again(key)
            self._close(key)

    def _next(self, block: bool):
        """The next future done, or None: none is done (with block: none came within POLL, or this process ran a
        task of its own lane meanwhile: Local's)."""
        try:
            return self.done.get_nowait()
        except queue.Empty:
            if not block or self.where.work():
                return None
        try:
            return self.done.get(timeout=POLL)
        except queue.Empty:
            return None

    def harvest(self) -> None:
        """Take the results of the units finished but not yet collected (a KeyboardInterrupt came first); those in
        flight, or that raised, are left."""
        for future, key in list(self.pending.items()):
            if future.done() and not future.cancelled() and future.exception() is None:
                del self.pending[future]
                self.finished[key] = future.result()

    def _not_again(self, key: tuple) -> None:
        """The candidate's units after `key` in its dtype, not started yet: answered again without a call."""
        later = [f for f, k in self.pending.items() if k[:2] == key[:2] and k[2] > key[2] and k not in self.refused]
        for future in self.where.cancel(later):
            k = self.pending.pop(future)
            self.refused.add(k)
            self.submit(k, *self.submitted[k], called=False)

    def _close(self, key: tuple) -> None:
        pair = self.open[key[:2]]
        pair.discard(key)
        if not pair and self.progress:
            self.reported += 1
            self.spent += self.weights[key[:2]]
            _, candidate, fmt, _ = self.submitted[key]
            if hasattr(self.progress, "weigh"):
                self.progress.weigh(self.spent, self.whole)
            self.progress(self.reported, self.total, f"{candidate.name} {fmt.name}")


def _prepare_task(
    source: plan.Source, fmt, job: _Job, share: Path | None, conventions: tuple = (), *, ex: execute.Executor
):
    """A family prepared (where a worker runs it: its comparisons' calls through that worker's executor), its exact
    results those of the declared conventions given; with a share folder, the path of the file worker processes map
    it from, else the family itself."""
    fam = prepare.prepare(source, fmt, job.suite, job.seed, job.cache, job.folder, job.timeout, ex, conventions)
    prepare.finish(job.folder)  # (the process that writes to the cache folder prunes it, every PRUNE_BYTES)
    return fam if share is None else prepare.share(fam, share)


def _unit_task(
    fam, candidate, runnable, fmt, family: str, job: _Job, called: bool, *, ex: execute.Executor
) -> Callable[[], judge.UnitResult | None]:
    """One unit, staged (`submit_staged`): the candidate's calls on the family begin (runnable: the candidate as this
    process loads it), and what is returned judges them: its rows, with the frameworks loaded where the calls ran
    (None for a family with no case in this dtype). A unit of several round trips is judged here, so that its
    calls come before the next unit's. called False: the rows of a candidate not called again."""
    fam = prepare.shared(fam)
    if not fam.prepared and not fam.undecided:
        return lambda: None
    if not called:
        result = judge.UnitResult([], heads=judge.head_rows(candidate, fmt, family, fam, job.policy)).not_again()
        return lambda: result
    made = execute.calls(runnable, fam.prepared, job.timeout, ex)

    def judged() -> judge.UnitResult:
        result = judge.unit(candidate, fmt, family, fam, made, job.policy, job.recipe)
        result.frameworks = ex.frameworks()  # (the calls are made: judge.unit consumed them)
        return result

    if made.overlaps:
        return judged
    result = judged()
    return lambda: result
