"""What the main job's time is made of, and so the least it could take: the built-ins' calls timed one by one (not a
test).

    python benchmarks/bench_floor.py [--warm-only] [--write]

Runs the README's main job (`softaudit run`: the built-ins, the default suite, reports/baseline.json) in this
process, with `--workers 1 --isolation none`, so that every call is made here and timed: cold in a fresh cache
folder, then warm from it. Each call is counted under what made it (execute/_calls.py's plan of a case): the
candidate's own call, the invariants' probes, attention's leak probe, the reproducibility reruns and the key
splits, and (cold) the comparisons' calls, the standard and best-practice methods whose errors set a family's
bounds. The rest of the process's CPU is softaudit's own: reading or computing the references, the measures and
their bases, the verdicts and the reports.

The calls are the floor: they are the audit (the candidates' outputs it judges, and the calls issue 26's
reproducibility measures and the invariants need), so on N cores no schedule makes the job shorter than their sum
over N, whatever softaudit's own part costs.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import _record
from bench_workers import cpu_seconds  # (run as a script: benchmarks/ is on the path)

from softaudit import cli, judge
from softaudit.execute import _calls

ROOT = Path(__file__).resolve().parents[1]
GROUPS = ("own", "invariants' probes", "leak probe", "reruns", "key splits")
COMPARED = "comparisons"  # (the standard and best-practice methods' own calls that set a family's bounds: cold)


def timed_calls(spent: collections.Counter, counted: collections.Counter):
    """A stand-in for _calls._one_by_one (the in-process path) that makes the same calls in the same order, each
    group of a case's calls timed apart."""

    def one_by_one(candidate, plans, timeout, ex, reuse):
        for plan, probes in plans:
            dtype = plan.pc.fmt.dtype
            start = time.perf_counter()
            arrays, mask, shapes, options = plan.calls[0]
            ys, note = ex.call_all(candidate, arrays, mask, shapes, dtype, timeout, reuse, options)
            own = (ys, note, time.perf_counter() - start)
            spent["own" if probes else COMPARED] += own[2]
            counted["own" if probes else COMPARED] += 1
            sizes = (plan.probing, int(plan.leak), plan.reran, len(plan.splits))
            answers, at = [own], 1
            for group, size in zip(GROUPS[1:], sizes):
                if size:
                    start = time.perf_counter()
                    answers += ex.call_many(candidate, plan.calls[at : at + size], dtype, timeout)
                    spent[group] += time.perf_counter() - start
                    counted[group] += size
                at += size
            yield plan.called(answers)

    return one_by_one


DIAGNOSIS = "diagnosis"  # (softaudit's own: the bug models run on the warning and failing rows, judge._finding)


def timed_diagnosis(spent: collections.Counter, counted: collections.Counter):
    finding = judge._finding

    def timed(*args):
        start = time.process_time()
        try:
            return finding(*args)
        finally:
            spent[DIAGNOSIS] += time.process_time() - start
            counted[DIAGNOSIS] += args[6] in ("warn", "fail")  # (the verdict: the rows diagnosed)

    return timed


def tagged(of):
    """_Plan.of that says, beside the plan, whether the checks were asked for (False: a comparison's calls)."""
    return lambda pc, probes, keyword, problem=False: (of(pc, probes, keyword, problem), probes)


def main_job(cache: Path, out: Path) -> tuple[float, float, collections.Counter, collections.Counter]:
    """(wall seconds, CPU seconds, seconds per group of calls, calls per group) of one main job in this process."""
    spent, counted = collections.Counter(), collections.Counter()
    original, of, finding = _calls._one_by_one, _calls._Plan.__dict__["of"], judge._finding
    _calls._one_by_one, _calls._Plan.of = timed_calls(spent, counted), tagged(_calls._Plan.of)
    judge._finding = timed_diagnosis(spent, counted)
    args = ["run", "-q", "--workers", "1", "--isolation", "none", "--cache-dir", str(cache), "--out", str(out)]
    wall, used = time.perf_counter(), cpu_seconds()
    try:
        with contextlib.chdir(ROOT):
            cli.main(args, prog_name="softaudit", standalone_mode=False)
    except SystemExit as exc:  # (`run` exits with the gate's status)
        if exc.code:
            sys.exit(f"the main job failed ({exc.code})")
    finally:
        _calls._one_by_one, _calls._Plan.of, judge._finding = original, of, finding
    return time.perf_counter() - wall, cpu_seconds() - used, spent, counted


def report(name: str, wall: float, used: float, spent: collections.Counter, counted: collections.Counter) -> list:
    calls = sum(v for k, v in spent.items() if k != DIAGNOSIS)
    print(f"{name}: {wall:.1f} s wall, {used:.1f} s CPU")
    for group in (*GROUPS, COMPARED):
        print(f"  {group:20s} {spent[group]:6.1f} s in {counted[group]:6d} calls")
    print(f"  {'the calls':20s} {calls:6.1f} s ({calls / used:.0%} of the CPU)")
    print(f"  {'softaudit own part':20s} {used - calls:6.1f} s (references, measures, verdicts, reports)")
    print(f"  {'of which diagnosis':20s} {spent[DIAGNOSIS]:6.1f} s CPU on {counted[DIAGNOSIS]} warn and fail rows")
    for cores in sorted({2, os.cpu_count() or 1}):
        print(f"  on {cores} cores, at best: the calls alone {calls / cores:.1f} s, the whole {used / cores:.1f} s")
    rows = [[f"{name}: {group}", f"{counted[group]:,}", f"{spent[group]:.1f} s"] for group in (*GROUPS, COMPARED)]
    rows.append([f"{name}: every call", f"{sum(counted[g] for g in (*GROUPS, COMPARED)):,}", f"{calls:.1f} s"])
    rows.append([f"{name}: softaudit's own part", "", f"{used - calls:.1f} s"])
    rows.append([f"{name}: of which diagnosis ({counted[DIAGNOSIS]} rows)", "", f"{spent[DIAGNOSIS]:.1f} s"])
    rows.append([f"{name}: the process", "", f"{used:.1f} s CPU, {wall:.1f} s wall"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-only", action="store_true", help="fill the cache untimed, then time a warm run")
    parser.add_argument("--write", action="store_true", help="put the table in docs/benchmarks.md")
    args = parser.parse_args()
    work, rows = Path(tempfile.mkdtemp(prefix="bench-floor-")), []
    try:
        cold = main_job(work / "cache", work / "out")
        if not args.warm_only:
            rows += report("cold", *cold)
        rows += report("warm", *main_job(work / "cache", work / "out"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.write:
        body = (
            "The main job in one process (`--workers 1 --isolation none`), every call timed by what made it; the rest"
            " of the process's CPU is softaudit's own (references, measures, verdicts, reports). On N cores no"
            " schedule makes the job shorter than its calls over N.\n\n"
            + _record.table(["what", "calls", "CPU seconds"], rows)
        )
        _record.write("bench_floor", "Where the main job's time goes", _record.command("bench_floor.py"), body)


if __name__ == "__main__":
    sys.exit(main())
