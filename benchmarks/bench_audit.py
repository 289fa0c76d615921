"""Speed of the audit, measured in one run (ratios, not a test).

    python benchmarks/bench_audit.py

Targets (issue 3): for a float32 built-in on the long-row family (default suite: rows up to 65536), the audit's
wall time at most 5x the candidate's own time on the same inputs; `quick` over all built-ins and four dtypes
within 20 s on 2 cores. Every float32 softmax built-in is shown, not only the one that flatters the ratio.
"""

from __future__ import annotations

import time

import numpy as np

import softaudit
from softaudit import candidates, reference, runner
from softaudit.cases import FAMILIES


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    fmt = reference.format_of("float32")
    xs = [reference.round_to(c.arrays["x"], "float32") for c in FAMILIES["long"].cases("softmax", fmt, "default")]
    print(f"long family, default suite: {len(xs)} cases, {sum(x.size for x in xs)} elements, float32")
    print("cold: the first audit in a process (cases generated, reference and comparison computed); warm: later")
    print("audits of the same family, which reuse them (softaudit.runner.CACHE_BYTES). Best of 5, interleaved.")
    softaudit.audit(suite="quick", kind="softmax", dtypes=["float32", "float64"])  # warm-up: one-time tables
    for cand in (c for c in candidates.builtins() if c.kind == "softmax"):
        options = {"kind": "softmax", "dtypes": ["float32"], "suite": "default", "families": ["long"]}
        runner.clear_cache()
        start = time.perf_counter()
        softaudit.audit(cand.call, **options)
        cold = time.perf_counter() - start
        own, wall = float("inf"), float("inf")
        for _ in range(5):  # interleaved, so both see the same state of the machine and of malloc's heap
            own = min(own, best_of(lambda c=cand: [c.call(x, axis=-1) for x in xs], 1))
            wall = min(wall, best_of(lambda c=cand: softaudit.audit(c.call, **options), 1))
        print(f"  {cand.name:28s} candidate {own * 1e3:6.1f} ms   audit cold {cold * 1e3:6.1f} ms ({cold / own:5.1f}x)"
              f"   warm {wall * 1e3:6.1f} ms ({wall / own:4.1f}x)")
    runner.clear_cache()
    start = time.perf_counter()
    result = softaudit.audit(suite="quick")
    wall = time.perf_counter() - start
    print(f"quick suite, {len(candidates.builtins())} built-ins x 4 dtypes: {len(result.table)} rows in {wall:.1f} s"
          f" (target 20 s); candidates' own time {np.nansum(result.table.seconds):.1f} s")


if __name__ == "__main__":
    main()
