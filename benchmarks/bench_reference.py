"""Speed of the reference against per-element mpmath at 113 bits, measured in one run (ratios, not a test).

    python benchmarks/bench_reference.py [--quick] [--write]

Targets (issue 2): softmax (16, 4096) float32 -> float32 at least 500x faster than per-element mpmath, float64 ->
float64 at least 100x; attention (1, 8, 1024, 64) float32 -> float32 at least 300x (the mpmath time estimated from
a slice of query rows), with its time beside a plain numpy float64 attention. Issue 26: softmax float64 -> float64
on N(0, 10**2) logits at least 200x per-element mpmath, i.e. within 10x one plain numpy float64 softmax of the
same array (each softmax line gives both ratios). Each reference and numpy time is the best of 20 runs (3 for
attention), taken in turns; the machine is small and noisy, so read the ratios, not the seconds. `--write` puts
the table in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import time

import _record
import mpmath
import numpy as np

from softaudit import reference as R

PREC = 113


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def mpmath_softmax_rows(x: np.ndarray) -> list:
    """The baseline: each row's sum once, then every element exp(x_i - m) / s, at 113 bits."""
    out = []
    with mpmath.workprec(PREC):
        for row in x:
            xs = [mpmath.mpf(float(v)) for v in row]
            m = max(xs)
            total = mpmath.fsum(mpmath.exp(v - m) for v in xs)
            out.append([mpmath.exp(v - m) / total for v in xs])
    return out


def mpmath_attention_rows(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> list:
    """The baseline for a few query rows: scores, softmax and every output element, at 113 bits."""
    out = []
    with mpmath.workprec(PREC):
        c = 1 / mpmath.sqrt(q.shape[-1])
        ks = [[mpmath.mpf(float(a)) for a in row] for row in k]
        vs = [[mpmath.mpf(float(a)) for a in row] for row in v]
        for row in q:
            qs = [mpmath.mpf(float(a)) for a in row]
            scores = [c * mpmath.fdot(qs, kr) for kr in ks]
            m = max(scores)
            weights = [mpmath.exp(s - m) for s in scores]
            total = mpmath.fsum(weights)
            out.append([mpmath.fdot(weights, [vr[col] for vr in vs]) / total for col in range(len(vs[0]))])
    return out


def numpy_softmax(x: np.ndarray) -> np.ndarray:
    """One plain float64 softmax, as numpy users write it."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def best_of_both(fn, other, repeat: int) -> tuple[float, float]:
    """The best of `repeat` runs of each, taken in turns, so that both see the same moments of a noisy machine."""
    times = [], []
    for _ in range(repeat):
        for f, out in zip((fn, other), times):
            start = time.perf_counter()
            f()
            out.append(time.perf_counter() - start)
    return min(times[0]), min(times[1])


def softmax_case(dtype: str, rows: int, n: int, repeat: int, scale: float = 3.0) -> list:
    x = np.random.default_rng(0).standard_normal((rows, n)).astype(dtype) * scale
    x64 = x.astype(np.float64)
    ref, plain = best_of_both(lambda: R.softmax(x, dtype=dtype), lambda: numpy_softmax(x64), repeat)
    slow = best_of(lambda: mpmath_softmax_rows(x), 1)
    tiers = np.bincount(R.evaluate("softmax", x, dtype=dtype).tier.ravel(), minlength=4)
    print(
        f"softmax {x.shape} {dtype} -> {dtype}, N(0, {scale:g}**2): reference {ref * 1e3:7.2f} ms, per-element"
        f" mpmath {slow:6.2f} s, ratio {slow / ref:6.0f}x; numpy float64 softmax {plain * 1e3:6.3f} ms: the"
        f" reference takes {ref / plain:5.1f}x as long   (elements decided by tier exact/A/B/C: {tiers.tolist()})"
    )
    return [
        f"softmax {x.shape} {dtype} -> {dtype}, N(0, {scale:g}**2)",
        f"{ref * 1e3:.2f} ms",
        f"{slow:.2f} s",
        f"{slow / ref:.0f}x",
        f"{plain * 1e3:.3f} ms",
        f"{ref / plain:.1f}x",
    ]


def attention_case(shape: tuple[int, ...], slice_rows: int, repeat: int) -> list:
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    ref = best_of(lambda: R.attention(q, k, v, dtype="float32"), repeat)
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))

    def numpy_attention():
        s = q64 @ np.swapaxes(k64, -1, -2) / np.sqrt(shape[-1])
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        return (p / p.sum(axis=-1, keepdims=True)) @ v64

    plain = best_of(numpy_attention, repeat)
    per_row = best_of(lambda: mpmath_attention_rows(q[0, 0, :slice_rows], k[0, 0], v[0, 0]), 1) / slice_rows
    query_rows = int(np.prod(shape[:-1]))
    slow = per_row * query_rows
    tiers = np.bincount(R.evaluate_attention(q, k, v, dtype="float32").tier.ravel(), minlength=4)
    print(
        f"attention {shape} float32 -> float32: reference {ref:6.3f} s, per-element mpmath ~{slow:8.0f} s"
        f" (from {slice_rows} of {query_rows} query rows), ratio {slow / ref:8.0f}x"
    )
    print(
        f"    numpy float64 attention on the same input {plain * 1e3:7.1f} ms: the reference takes {ref / plain:5.1f}x"
        f" as long   (outputs decided by tier exact/A/B/C: {tiers.tolist()})"
    )
    return [
        f"attention {shape} float32 -> float32",
        f"{ref * 1e3:.1f} ms",
        f"~{slow:.0f} s (from {slice_rows} of {query_rows} query rows)",
        f"{slow / ref:.0f}x",
        f"{plain * 1e3:.1f} ms",
        f"{ref / plain:.1f}x",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, for a smoke run")
    parser.add_argument("--write", action="store_true", help="put the table in docs/benchmarks.md")
    args = parser.parse_args()
    rows, n = (4, 1024) if args.quick else (16, 4096)
    found = [
        softmax_case("float32", rows, n, repeat=20),
        softmax_case("float64", rows, n, repeat=20),
        softmax_case("float64", rows, n, repeat=20, scale=10.0),
        attention_case((1, 2, 256, 64) if args.quick else (1, 8, 1024, 64), slice_rows=2, repeat=3),
    ]
    if args.write:
        header = [
            "input",
            "reference",
            "per-element mpmath, 113 bits",
            "ratio",
            "plain numpy float64",
            "reference / numpy",
        ]
        body = (
            "The correctly rounded reference against per-element mpmath at 113 bits and against one plain numpy float64"
            " evaluation of the same input (best of 20 runs, 3 for attention; mpmath's attention time estimated from"
            " a slice of query rows). Read the ratios: the seconds move with the machine's load.\n\n"
            + _record.table(header, found)
        )
        _record.write("bench_reference", "The reference against mpmath", _record.command("bench_reference.py"), body)


if __name__ == "__main__":
    main()
