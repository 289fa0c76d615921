"""Speed of the gradient reference, measured in one run (ratios, not a test).

    python benchmarks/bench_reference_grad.py [--quick]

Targets (issue 12): softmax_grad (16, 4096) float32 -> float32 at least 300x faster than per-element mpmath at
113 bits (the mpmath time from a sample of elements, scaled); attention_grad (1, 8, 1024, 64) float32 within 5x of
the forward `reference.attention` on the same inputs. Reference times are the best of a few runs; the machine is
small and noisy, so read the ratios.
"""

from __future__ import annotations

import argparse

import mpmath
import numpy as np
from bench_audit import best_of  # (run as a script: benchmarks/ is on the path)

from softaudit import reference as R

PREC = 113


def mpmath_softmax_grad_row(x: np.ndarray, g: np.ndarray) -> list:
    """The baseline, as bench_reference.py's: one row's softmax and <g, p> once, then every element, at 113 bits."""
    with mpmath.workprec(PREC):
        xs = [mpmath.mpf(float(v)) for v in x]
        gs = [mpmath.mpf(float(v)) for v in g]
        m = max(xs)
        es = [mpmath.exp(v - m) for v in xs]
        total = mpmath.fsum(es)
        dot = mpmath.fdot(es, gs) / total
        return [e / total * (gi - dot) for e, gi in zip(es, gs)]


def softmax_case(rows: int, n: int, sample: int) -> None:
    """sample: rows timed the mpmath way (the time is scaled to all rows)."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((rows, n)) * 3).astype(np.float32)
    g = rng.standard_normal((rows, n)).astype(np.float32)
    ref = best_of(lambda: R.softmax_grad(x, g, dtype="float32"), 10)
    slow = best_of(lambda: [mpmath_softmax_grad_row(x[i], g[i]) for i in range(sample)], 1) * rows / sample
    tiers = np.bincount(R.evaluate_grad("softmax_grad", x, g, dtype="float32").tier.ravel(), minlength=4)
    print(
        f"softmax_grad {x.shape} float32 -> float32: reference {ref * 1e3:8.2f} ms, per-element mpmath ~{slow:8.1f} s"
        f" (from {sample} of {rows} rows), ratio {slow / ref:8.0f}x (target 300x)   tiers exact/A/B/C: {tiers.tolist()}"
    )


def attention_case(shape: tuple[int, ...]) -> None:
    """The forward reference against the whole attention_grad (every tier), and how many outputs each tier
    decided."""
    rng = np.random.default_rng(1)
    q, k, v, g = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    forward = best_of(lambda: R.attention(q, k, v, dtype="float32", device="numpy"), 2)
    grad = best_of(lambda: R.attention_grad(q, k, v, g, dtype="float32"), 2)
    tiers = sum(
        np.bincount(r.tier.ravel(), minlength=4) for r in R.evaluate_attention_grad(q, k, v, g, dtype="float32")
    )
    print(
        f"attention {shape} float32 -> float32: forward reference {forward:6.3f} s, attention_grad {grad:6.3f} s:"
        f" {grad / forward:5.2f}x the forward (target at most 5x)   outputs by tier exact/A/B/C: {tiers.tolist()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, for a smoke run")
    args = parser.parse_args()
    softmax_case(4 if args.quick else 16, 1024 if args.quick else 4096, sample=2)
    attention_case((1, 2, 64, 32) if args.quick else (1, 8, 1024, 64))


if __name__ == "__main__":
    main()
