"""Speed of the cross-entropy reference against one plain numpy float64 log_softmax of the same array (ratios, not
a test).

    python benchmarks/bench_cross_entropy.py [--repeat N]

Issue 25's target: the reference for cross_entropy at (8, 131072) in float32 and bfloat16 takes at most 10x one
plain float64 numpy log_softmax (x - max - log(sum(exp(x - max)))) of the same array. Printed for the loss per row
and its mean, and for the gradient (not part of the target). Each time is the best of N runs taken in turns; the
machine is small and noisy, so read the ratios.
"""

from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np

from softaudit import reference as R


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def numpy_log_softmax(x: np.ndarray) -> np.ndarray:
    t = x - x.max(axis=-1, keepdims=True)
    return t - np.log(np.exp(t).sum(axis=-1, keepdims=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    shape = (8, 131072)
    logits = rng.standard_normal(shape) * 3
    target = rng.integers(0, shape[1], shape[0])
    print(f"cross_entropy reference, logits {shape} of N(0, 9), best of {args.repeat}")
    for dtype in (np.float32, ml_dtypes.bfloat16):
        x = logits.astype(dtype)
        x64 = x.astype(np.float64)
        base = best_of(lambda x64=x64: numpy_log_softmax(x64), args.repeat)
        runs = {
            "loss, reduction='none'": lambda x=x: R.cross_entropy(x, target, dtype=x.dtype),
            "loss, reduction='mean'": lambda x=x: R.cross_entropy(x, target, dtype=x.dtype, reduction="mean"),
            "gradient, reduction='none'": lambda x=x: R.cross_entropy_grad(x, target, np.ones(8), dtype=x.dtype),
        }
        name = np.dtype(dtype).name
        print(f"  {name}: numpy float64 log_softmax {base * 1e3:.1f} ms")
        for what, run in runs.items():
            took = best_of(run, args.repeat)
            print(f"    {what:28s} {took * 1e3:8.1f} ms  {took / base:6.2f}x numpy (target <= 10x for the loss)")


if __name__ == "__main__":
    main()
