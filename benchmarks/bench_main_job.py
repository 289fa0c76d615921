"""The main job's cost (docs/benchmarks.md): `softaudit run` cold and warm, serial and on both cores, and the cache
it writes, measured in one run (issue 26's goals: 30 s cold, 10 s warm, 300 MB; not a test).

    python benchmarks/bench_main_job.py [--rounds N] [--write]

Each configuration runs the README's main job (`softaudit run`: the built-ins, the default suite, gated against
reports/baseline.json) as a new process, with its own fresh cache folder: cold is its first run there (references and
comparisons computed and kept), warm the runs after (read back). The project's default (`workers = "auto"` in
pyproject.toml: a process per core, softaudit's and workers) and `--workers 1` (softaudit's alone) are interleaved,
round by round, so the machine's noise falls on both. Printed: wall seconds per run, the cache folder's size and
file count after the cold run, and the largest peak memory of any one process so far (not the sum over worker
processes).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _record

ROOT = Path(__file__).resolve().parents[1]
# The project's config runs the main job with `workers = "auto"` (every core); `--workers 1` is softaudit's process.
CONFIGS = {"auto": [], "--workers 1": ["--workers", "1"]}


def run(cache: Path, out: Path, extra: list) -> tuple[float, float]:
    """(wall seconds, the largest peak resident MiB of any process run so far) for one main job; exit on a failed
    gate."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "softaudit", "run", "-q", "--cache-dir", str(cache), "--out", str(out), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"the main job failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def size(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.iterdir() if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="warm runs per configuration (default 2)")
    parser.add_argument("--write", action="store_true", help="put the table in docs/benchmarks.md")
    args = parser.parse_args()
    rounds, rows = args.rounds, {}
    work = Path(tempfile.mkdtemp(prefix="bench-main-job-"))
    try:
        caches = {name: work / name.replace(" ", "").replace("-", "") for name in CONFIGS}
        print(f"{os.cpu_count()} CPUs; the main job from {ROOT}")
        for name, extra in CONFIGS.items():
            seconds, peak = run(caches[name], work / "out", extra)
            held, count = size(caches[name])
            print(
                f"{name:12s} cold {seconds:6.1f} s   cache {held / 1e6:.0f} MB ({held / 2**20:.0f} MiB) in {count} "
                f"files   largest process so far {peak:.0f} MiB"
            )
            rows[name] = [name, f"{seconds:.1f} s", [], f"{held / 1e6:.0f} MB in {count} files", f"{peak:.0f} MiB"]
        for i in range(rounds):
            for name, extra in CONFIGS.items():
                seconds, _ = run(caches[name], work / "out", extra)
                print(f"{name:12s} warm {seconds:6.1f} s   (round {i + 1})")
                rows[name][2].append(f"{seconds:.1f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.write:
        for row in rows.values():
            row[2] = ", ".join(row[2])
        body = (
            "The README's main job (`softaudit run`: the built-ins, the default suite, gated against"
            " reports/baseline.json), each configuration in a new process with its own fresh cache folder: cold is its"
            ' first run there, warm the runs after. `auto` is the project\'s `workers = "auto"` (a process per core);'
            " the peak is the largest of any one process so far.\n\n"
            + _record.table(["workers", "cold", "warm (each round)", "cache folder", "largest process"], rows.values())
        )
        _record.write("bench_main_job", "The main job", _record.command("bench_main_job.py"), body)


if __name__ == "__main__":
    main()
