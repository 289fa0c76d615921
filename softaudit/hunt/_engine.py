"""The hunt: Hypothesis searches each candidate's inputs for a failure, steered toward large errors and events.

Each drawn input is judged exactly as `softaudit run` judges a family (reference, measures, the plain and
best-practice implementations on the same input, the policy). `hypothesis.target` on the conditioning-scaled error
and on the event count drives the search toward the worst inputs; a failure (a `fail` verdict, or a `warn` under a
strict policy) is shrunk to a small input, moved to the boundary of its failure (`_shrink`) and saved to the corpus.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import tempfile
import time

import hypothesis.configuration
import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, example, given, settings, target
from hypothesis.errors import Flaky

from .. import kinds
from .._store import folder as cache_folder
from ..adapters import taken
from ..cases import Case, save_corpus
from ..execute import Executor, calls, needs_gpu, pool
from ..judge import unit
from ..plan import candidates_for
from ..policy import Policy
from ..prepare import Prepared, PreparedFamily, compare
from ..reference import format_of
from ..results import SEVERITY
from . import _shrink, _strategies

#: (suite, seed, corpus) of a hunt's input: none regenerates it (the corpus keeps the input itself).
HUNT_RECIPE = (None, None, None)


class _OutOfTime(BaseException):
    """Raised inside the search once its time is spent: not an Exception, so Hypothesis stops at once instead of
    taking it for a failure to shrink."""


@dataclasses.dataclass
class Finding:
    candidate: str
    kind: str
    dtype: str
    examples: int
    failed: bool
    reason: str
    #: The failure's conditioning-scaled error; for a search that found nothing, the largest it measured (NaN: none)
    max_cond_err: float
    seconds: float
    corpus_file: str | None
    inputs: dict | None = None
    mask: object = None
    #: The keywords the failing input was called with (Case.options: attention's modifiers, cross_entropy's options).
    options: dict = dataclasses.field(default_factory=dict)
    #: The search stopped on an error of softaudit's own (its judgement of `inputs` raised; `reason` says what):
    #: the input is kept and saved as a failure's is, and the hunt exits 1 as a run with an `error` row does.
    stopped: bool = False

    @property
    def called_with(self) -> str:
        """The keywords as a call reads them: "softcap=5.0, reduction='mean'" ("" for none)."""
        return ", ".join(f"{name}={value!r}" for name, value in self.options.items())


def judge(candidate, kind, fmt, inputs, mask, options, policy, timeout, ex: Executor):
    """(verdict, reasons, max conditioning-scaled error, events) for one input, judged as `softaudit run` judges a
    family (softaudit.prepare, execute, judge: the candidate's calls with the invariants' and the leak probe's,
    the rows' rules, a candidate error an `error`, a comparison that cannot run a note); ex: the executor every
    call goes through.

    The comparisons run only where they can change the verdict (the bounds are never below their floors): the
    input is judged against the floors first (the proven line needs no comparison), and again with the comparisons
    where it did not pass or its ULP error passes min_ulp."""
    arrays = {n: np.asarray(a).astype(np.float64) for n, a in inputs.items()}
    case = Case(kind, "hunt", arrays, mask, None, "hunt", options=dict(options))
    fam = PreparedFamily([Prepared(case, fmt, 0, conventions=candidate.conventions)])
    seen = []  # (the outputs stay valid: reuse=False)
    called = _kept(calls(candidate, fam.prepared, timeout, ex, reuse=False), seen)
    # (the search needs the verdict only: the bug models run when `softaudit run` audits the corpus it saves)
    result = unit(candidate, fmt, "hunt", fam, called, policy, HUNT_RECIPE, diagnose=False)
    # (no tallies: the calls stopped at a skip or an error, and the rows say so; judged again on the calls kept,
    # none, the unit would read as an input with nothing compared, or pass)
    if result.tallies and (
        any(row["verdict"] != "pass" for row in result.rows)
        or any(t.elements and t.max_ulp > policy.min_ulp for t in result.tallies)
    ):
        compare(fam, kind, timeout, ex)
        result = unit(candidate, fmt, "hunt", fam, seen, policy, HUNT_RECIPE, diagnose=False)
    # An output with nothing to compare (every row undefined in the dtype: the input overflows it) says nothing about
    # the candidate: no verdict, and an input with nothing to judge at all is passed over, as a skip is.
    judged = [row for row in result.rows if row["cause"] != "nothing_compared"]
    verdict = max((row["verdict"] for row in judged), key=SEVERITY.get, default="skip")
    several = len(kinds.get(kind).outputs) > 1
    failed = [row for row in judged if row["verdict"] != "pass"]
    reasons = [f"{row['output']}: {row['note']}" if several else row["note"] for row in failed]
    if not result.tallies:  # the candidate raised, crashed or hung: steer towards it
        return verdict, reasons, math.inf, 1
    worst = float(np.fmax.reduce([t.max_cond_err for t in result.tallies]))
    # Invariants steer the search (as events) but, as in `softaudit run`, are reported rather than judged.
    events = sum(
        t.nan + t.overflow + t.wrong_inf + t.mask_leak + t.nan_not_propagated + sum(t.invariants.values())
        for t in result.tallies
    )
    return verdict, reasons, worst, events


def _recording(state: dict):
    """`judge`, keeping in state["error"] the input it raised on (an error of softaudit's own: the candidate's are
    rows) before the exception goes on to Hypothesis, which shrinks it: the last one kept is the smallest yet."""

    def judged(candidate, kind, fmt, inputs, mask, options, *rest):
        try:
            return judge(candidate, kind, fmt, inputs, mask, options, *rest)
        except Exception as exc:
            state["error"] = (inputs, mask, options, exc)
            raise

    return judged


def _kept(called, seen: list):
    """The calls, each kept in `seen` as it comes (to judge them again without calling again)."""
    for done in called:
        seen.append(done)
        yield done


def _strategy(kind: str):
    """The hunt's strategy for `kind` (softaudit/hunt/_strategies.py); ValueError in one line where it has none."""
    strategy = _strategies.for_kind(kinds.get(kind))
    if strategy is None:
        raise ValueError(f"the hunt has no strategy for {kind}: its inputs are not ones it draws")
    return strategy


def hunt_one(candidate, fmt, budget: float, policy: Policy, timeout: float, ex: Executor) -> Finding:
    kind = candidate.kind
    # the keywords the candidate takes among those the hunt draws (a candidate without softcap gets no cap)
    takes = frozenset(taken(candidate.call, _strategies.keywords(kinds.get(kind))))
    strategy = _strategy(kind)(kind, fmt, takes)
    # largest: the largest conditioning-scaled error measured on any input judged (NaN: none measured), what a search
    # that found nothing reports
    seeds = _strategies.whole_seeds(kind, fmt, takes)  # (judged whole first, within a third of the share)
    state = {"examples": 0, "last": None, "error": None, "largest": math.nan, "seeds": len(seeds)}
    judge = _recording(state)  # (probe calls it by this name: a derandomised search is seeded from probe's source)
    start = time.monotonic()

    @settings(
        max_examples=10**6,
        deadline=None,
        database=None,
        derandomize=bool(os.environ.get("CI")),
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, Phase.target, Phase.shrink],
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,  # (its "add @seed(...) to this test" is for test authors, not a hunt's user)
    )
    @given(strategy)
    def probe(drawn):
        if time.monotonic() - start > (budget if state["last"] is None else 1.5 * budget):
            raise _OutOfTime  # (a failure found in time is shrunk for up to half a share more)
        if state["seeds"]:
            state["seeds"] -= 1
            if time.monotonic() - start > budget / 3:
                return  # (the draws get the rest of the share)
        inputs, mask, options = drawn
        state["examples"] += 1
        verdict, reasons, error, events = judge(candidate, kind, fmt, inputs, mask, options, policy, timeout, ex)
        if verdict == "skip":
            return
        state["largest"] = float(np.fmax(state["largest"], error))
        target(min(error, 1e300) if math.isfinite(error) else 1e300, label="conditioning-scaled error")
        target(float(events), label="events")
        if policy.failed([verdict]):
            state["last"] = (inputs, mask, options, reasons, error)
            raise AssertionError("; ".join(reasons))

    for seed in reversed(seeds):  # (example() prepends: reversed, so they run in order)
        probe = example(seed)(probe)
    try:
        with _hypothesis_home():
            probe()
    except (AssertionError, Flaky, _OutOfTime):
        pass
    except Exception as exc:  # an error judging an input (kept in state), or one in Hypothesis itself
        if state["last"] is None and state["error"] is None:
            state["last"] = (None, None, {}, [f"hunt stopped: {type(exc).__name__}: {exc}"], math.nan)
    if state["last"] is None and state["error"] is not None:  # (a failure found meanwhile is reported instead)
        inputs, mask, options, exc = state["error"]
        reason = f"hunt stopped: {type(exc).__name__}: {exc}"
        seconds = time.monotonic() - start
        return Finding(
            candidate.name,
            kind,
            fmt.name,
            state["examples"],
            False,
            reason,
            math.nan,
            seconds,
            None,
            inputs,
            mask,
            options,
            stopped=True,
        )
    if state["last"] is None:
        seconds = time.monotonic() - start
        return Finding(candidate.name, kind, fmt.name, state["examples"], False, "", state["largest"], seconds, None)
    inputs, mask, options, reasons, error = state["last"]
    if inputs is not None:  # moved to the failure's boundary within half a share more (docs/hunt.md)

        def judged(inputs, mask, options):
            return judge(candidate, kind, fmt, inputs, mask, options, policy, timeout, ex)

        fails = _shrink.fails_as(reasons[0], judged, policy)
        deadline = time.monotonic() + budget / 2
        inputs, mask, options = _shrink.to_boundary(kind, inputs, mask, options, fails, deadline)
        _, reasons, error, _ = judged(inputs, mask, options)
    seconds, found, reason = time.monotonic() - start, inputs is not None, "; ".join(reasons)
    return Finding(
        candidate.name, kind, fmt.name, state["examples"], found, reason, error, seconds, None, inputs, mask, options
    )


@contextlib.contextmanager
def _hypothesis_home():
    """Hypothesis's files (a cache of the constants it reads from source files) go to softaudit's cache folder
    (a temporary folder where the cache is off), not to .hypothesis/ in the user's working folder; the folder
    Hypothesis had is given back afterwards, for a hunt called from the user's own tests. The hunt keeps no
    example database (database=None). $HYPOTHESIS_STORAGE_DIRECTORY, where set, is left to decide."""
    if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        yield
        return
    before = vars(hypothesis.configuration).get("__hypothesis_home_directory")  # (None: not chosen yet)
    cache = cache_folder()
    if cache:
        cache.mkdir(parents=True, exist_ok=True, mode=0o700)  # (private, as _store makes it: it holds pickles)
    with contextlib.nullcontext(cache / "hypothesis") if cache else tempfile.TemporaryDirectory() as home:
        hypothesis.configuration.set_hypothesis_home_dir(home)
        try:
            yield
        finally:
            hypothesis.configuration.set_hypothesis_home_dir(before)


def hunt(
    targets=None,
    *,
    kind=None,
    dtypes=("float32",),
    budget: float = 60.0,
    corpus="reports/corpus",
    policy: Policy | None = None,
    timeout: float = 10.0,
    progress=None,
    device=None,
    isolation: str = "worker",
    memory_limit_mib: int | None = None,
    workers: int = 1,
    scheduler=None,
) -> list[Finding]:
    """Hunt each candidate x dtype for failing inputs within `budget` seconds in all; save failures to `corpus`.

    Targets, kind, device, isolation, memory_limit_mib, workers and scheduler as softaudit.audit takes them: with
    several workers the searches run side by side, each given a larger share of the budget."""
    policy = policy or Policy()
    with pool(workers, scheduler, isolation, memory_limit_mib) as where:
        found = candidates_for(targets, kind, device, check_devices=scheduler is None)
        for each in dict.fromkeys(c.kind for c in found):  # (before any search: a kind it cannot draw is one line)
            _strategy(each)
        where.check(found)
        units = [(candidate, format_of(d)) for candidate in found for d in dtypes]
        share = budget / max(1, math.ceil(len(units) / where.width))
        findings = Findings()
        try:
            for (candidate, fmt), search in zip(units, _searches(where, units, share, policy, timeout)):
                findings.append(_saved(search.result(), candidate, corpus))
                if progress:
                    progress(len(findings), len(units), f"{candidate.name} {fmt.name}")
        except KeyboardInterrupt:  # (Ctrl-C, or SIGTERM under _signals.at_once): the finished searches go with it
            findings.interrupted = True
            raise HuntInterrupted(findings) from None
    return findings


class Findings(list):
    """The hunt's findings, in the order of its searches; `interrupted` when Ctrl-C or SIGTERM stopped it."""

    interrupted = False


class HuntInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the hunt: `findings` holds the searches that finished before it."""

    def __init__(self, findings: Findings):
        super().__init__()
        self.findings = findings


def _searches(where, units: list, share: float, policy: Policy, timeout: float):
    """Each unit's search, in order: all submitted at once where they run side by side, else one at a time."""
    submitted = (
        where.submit(hunt_one, where.sent(c)[1], fmt, share, policy, timeout, gpu=needs_gpu(c)) for c, fmt in units
    )
    yield from list(submitted) if where.parallel else submitted


def _saved(finding: Finding, candidate, corpus) -> Finding:
    """A finding with its failure, or the input that stopped its search, saved to the corpus."""
    if (finding.failed or finding.stopped) and corpus:
        path = save_corpus(
            corpus,
            candidate.name,
            candidate.kind,
            finding.dtype,
            finding.inputs,
            finding.mask,
            finding.reason,
            finding.max_cond_err,
            finding.options,
        )
        finding.corpus_file = str(path)
    return finding
