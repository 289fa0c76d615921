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
import time

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings, target
from hypothesis.errors import Flaky

from .. import candidates as builtin
from .. import invariants, kinds
from ..adapters._bridge import CandidateSkip
from ..adapters._call import CandidateError, time_limits
from ..execute import Executor, InProcess, executor
from ..cases import Case
from ..policy import Policy
from ..reference import format_of
from ..runner import Prepared, candidates_for
from ..metrics import Tally, measure
from . import _corpus, _shrink


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
    max_cond_err: float
    seconds: float
    corpus_file: str | None
    inputs: dict | None = None
    mask: object = None


def judge(candidate, comparisons, kind, fmt, inputs, mask, policy, timeout, ex: Executor):
    """(verdict, reasons, max conditioning-scaled error, events) for one input, by the rules of `softaudit run`.

    comparisons: (the standard same-dtype algorithms of the kind, its best-practice implementation); ex: the
    executor every call goes through."""
    case = Case(kind, "hunt", {n: np.asarray(a).astype(np.float64) for n, a in inputs.items()}, mask, None, "hunt")
    pc = Prepared(case, fmt, 0)
    try:
        ys, _ = ex.call_all(candidate, pc.inputs, pc.mask, pc.output_shapes, fmt.dtype, timeout)
    except CandidateError as exc:
        return "fail", [str(exc)], math.inf, 1
    standard, best = comparisons
    theirs = {}  # a comparison's outputs, called once for every output judged

    def outputs_of(c):
        if c.name not in theirs:
            theirs[c.name] = ex.call_all(c, pc.inputs, pc.mask, pc.output_shapes, fmt.dtype, timeout)[0]
        return theirs[c.name]

    names = kinds.get(kind).outputs
    reasons, texts, worst, events = [], [], math.nan, 0
    for index, y in enumerate(ys):
        view = pc.output(index)
        tally = measure(view.basis, y, case_index=0)

        def errors(c) -> Tally | None:
            found = measure(view.basis, outputs_of(c)[index], case_index=0)
            return found if found.elements else None

        # The comparisons run only where they can change the verdict (the bounds are never below their floors):
        # the standard algorithms past the defect floor, best practice past min_ulp.
        plain_cond = best_ulp = None
        if tally.elements and tally.max_cond_err > policy.fail_above(fmt, None):
            plain_cond = max((t.max_cond_err for t in map(errors, standard) if t), default=None)
        if tally.elements and tally.max_ulp > policy.min_ulp:
            best_ulp = getattr(errors(best), "max_ulp", None)
        found = policy.judge(kind, fmt, tally, plain_cond, best_ulp)
        reasons += found
        texts += [f"{names[index]}: {r.text}" if len(names) > 1 else r.text for r in found]
        worst = float(np.fmax(worst, tally.max_cond_err))  # (NaN where no output had anything compared)
        broken = {}
        if index == 0 and pc.probes is not None:  # (the invariants: forward row kinds, one output)
            broken = invariants.check(candidate, pc.probes, y, pc.output_shape, timeout, tally.max_ulp, ex)
        # Invariants steer the search (as events) but, as in `softaudit run`, are reported rather than judged.
        events += tally.nan + tally.overflow + tally.mask_leak + tally.nan_not_propagated + sum(broken.values())
    return policy.verdict(reasons), texts, worst, events


def hunt_one(candidate, fmt, budget: float, policy: Policy, timeout: float, ex: Executor) -> Finding:
    kind = candidate.kind
    comparisons = (builtin.standard(kind), builtin.best(kind))
    strategy = kinds.get(kind).part("strategy")(kind, fmt)
    state = {"examples": 0, "last": None}
    start = time.monotonic()

    @settings(max_examples=10**6, deadline=None, database=None, derandomize=bool(os.environ.get("CI")),
              suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.target, Phase.shrink],
              report_multiple_bugs=False)  # fmt: skip
    @given(strategy)
    def probe(drawn):
        if time.monotonic() - start > (budget if state["last"] is None else 1.5 * budget):
            raise _OutOfTime  # (a failure found in time is shrunk for up to half a share more)
        inputs, mask = drawn
        state["examples"] += 1
        try:
            verdict, reasons, error, events = judge(candidate, comparisons, kind, fmt, inputs, mask, policy, timeout, ex)
        except CandidateSkip:
            return
        target(min(error, 1e300) if math.isfinite(error) else 1e300, label="conditioning-scaled error")
        target(float(events), label="events")
        if policy.failed([verdict]):
            state["last"] = (inputs, mask, reasons, error)
            raise AssertionError("; ".join(reasons))

    try:
        probe()
    except (AssertionError, Flaky, _OutOfTime):
        pass
    except Exception as exc:  # a candidate that breaks Hypothesis itself, say; keep what was found
        if state["last"] is None:
            state["last"] = (None, None, [f"hunt stopped: {type(exc).__name__}: {exc}"], math.nan)
    if state["last"] is None:
        seconds = time.monotonic() - start
        return Finding(candidate.name, kind, fmt.name, state["examples"], False, "", 0.0, seconds, None)
    inputs, mask, reasons, error = state["last"]
    if inputs is not None:  # moved to the failure's boundary within half a share more (docs/hunt.md)

        def judged(inputs, mask):
            return judge(candidate, comparisons, kind, fmt, inputs, mask, policy, timeout, ex)

        fails = _shrink.fails_as(reasons[0], judged, policy)
        inputs, mask = _shrink.to_boundary(kind, inputs, mask, fails, time.monotonic() + budget / 2)
        _, reasons, error, _ = judged(inputs, mask)
    seconds, found, reason = time.monotonic() - start, inputs is not None, "; ".join(reasons)
    return Finding(candidate.name, kind, fmt.name, state["examples"], found, reason, error, seconds, None, inputs, mask)


def hunt(targets=None, *, kind=None, dtypes=("float32",), budget: float = 60.0, corpus="reports/corpus",
         policy: Policy | None = None, timeout: float = 10.0, progress=None, device=None, isolation: str = "worker",
         memory_limit_mib: int | None = None) -> list[Finding]:  # fmt: skip
    """Hunt each candidate x dtype for failing inputs within `budget` seconds in all; save failures to `corpus`.

    Targets, kind, device, isolation and memory_limit_mib as softaudit.audit takes them."""
    policy = policy or Policy()
    ex = executor(isolation, memory_limit_mib)
    found = candidates_for(targets, kind, device)
    formats = [format_of(d) for d in dtypes]
    share = budget / max(1, len(found) * len(formats))
    findings = []
    with ex, time_limits() if isinstance(ex, InProcess) else contextlib.nullcontext():
        for candidate in found:
            for fmt in formats:
                findings.append(_hunt_unit(candidate, fmt, share, policy, timeout, ex, corpus))
                if progress:
                    progress(len(findings), len(found) * len(formats), f"{candidate.name} {fmt.name}")
    return findings


def _hunt_unit(candidate, fmt, budget, policy, timeout, ex, corpus) -> Finding:
    """One candidate in one dtype hunted; a failure saved to the corpus."""
    finding = hunt_one(candidate, fmt, budget, policy, timeout, ex)
    if finding.failed and corpus:
        path = _corpus.save(corpus, candidate.name, candidate.kind, fmt.name, finding.inputs, finding.mask,
                            finding.reason, finding.max_cond_err)  # fmt: skip
        finding.corpus_file = str(path)
    return finding
