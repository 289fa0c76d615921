"""A candidate's calls on a family's cases: its own call on each case, and the calls its checks need (the invariants'
transformed inputs, attention's leak probe), all through one executor; judging reads their outputs and calls
nothing itself."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator

import numpy as np

from ..adapters import CandidateError
from ..reproducibility import split_keyword
from ._executor import Executor, loaded


@dataclasses.dataclass
class Called:
    """One case's calls: the candidate's outputs (one per output of its kind), its note, the seconds its own call
    took, its outputs on the invariants' probes (`invariants.Probes.calls`, in order), on the leak probe, and on the
    reproducibility calls (`reproducibility.Reruns.calls`, in order: a tuple of outputs each)."""

    pc: object  # the prepared case (softaudit.prepare.Prepared)
    outputs: tuple
    note: str
    seconds: float
    probed: list
    moved: np.ndarray | None
    reran: list = dataclasses.field(default_factory=list)
    split: list = dataclasses.field(default_factory=list)  # (options, outputs) of each `Reruns.split_calls` call


#: An isolated unit's calls go to the worker in round trips holding at most about this many bytes of inputs and
#: outputs (a case whose calls hold more goes alone): a round trip per unit, not two per case, since each round
#: trip costs the worker's wake-up, the pipe and the arena, and the main job would make tens of thousands.
BATCH_BYTES = 64 << 20


@dataclasses.dataclass
class _Plan:
    """One case's calls in order: the candidate's own, the invariants' probes, the leak probe, the reruns and the
    key splits (as Executor.call_many takes them), and where each group starts."""

    pc: object
    calls: list
    probing: int  # probes' calls, after the own call
    leak: bool
    reran: int
    splits: list  # the options of each split call

    @classmethod
    def of(cls, pc, probes: bool, keyword: str | None, problem: bool = False) -> _Plan:
        mask, options = pc.problem if problem else (pc.mask, pc.case.options)
        options = dict(options) or None  # (the case's keywords: cross_entropy's reduction, ...)
        own = [(pc.inputs, mask, pc.output_shapes, options)]
        checks = [] if not probes or pc.probes is None else pc.probes.calls(pc.output_shape)
        checks = [(arrays, mask, (shape,), options) for arrays, mask, shape in checks]
        leak = probes and pc.leak_probe is not None
        if leak:  # (every output of the kind; the first is compared: attention_lse's o)
            checks.append((pc.leak_probe[0], pc.mask, pc.output_shapes, options))
        reran = splits = []
        if probes and pc.reruns is not None:
            reran = [(*call, options) for call in pc.reruns.calls(pc.output_shapes)]
            splits = pc.reruns.split_calls(pc.output_shapes, keyword) if keyword else []
        return cls(pc, own + checks + reran + splits, len(checks) - leak, leak, len(reran), [c[3] for c in splits])

    @property
    def nbytes(self) -> int:
        itemsize = np.dtype(self.pc.fmt.dtype).itemsize
        inputs = sum(a.nbytes for arrays, mask, _, _ in self.calls for a in (*arrays.values(), mask) if a is not None)
        return inputs + sum(math.prod(shape) * itemsize for _, _, shapes, _ in self.calls for shape in shapes)

    def called(self, answers: list) -> Called:
        """The case's Called from its calls' answers, (outputs, note, seconds) each, in `calls`' order."""
        (ys, note, seconds), outs = answers[0], [outputs for outputs, _, _ in answers[1:]]
        probed = [out[0] for out in outs[: self.probing]]
        moved = outs[self.probing][0] if self.leak else None
        rest = outs[self.probing + self.leak :]
        split = list(zip(self.splits, rest[self.reran :]))
        return Called(self.pc, ys, note, seconds, probed, moved, rest[: self.reran], split)


def calls(
    candidate, prepared: list, timeout, ex: Executor, probes: bool = True, reuse: bool = True, problem: bool = False
) -> Iterator[Called]:
    """The candidate called on each prepared case in turn, a Called for each; CandidateError or CandidateSkip from
    the first call that fails, as they are read. probes: make the checks' calls too (the comparisons need none). An
    executor with round trips (`Executor.batches`: a worker) gets a unit's calls a batch at a time (BATCH_BYTES),
    each call with its own time limit; the others, one case at a time, as they are read. A unit whose calls fit one
    batch has them sent before this returns (`Executor.send_many`: a worker makes them while the audit judges the
    unit before). The iterator's `overlaps` says whether the next unit's calls may be sent before these are read
    (False for a unit of several batches, each sent as it is read: the calls then come in the plan's order).

    reuse (in process): the candidate's own call reuses its input buffers (adapters.call_all's `reuse`: large
    inputs copied without page faults), so an output that is its input is valid only until the next reusing call
    (the next case's); the checks' calls get copies of their own. False: every output stays valid.

    problem: call with each case's exact problem (`Prepared.problem`: the conventions a candidate declared, in the
    kind's defaults' terms), as the comparisons are called; else with the case's own mask and options."""
    keyword = split_keyword(_callable(candidate)) if probes else None
    plans = (_Plan.of(pc, probes, keyword, problem) for pc in prepared)
    if not ex.batches:
        return _Made(_one_by_one(candidate, plans, timeout, ex, reuse), True)
    batches = _batches(plans)
    first, more = next(batches, (None, False))
    if more:
        return _Made(_answered(candidate, first, None, batches, timeout, ex), False)
    sent = None if first is None else _send(candidate, first, timeout, ex)
    return _Made(_answered(candidate, first, sent, batches, timeout, ex), True)


class _Made:
    """A unit's Called as they are read, and whether the next unit's calls may be sent before they are."""

    def __init__(self, called: Iterator[Called], overlaps: bool):
        self._called, self.overlaps = called, overlaps

    def __iter__(self):
        return self

    def __next__(self) -> Called:
        return next(self._called)


def _one_by_one(candidate, plans, timeout, ex: Executor, reuse: bool) -> Iterator[Called]:
    """Each plan's Called: its own call, then its checks' calls in one call_many."""
    for plan in plans:
        dtype = plan.pc.fmt.dtype
        start = time.perf_counter()
        arrays, mask, shapes, options = plan.calls[0]
        ys, note = ex.call_all(candidate, arrays, mask, shapes, dtype, timeout, reuse, options)
        own = (ys, note, time.perf_counter() - start)
        checks = ex.call_many(candidate, plan.calls[1:], dtype, timeout) if len(plan.calls) > 1 else []
        yield plan.called([own, *checks])


def _callable(candidate):
    """The candidate with its callable, loaded here where it was sent by its source (a unit in a worker process:
    its signature says which checks it takes); as it is where it does not load (its call then says why)."""
    if candidate.call is not None:
        return candidate
    try:
        return loaded(candidate)
    except CandidateError:
        return candidate


def _batches(plans) -> Iterator[tuple[list, bool]]:
    """The plans in batches of at most about BATCH_BYTES of calls (a plan whole in one), and whether more follow."""
    batch, held = [], 0
    for plan in plans:
        size = plan.nbytes
        if batch and held + size > BATCH_BYTES:
            yield batch, True
            batch, held = [], 0
        batch.append(plan)
        held += size
    if batch:
        yield batch, False


def _send(candidate, batch: list, timeout, ex: Executor):
    return ex.send_many(candidate, [c for p in batch for c in p.calls], batch[0].pc.fmt.dtype, timeout)


def _answered(candidate, batch, sent, batches, timeout, ex: Executor) -> Iterator[Called]:
    """Each batch's Called, a round trip a batch, each sent as it is read (the first sent already, or None)."""
    while batch is not None:
        answers = (sent or _send(candidate, batch, timeout, ex))()
        for p in batch:
            yield p.called(answers[: len(p.calls)])
            answers = answers[len(p.calls) :]
        batch, sent = next(batches, (None, False))[0], None
