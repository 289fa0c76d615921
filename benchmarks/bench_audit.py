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
from softaudit import candidates, reference
from softaudit.cases import FAMILIES


def own_time(candidate, xs, repeat=3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for x in xs:
            candidate.call(x, axis=-1)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    fmt = reference.format_of("float32")
    xs = [reference.round_to(c.arrays["x"], "float32") for c in FAMILIES["long"].cases("softmax", fmt, "default")]
    print(f"long family, default suite: {len(xs)} cases, {sum(x.size for x in xs)} elements, float32")
    softaudit.audit(suite="quick", kind="softmax", dtypes=["float32", "float64"])  # warm-up: one-time tables
    for cand in (c for c in candidates.builtins() if c.kind == "softmax"):
        own = own_time(cand, xs)
        start = time.perf_counter()
        softaudit.audit(cand.call, kind="softmax", dtypes=["float32"], suite="default", families=["long"])
        wall = time.perf_counter() - start
        print(f"  {cand.name:28s} candidate {own * 1e3:7.1f} ms   audit {wall * 1e3:7.1f} ms   ratio {wall / own:5.1f}x")
    start = time.perf_counter()
    result = softaudit.audit(suite="quick")
    wall = time.perf_counter() - start
    print(f"quick suite, {len(candidates.builtins())} built-ins x 4 dtypes: {len(result.table)} rows in {wall:.1f} s"
          f" (target 20 s); candidates' own time {np.nansum(result.table.seconds):.1f} s")


if __name__ == "__main__":
    main()
