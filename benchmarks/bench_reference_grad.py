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
    print(f"softmax_grad {x.shape} float32 -> float32: reference {ref * 1e3:8.2f} ms, per-element mpmath ~{slow:8.1f} s"
          f" (from {sample} of {rows} rows), ratio {slow / ref:8.0f}x (target 300x)   tiers exact/A/B/C: {tiers.tolist()}")


def attention_case(shape: tuple[int, ...], end_to_end: bool) -> None:
    """The forward reference against attention_grad's tier A (what the vectorised tier costs, and how many outputs it
    leaves to tier C) and, with end_to_end, against the whole attention_grad (tier C included)."""
    from softaudit.reference import _grad_attention
    from softaudit.reference._formats import decide_arrays, format_of

    rng = np.random.default_rng(1)
    q, k, v, g = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    forward = best_of(lambda: R.attention(q, k, v, dtype="float32", device="numpy"), 3)
    keep = np.ones(shape[-2:-1] * 2, bool)
    heads = [tuple(a[index].astype(np.float64) for a in (q, k, v, g)) for index in np.ndindex(shape[:-2])]
    fmt = format_of("float32")

    def tier_a():
        left = 0
        for head in heads:
            with np.errstate(all="ignore"):
                for approx in _grad_attention.tier_a(*head, keep, None):
                    left += int((~decide_arrays(approx.hi, approx.lo, approx.err, approx.sign, fmt)[1]).sum())
        return left

    left = tier_a()
    fast = best_of(tier_a, 3)
    print(f"attention {shape} float32 -> float32: forward reference {forward:6.3f} s, attention_grad tier A {fast:6.3f} s"
          f" ({fast / forward:4.2f}x), {left} of {3 * q.size} outputs left to tier C")
    if end_to_end:
        grad = best_of(lambda: R.attention_grad(q, k, v, g, dtype="float32"), 1)
        print(f"    attention_grad end to end {grad:8.2f} s: {grad / forward:6.1f}x the forward (target at most 5x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, for a smoke run")
    args = parser.parse_args()
    softmax_case(4 if args.quick else 16, 1024 if args.quick else 4096, sample=2)
    attention_case((1, 2, 64, 32), end_to_end=True) if args.quick else attention_case((1, 8, 1024, 64), end_to_end=False)


if __name__ == "__main__":
    main()
