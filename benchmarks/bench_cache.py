"""The cache folder's size, and what reading it back costs, measured in one run (numbers, not a test).

    python benchmarks/bench_cache.py [--suite quick|default] [--folder DIR] [--write]

Target (issue 26): the main job's default suite (every built-in family of every kind in four dtypes) keeps at most
300 MB in the cache folder. The families are prepared into an empty folder (`--folder`, else a temporary one), as
`softaudit run` prepares them: one plain built-in per kind audited, which computes every reference and runs every
comparison. Printed: the folder's bytes, files and bytes per input element; the same families written as the
layout before issue 26 kept them (the float64 originals, the whole reference with its error bounds and tiers, every
array of the measures' bases, the invariants' probes), for comparison; and the seconds a new process spends
reading each back until every measure's arrays are in hand (mapping and touching the old layout's pages; mapping
the new one and deriving what it no longer keeps: ulps, masks, conditioning scales, probes). `--write` puts the
table in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _record
import numpy as np

import softaudit
from softaudit import _store, candidates, kinds, prepare

DTYPES = ["float16", "bfloat16", "float32", "float64"]


def fill(folder: Path, suite: str) -> float:
    """Every family of every kind in DTYPES prepared into folder; the seconds it took."""
    start = time.perf_counter()
    for kind in kinds.KINDS:
        prepare.clear_cache()
        softaudit.audit(candidates.plain(kind), kind=kind, dtypes=DTYPES, suite=suite, cache_dir=folder)
    return time.perf_counter() - start


def old_layout(kept: prepare.PreparedFamily) -> dict:
    """A family as the layout before issue 26 pickled it: each case's every attribute, its originals included (as
    float64: the same size), and the comparisons."""
    cases = []
    for pc in kept.prepared:
        pc.complete()
        case = dataclasses.replace(pc.case, arrays=dict(pc.case.arrays))
        refs = [
            r.__class__(r.value, r.hi, r.lo, r.hi.copy(), np.zeros(r.hi.shape, np.int8), r.undefined, r.fine)
            for r in pc.references
        ]  # (err and tier: float64 and int8 per element, as computed)
        cases.append(
            {
                "case": case,
                "inputs": pc.inputs,
                "mask": pc.mask,
                "references": refs,
                "bases": pc.bases,
                "probes": pc.probes,
                "leak_probe": pc.leak_probe,
            }
        )
    return {"prepared": cases, "comparisons": (kept.plain, kept.best, kept.others)}


READ = """
import sys, time
from pathlib import Path
import numpy as np
from softaudit import _store
start = time.perf_counter()
for path in sorted(Path(sys.argv[1]).glob("*.pkl")):
    fam = _store.load(path)
    for pc in (fam["prepared"] if isinstance(fam, dict) else fam.prepared):
        if isinstance(pc, dict):  # the old layout: every array mapped; touch one byte per page
            arrays = [a for b in pc["bases"] for a in vars(b).values() if isinstance(a, np.ndarray)]
            arrays += [a for r in pc["references"] for a in (r.value, r.hi, r.lo)]
            for a in arrays:
                if a.size:
                    a.reshape(-1).view(np.uint8)[::4096].sum()
        else:
            pc.complete()
print(time.perf_counter() - start)
"""


def read_seconds(folder: Path) -> float:
    """The best of three new processes' seconds reading every file of folder back."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}
    runs = [
        subprocess.run([sys.executable, "-c", READ, str(folder)], env=env, capture_output=True, text=True, check=True)
        for _ in range(3)
    ]
    return min(float(r.stdout) for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", default="default", choices=["quick", "default", "full"])
    parser.add_argument("--folder", type=Path, help="an empty folder to fill (default: a temporary one)")
    parser.add_argument("--write", action="store_true", help="put the table in docs/benchmarks.md")
    args = parser.parse_args()
    made = args.folder is None
    folder = Path(tempfile.mkdtemp(prefix="softaudit-cache-")) if made else args.folder
    old = Path(tempfile.mkdtemp(prefix="softaudit-old-"))
    try:
        seconds = fill(folder, args.suite)
        files = sorted(folder.glob(f"{_store.fingerprint()}-*.pkl"))
        size = sum(f.stat().st_size for f in files)
        elements = 0
        for path in files:
            kept = _store.load(path)
            elements += sum(a.size for pc in kept.prepared for a in pc.inputs.values())
            _store.save(old / path.name, old_layout(kept))
        before = sum(f.stat().st_size for f in old.iterdir())
        print(
            f"{args.suite} suite, {len(kinds.KINDS)} kinds x {len(DTYPES)} dtypes: {len(files)} files, "
            f"{elements:,} input elements (prepared in {seconds:.0f} s)"
        )
        print(f"  kept now:      {size / 1e6:8.1f} MB  {size / elements:5.1f} bytes per input element")
        print(
            f"  old layout:    {before / 1e6:8.1f} MB  {before / elements:5.1f} bytes per input element"
            f"  ({before / size:.1f}x)"
        )
        new_read, old_read = read_seconds(folder), read_seconds(old)
        print(
            f"  read back by a new process (best of 3): {new_read:.2f} s now (mapped, the rest derived), "
            f"{old_read:.2f} s old layout (mapped, every page touched)"
        )
        if args.write:
            header = ["suite", "files", "input elements", "prepared in", "kept", "bytes per input element"]
            header += ["the old layout", "read back (now)", "read back (old layout)"]
            row = [args.suite, len(files), f"{elements:,}", f"{seconds:.0f} s", f"{size / 1e6:.1f} MB"]
            row += [f"{size / elements:.1f}", f"{before / 1e6:.1f} MB ({before / size:.1f}x)"]
            row += [f"{new_read:.2f} s", f"{old_read:.2f} s"]
            body = (
                f"Every family of every kind ({len(kinds.KINDS)} kinds) in {', '.join(DTYPES)}, prepared into an empty"
                " cache folder as `softaudit run` prepares them; the same families in the layout before the compact"
                " forms, for comparison; the best of three new processes reading the folder back.\n\n"
                + _record.table(header, [row])
            )
            _record.write("bench_cache", "The cache folder", _record.command("bench_cache.py"), body)
    finally:
        shutil.rmtree(old, ignore_errors=True)
        if made:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
