"""A candidate's calls on a family's cases: its own call on each case, and the calls its checks need (the invariants'
transformed inputs, attention's leak probe), all through one executor; judging reads their outputs and calls
nothing itself."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import numpy as np

from ..reproducibility import split_keyword
from ._executor import Executor


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


def calls(
    candidate, prepared: list, timeout, ex: Executor, probes: bool = True, reuse: bool = True
) -> Iterator[Called]:
    """The candidate called on each prepared case in turn, a Called for each; CandidateError or CandidateSkip from
    the first call that fails. probes: make the checks' calls too (the comparisons need none).

    reuse: the candidate's own call reuses its input buffers (adapters.call_all's `reuse`: large inputs
    copied without page faults), so an output that is its input is valid only until the next reusing call (the
    next case's); the checks' calls get copies of their own. False: every output stays valid."""
    keyword = split_keyword(candidate) if probes else None
    for pc in prepared:
        dtype = pc.fmt.dtype
        start = time.perf_counter()
        ys, note = ex.call_all(candidate, pc.inputs, pc.mask, pc.output_shapes, dtype, timeout, reuse)
        seconds = time.perf_counter() - start
        # The checks' calls, in one round trip to a worker: the invariants' probes (forward row kinds: one output),
        # the leak probe (forward attention), the reruns.
        checks = [] if not probes or pc.probes is None else pc.probes.calls(pc.output_shape)
        probing = len(checks)
        leak = probes and pc.leak_probe is not None
        if leak:
            checks.append((pc.leak_probe[0], pc.mask, pc.output_shape))
        checks = [(arrays, mask, (shape,)) for arrays, mask, shape in checks]
        reran = splits = []
        if probes and pc.reruns is not None:
            reran = pc.reruns.calls(pc.output_shapes)
            splits = pc.reruns.split_calls(pc.output_shapes, keyword) if keyword else []
        outs = ex.call_many(candidate, checks + reran + splits, dtype, timeout) if checks or reran else []
        probed = [out[0] for out in outs[:probing]]
        moved = outs[probing][0] if leak else None
        rerun_outs = outs[probing + leak : probing + leak + len(reran)]
        split = [(call[3], out) for call, out in zip(splits, outs[probing + leak + len(reran) :])]
        yield Called(pc, ys, note, seconds, probed, moved, rerun_outs, split)
