"""Speed of the audit, measured in one run (ratios, not a test).

    python benchmarks/bench_audit.py

Targets (issue 3): for a float32 built-in on the long-row family (default suite: rows up to 65536), the audit's
wall time at most 5x the candidate's own time on the same inputs; `quick` over all built-ins and four dtypes
within 20 s on 2 cores. Every float32 softmax built-in is shown, not only the one that flatters the ratio.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

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
    print("first: nothing kept (cases generated, reference and comparison computed, the family written to the")
    print("cache folder); new process: the family mapped from that folder; repeated: a later audit in the same")
    print("process (softaudit.prepare.CACHE_BYTES). Best of 5, interleaved with the candidate's own time.")
    print("own: the candidate's best time, before any audit and between audits (malloc's state differs: the")
    print("smaller sets the ratios).")
    softmaxes = [c for c in candidates.builtins() if c.name.startswith("softmax.")]
    before = {c.name: best_of(lambda c=c: [c.call(x, axis=-1) for x in xs], 10) for c in softmaxes}
    softaudit.audit(suite="quick", kind="softmax", dtypes=["float32", "float64"], cache_dir="off")  # warm-up
    folder = Path(tempfile.mkdtemp(prefix="softaudit-bench-"))
    for cand in softmaxes:
        options = {
            "kind": "softmax",
            "dtypes": ["float32"],
            "suite": "default",
            "families": ["long"],
            "cache_dir": folder,
        }
        shutil.rmtree(folder, ignore_errors=True)
        runner.clear_cache()
        start = time.perf_counter()
        softaudit.audit(cand.call, **options)
        first = time.perf_counter() - start
        own, mapped, wall = float("inf"), float("inf"), float("inf")
        for _ in range(5):  # interleaved, so all see the same state of the machine and of malloc's heap
            own = min(own, best_of(lambda c=cand: [c.call(x, axis=-1) for x in xs], 1))
            runner.clear_cache()  # as a new process starts
            mapped = min(mapped, best_of(lambda c=cand, o=options: softaudit.audit(c.call, **o), 1))
            wall = min(wall, best_of(lambda c=cand, o=options: softaudit.audit(c.call, **o), 1))
        print(f"  {cand.name:27s} own {before[cand.name] * 1e3:4.1f} / {own * 1e3:4.1f} ms", end="")
        own = min(own, before[cand.name])
        print(
            f"  first {first * 1e3:6.1f} ms ({first / own:3.0f}x)  new process {mapped * 1e3:5.1f} ms"
            f" ({mapped / own:4.1f}x)  repeated {wall * 1e3:5.1f} ms ({wall / own:4.1f}x)"
        )
    shutil.rmtree(folder, ignore_errors=True)
    runner.clear_cache()  # all of them in one first audit, nothing kept: what `softaudit run` does
    start = time.perf_counter()
    softaudit.audit([c.call for c in softmaxes], **options | {"cache_dir": "off"})
    together = time.perf_counter() - start
    own = sum(best_of(lambda c=c: [c.call(x, axis=-1) for x in xs], 5) for c in softmaxes)
    print(
        f"  all {len(softmaxes)} in one first audit: {together * 1e3:.0f} ms, {together / own:.1f}x their own"
        f" {own * 1e3:.0f} ms (the cases, reference and comparison shared)"
    )
    runner.clear_cache()
    start = time.perf_counter()
    result = softaudit.audit(suite="quick", cache_dir="off")
    wall = time.perf_counter() - start
    print(
        f"quick suite, {len(candidates.builtins())} built-ins x 4 dtypes: {len(result.table)} rows in {wall:.1f} s"
        f" (target 20 s); candidates' own time {np.nansum(result.table.seconds):.1f} s"
    )


if __name__ == "__main__":
    main()
