"""The flake matrix (issue 24): the main job gives the same table, and the gate passes, whatever ran it.

Runs `softaudit run` (the built-ins, the default suite, against reports/baseline.json) under each configuration
below and compares every results.csv with the first run's, every column but `seconds`, cell for cell as text (so
bit for bit: the CSV writes each float's shortest round-trip form):

  native, cold (a fresh cache folder)     the reference table
  as another CPU, the same cache folder   numpy without AVX2 / AVX-512 dispatch, OpenBLAS's Sandybridge kernels:
                                          the gate must pass and every verdict match; its measures may differ in
                                          the last digits (the exact references' float64 approximations use
                                          numpy's exp and BLAS, which round otherwise there)
  native, the cache warmed as that CPU    identical (the cache keeps each CPU's files apart)
  native, OPENBLAS_NUM_THREADS=1 and 4    identical (candidates run with one BLAS thread)
  native, --cache-dir off                 identical
  native, --workers 1                     identical (the project's config runs the others on every core)
  a Dask cluster started as Dask's docs   identical (2 daemonic workers under nannies, Dask's defaults)
  show it

Usage: python .ci/flake_matrix.py [--own-baseline] [TARGET ...] [RUN OPTION ...] (default: the built-ins against
the configured baseline; --own-baseline: the first run writes the baseline the others are gated against, for targets
and options the committed baselines were not made with; other options, such as --suite quick, go to every run).
Exit 1 on any difference or failed gate.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

BIN = Path(sys.executable).parent
ANOTHER_CPU = (
    {"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR", "OPENBLAS_CORETYPE": "Sandybridge"}
    if platform.machine() == "x86_64"
    else {}  # (those names are x86's: elsewhere the run is native once more)
)


def run(name: str, work: Path, targets: list, *args: str, env: dict | None = None) -> tuple[str, pd.DataFrame]:
    """One `softaudit run`: (name, its table without seconds); exit on a failed gate."""
    out = work / name.replace(" ", "_").replace(",", "")
    start = time.monotonic()
    done = subprocess.run(
        [BIN / "softaudit", "run", *targets, "--out", str(out), "--format", "csv", "-q", *args],
        env=os.environ | (env or {}),
    )
    print(f"{name}: exit {done.returncode} in {time.monotonic() - start:.0f} s", flush=True)
    if done.returncode != 0:
        sys.exit(f"flake matrix: the gate failed for {name}")
    table = pd.read_csv(out / "results.csv", dtype=str, keep_default_na=False)
    return name, table.drop(columns="seconds")


def differences(reference: pd.DataFrame, other: pd.DataFrame, columns=None) -> list[str]:
    """The cells that differ, as lines naming the row and column (a few of them)."""
    if reference.shape != other.shape or list(reference.columns) != list(other.columns):
        return [f"the tables differ in shape: {reference.shape} and {other.shape}"]
    columns = columns or list(reference.columns)
    differ = reference[columns] != other[columns]
    lines = []
    for i, col in zip(*differ.to_numpy().nonzero()):
        row, column = reference.iloc[i], columns[col]
        before, after = reference[column].iat[i], other[column].iat[i]
        lines.append(f"{row['candidate']} | {row['dtype']} | {row['family']}: {column} {before} -> {after}")
    return lines


def dask_cluster(work: Path):
    """A scheduler and two workers started as Dask's docs show (`dask scheduler`, `dask worker`: nannies, daemonic
    workers); (its address, the processes to stop)."""
    scheduler_file = work / "scheduler.json"
    common = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [
        subprocess.Popen(
            [BIN / "dask", "scheduler", "--scheduler-file", scheduler_file, "--port", "0", "--dashboard-address", ":0"],
            **common,
        )
    ]
    for _ in range(60):
        if scheduler_file.exists():
            break
        time.sleep(1)
    procs += [
        subprocess.Popen([BIN / "dask", "worker", "--scheduler-file", scheduler_file, "--nthreads", "1"], **common)
        for _ in range(2)
    ]
    address = json.loads(scheduler_file.read_text())["address"]
    from distributed import Client

    with Client(address, timeout=60) as client:
        client.wait_for_workers(2, timeout=120)
    return address, procs


def main(argv: list) -> int:
    work = Path(tempfile.mkdtemp(prefix="flake-matrix-"))
    cache = str(work / "cache")
    targets = [a for a in argv if a != "--own-baseline"]  # (the targets, then the options for every run)
    builtins = not targets or targets[0].startswith("-")
    if "--own-baseline" in argv:
        baseline = str(work / "baseline.json")
        native = run("native, cold", work, targets, "--cache-dir", cache, "--update-baseline", "--baseline", baseline)
        targets += ["--baseline", baseline]
    else:
        native = run("native, cold", work, targets, "--cache-dir", cache)
    other_cpu = run("as another CPU", work, targets, "--cache-dir", cache, env=ANOTHER_CPU)
    same = [
        run(
            "native, cache warmed as another CPU, OPENBLAS_NUM_THREADS=4",
            work,
            targets,
            "--cache-dir",
            cache,
            env={"OPENBLAS_NUM_THREADS": "4"},
        ),
        run("native, OPENBLAS_NUM_THREADS=1", work, targets, "--cache-dir", cache, env={"OPENBLAS_NUM_THREADS": "1"}),
        run("native, --cache-dir off", work, targets, "--cache-dir", "off"),
        run("native, --workers 1", work, targets, "--cache-dir", cache, "--workers", "1"),
    ]
    address, procs = dask_cluster(work)
    try:
        same.append(
            run("a default Dask cluster of 2 workers", work, targets, "--cache-dir", cache, "--scheduler", address)
        )
    finally:
        for proc in procs[::-1]:
            proc.terminate()
    failed = False
    for name, table in same:
        found = differences(native[1], table)
        print(f"{name}: {len(found)} cell(s) differ from native, cold")
        for line in found[:10]:
            print(f"  {line}")
        failed |= bool(found)
    found = differences(native[1], other_cpu[1], ["verdict"])
    measures = len(differences(native[1], other_cpu[1]))
    print(f"as another CPU: {len(found)} verdict(s) differ from native ({measures} cell(s) in all)")
    for line in found[:10]:
        print(f"  {line}")
    # The built-ins compute with portable arithmetic: their verdicts may not move with the CPU. Other code's may
    # (numpy's SIMD functions and the BLAS kernels round otherwise): for it the gate's pass is the test.
    failed |= bool(found) and builtins
    print("flake matrix: " + ("FAILED" if failed else "every table the same"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
