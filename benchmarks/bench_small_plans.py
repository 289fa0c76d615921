"""`--workers 2` against one process on plans from small to large, as a user runs them (ratios, not a test).

    python benchmarks/bench_small_plans.py [--runs N (8)] [--quick-suite]

Each plan is `softaudit run --kind softmax --suite quick` in one to four dtypes (144 to 576 units), a new process
each time, with `--workers 1` and `--workers 2` alternating (a slow spell on the machine hits both), the cache warm
(a cache folder of its own, filled first, untimed); it prints the medians and their ratio (issue 26: `--workers N`
never slower than serial). --quick-suite adds every built-in over the quick suite in four dtypes (about 30 s a run
on 2 cores), a plan large enough for the workers to start.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DTYPES = ["float32", "bfloat16", "float16", "float64"]


def run(args: list[str], workers: int, folder: Path) -> float:
    """Wall seconds of one `softaudit run` in a new process (its reports into a folder of their own)."""
    env = dict(os.environ, SOFTAUDIT_CACHE_DIR=str(folder / "cache"))
    command = [sys.executable, "-m", "softaudit", "run", *args, "--workers", str(workers)]
    command += ["--out", str(folder / f"out{workers}"), "--format", "csv", "-q"]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):  # (1: the weak built-ins fail by design)
        raise SystemExit(f"softaudit run {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--quick-suite", action="store_true")
    options = parser.parse_args()
    plans = []
    for n in range(1, 5):
        dtypes = [a for d in DTYPES[:n] for a in ("--dtype", d)]
        plans.append((f"{144 * n} softmax units, {n} dtype(s)", ["--kind", "softmax", *dtypes]))
    if options.quick_suite:
        plans.append(("every built-in, four dtypes", []))
    folder = Path(tempfile.mkdtemp(prefix="softaudit-bench-"))
    try:
        run(["--suite", "quick"], 1, folder)  # (fills the cache: untimed)
        print(f"{os.cpu_count()} cores; quick suite, warm; medians of {options.runs} runs each, alternating")
        for label, args in plans:
            times = {1: [], 2: []}
            for i in range(options.runs):
                for workers in (1, 2) if i % 2 == 0 else (2, 1):
                    times[workers].append(run([*args, "--suite", "quick"], workers, folder))
            one, two = statistics.median(times[1]), statistics.median(times[2])
            spread = f"[{min(times[2]):.2f}-{max(times[2]):.2f} against {min(times[1]):.2f}-{max(times[1]):.2f}]"
            print(f"  {label:32s} 1 worker {one:6.2f} s   2 workers {two:6.2f} s   ratio {two / one:.2f}  {spread}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
