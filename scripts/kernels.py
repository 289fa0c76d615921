"""Regenerate reports/kernels/: the default suite of the Triton kernel libraries softaudit reaches (Liger-Kernel's
ops, softaudit.frameworks.liger; Cut Cross-Entropy's, softaudit.frameworks.cce) in float32, bfloat16 and float16,
on this machine (a CPU: Triton's interpreter, corrected to a GPU's rounding, docs/triton.md; --device cuda on a
GPU), then every fail checked outside softaudit (scripts/check_kernel_fails.py).

    python scripts/kernels.py [--device cuda] [--suite default] [--out reports/kernels]

Needs triton, liger-kernel, packaging and cut-cross-entropy installed (pip install 'softaudit[liger,cce]').
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("softaudit.frameworks.liger", "softaudit.frameworks.cce")
DTYPES = ("float32", "bfloat16", "float16")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--suite", default="default")
    parser.add_argument("--out", default=str(ROOT / "reports" / "kernels"))
    args = parser.parse_args()
    command = [sys.executable, "-m", "softaudit", "run", *TARGETS, "--suite", args.suite, "--device", args.device]
    command += [f"--dtype={d}" for d in DTYPES] + ["--out", args.out, "--format", "csv", "--format", "md"]
    command += ["--format", "json", "--format", "html"]
    # (the interpreter runs a kernel's programs one after another in Python: a family of thousands of rows, as
    # mnist_logits is, takes minutes where a GPU takes microseconds; the default time limit is a GPU's)
    command += ["--timeout", "900"]
    start = time.monotonic()
    done = subprocess.run(command, cwd=ROOT)
    print(f"softaudit run: exit {done.returncode} in {time.monotonic() - start:.0f} s", flush=True)
    if done.returncode not in (0, 1):  # (1: the audit has fails, which is what the report is for)
        return done.returncode
    check = [sys.executable, str(ROOT / "scripts" / "check_kernel_fails.py"), str(Path(args.out) / "results.csv")]
    return subprocess.run(check, cwd=ROOT).returncode


if __name__ == "__main__":
    raise SystemExit(main())
