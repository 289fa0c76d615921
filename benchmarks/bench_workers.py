"""What running units on worker processes buys, measured in one run (ratios, not a test).

    python benchmarks/bench_workers.py [--suite quick|default] [--rounds N] [--write]

An audit of the built-ins (the kinds of the default run, float32 and bfloat16) with 1 (this process), 2 and 8
worker processes (`softaudit.audit(workers=N)`), interleaved, best of `rounds`: warm (prepared families kept in a
cache folder, filled once untimed: the calls and judging) and cold (nothing kept: references and comparisons
computed, which the workers share out too). A machine with 2 cores cannot show 8 workers, so 8 is also simulated:
each unit's own time in the serial run, dealt to 8 workers in the plan's order (each unit to the first free
worker, as the pool's queue does), plus the pool's measured start. Last, how the cost grows with the number of
units: the same audit with 1, 2, 4 and 8 softmax candidates (12 families each), serial and on 2 workers.
"""

from __future__ import annotations

import argparse
import heapq
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import _record

import softaudit
from softaudit import candidates, prepare, runner

DTYPES = ["float32", "bfloat16"]


def timed(options: dict, workers: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and every process it started) for one audit, the in-process
    cache emptied first, as a new process starts. CPU time does not depend on what else the machine runs: it
    says what running on workers costs, and so what it gives on idle cores."""
    prepare.clear_cache()
    before = cpu_seconds()
    start = time.perf_counter()
    softaudit.audit(workers=workers, **options)
    return time.perf_counter() - start, cpu_seconds() - before


def cpu_seconds() -> float:
    """CPU seconds (user and system) of this process and of its children that have ended, theirs included."""
    mine, theirs = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + theirs.ru_utime + theirs.ru_stime


def best(options: dict, counts: list[int], rounds: int) -> dict[int, tuple[float, float]]:
    """The best (wall, CPU) of `rounds` per worker count, the counts interleaved (a slow spell on the machine hits
    all)."""
    found = dict.fromkeys(counts, (float("inf"), float("inf")))
    for _ in range(rounds):
        for workers in counts:
            found[workers] = min(found[workers], timed(options, workers))
    return found


def unit_times(options: dict) -> list[float]:
    """Each unit's seconds in a serial run, in the plan's order (the unit task timed where it runs)."""
    seconds, real = [], runner._unit_task

    def timing(*args, **kwargs):
        start = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - start)

    runner._unit_task = timing
    try:
        timed(options, 1)
    finally:
        runner._unit_task = real
    return seconds


def dealt(seconds: list[float], workers: int) -> float:
    """The time until the last unit ends when units are dealt, in order, each to the first worker free."""
    free = [0.0] * workers
    for cost in seconds:
        heapq.heappush(free, heapq.heappop(free) + cost)
    return max(free)


def pool_start() -> float:
    """Seconds to start a worker process as Local's lanes do and run a first task there (what Local pays once per
    audit that starts its workers)."""
    from softaudit.execute._pool import worker_lane

    start = time.perf_counter()
    with worker_lane() as worker:
        worker.submit(os.getpid).result()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="quick", choices=["quick", "default"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--write", action="store_true", help="put the tables in docs/benchmarks.md")
    args = parser.parse_args()
    measured, simulated, grown = [], [], []
    targets = candidates.builtins()  # (every kind's built-ins are in the default run)
    folder = Path(tempfile.mkdtemp(prefix="softaudit-bench-"))
    warm = {"targets": targets, "dtypes": DTYPES, "suite": args.suite, "cache_dir": folder}
    cold = warm | {"cache_dir": "off"}
    print(
        f"{len(targets)} built-ins, {args.suite} suite, {' and '.join(DTYPES)}; {os.cpu_count()} cores; "
        f"best of {args.rounds}, interleaved"
    )
    timed(warm, 1)  # (fills the cache folder: untimed)
    print("wall seconds (speed-up), CPU seconds of every process (ratio to 1 worker's)")
    for label, options in (("warm: families kept, calls and judging", warm), ("cold: nothing kept", cold)):
        found = best(options, [1, 2, 8], args.rounds)
        (wall, cpu), cells = found[1], []
        for workers in (2, 8):
            w, c = found[workers]
            cells.append(f"{workers} workers {w:6.1f} s ({wall / w:.2f}x), cpu {c:6.1f} s ({c / cpu:.2f})")
        print(f"{label:40s} 1 worker {wall:6.1f} s, cpu {cpu:6.1f} s   " + "   ".join(cells))
        for workers in (1, 2, 8):
            w, c = found[workers]
            measured.append([label, workers, f"{w:.1f} s", f"{wall / w:.2f}x", f"{c:.1f} s", f"{c / cpu:.2f}"])
    seconds, start = unit_times(warm), pool_start()
    serial = sum(seconds)
    print(
        f"simulated (warm): {len(seconds)} units, {serial:.1f} s in units, the largest {max(seconds):.2f} s; "
        f"pool start {start:.2f} s"
    )
    for workers in (2, 4, 8, 16):
        print(
            f"  {workers:2d} workers {dealt(seconds, workers) + start:6.1f} s "
            f"({serial / (dealt(seconds, workers) + start):.2f}x)"
        )
        simulated.append([workers, f"{dealt(seconds, workers) + start:.1f} s"])
        simulated[-1].append(f"{serial / (dealt(seconds, workers) + start):.2f}x")
    softmaxes = [c for c in candidates.builtins() if c.kind == "softmax"][:8]
    growth = {"dtypes": ["float32"], "suite": args.suite, "cache_dir": folder}
    print("cost by units (softmax built-ins, float32, 12 families each; warm), ratio to 1 candidate:")
    base = {}
    for count in (1, 2, 4, 8):
        found = {
            workers: wall
            for workers, (wall, _) in best(growth | {"targets": softmaxes[:count]}, [1, 2], args.rounds).items()
        }
        base = base or found
        print(
            f"  {count} candidate(s), {12 * count:3d} units: 1 worker {found[1]:5.2f} s ({found[1] / base[1]:4.1f}x)"
            f"   2 workers {found[2]:5.2f} s ({found[2] / base[2]:4.1f}x)"
        )
        grown.append([count, 12 * count, f"{found[1]:.2f} s ({found[1] / base[1]:.1f}x)"])
        grown[-1].append(f"{found[2]:.2f} s ({found[2] / base[2]:.1f}x)")
    shutil.rmtree(folder, ignore_errors=True)
    if args.write:
        body = (
            f"{len(targets)} built-ins, the {args.suite} suite, {' and '.join(DTYPES)}; best of {args.rounds},"
            " interleaved. Wall seconds (speed-up over 1 worker) and the CPU seconds of every process (ratio to 1"
            " worker's).\n\n"
            + _record.table(["audit", "workers", "wall", "speed-up", "CPU", "CPU ratio"], measured)
            + f"\n\nSimulated, warm: the serial run's {len(seconds)} units ({serial:.1f} s, the largest"
            f" {max(seconds):.2f} s) dealt to N workers in the plan's order, plus the pool's measured start"
            f" ({start:.2f} s).\n\n"
            + _record.table(["workers", "wall", "speed-up"], simulated)
            + "\n\nCost by units (softmax built-ins, float32, 12 families each, warm), ratio to 1 candidate:\n\n"
            + _record.table(["candidates", "units", "1 worker", "2 workers"], grown)
        )
        _record.write("bench_workers", "Worker processes", _record.command("bench_workers.py"), body)


if __name__ == "__main__":
    main()
