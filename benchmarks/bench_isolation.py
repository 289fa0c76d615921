"""What isolation costs per call, measured in one run (ratios, not a test).

    python benchmarks/bench_isolation.py [--quick] [--write]

Per input size, a candidate that does nothing (returns an input: the pure overhead) and a real one, called through
InProcess and through Isolated: milliseconds per call, the difference and the ratio. Then what a worker's start
costs: the first call (a fresh interpreter, softaudit's imports, loading the candidate; torch's import when torch
is here) and a call after a timeout (the hung worker killed, a new one started). Last, a whole audit (the softmax
built-ins, the quick suite, float32) with `isolation="none"`, `"worker"` on the worker the process's last audit
kept, and `"worker"` on a fresh one, interleaved: cold (references and comparisons computed, as `softaudit run`
with no cache) and warm (prepared families kept: the calls and judging).
"""

from __future__ import annotations

import argparse
import contextlib
import time

import _record
import numpy as np

import softaudit
from softaudit import Candidate, runner
from softaudit.candidates import builtins
from softaudit.execute import InProcess, Isolated, _isolated


def per_call(executors, candidate, arrays, shape, repeat: int) -> list[float]:
    """Seconds per call through each executor: the best of 5 rounds of `repeat` calls, the executors' rounds
    interleaved (the machine is noisy: a slow spell then hits both)."""
    best = [float("inf")] * len(executors)
    for executor in executors:
        executor.call(candidate, arrays, None, shape, np.float32, 60)  # (warm: loaded, buffers made)
    for _ in range(5):
        for i, executor in enumerate(executors):
            start = time.perf_counter()
            for _ in range(repeat):
                executor.call(candidate, arrays, None, shape, np.float32, 60)
            best[i] = min(best[i], (time.perf_counter() - start) / repeat)
    return best


def first_call(candidate, arrays, shape) -> float:
    with Isolated() as executor:
        start = time.perf_counter()
        executor.call(candidate, arrays, None, shape, np.float32, 60)
        return time.perf_counter() - start


def matmul_attention(q, k, v, mask=None):
    """A user's numpy attention (BLAS matmuls, float32): a realistic cost for this size."""
    s = q @ k.swapaxes(-1, -2) / np.sqrt(np.float32(q.shape[-1]))
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls, no torch")
    parser.add_argument("--write", action="store_true", help="put the tables in docs/benchmarks.md")
    args = parser.parse_args()
    quick, calls, starts = args.quick, [], []
    rng = np.random.default_rng(0)
    named = {c.name: c for c in builtins()}
    softmax_in = {"x": rng.standard_normal((16, 4096)).astype(np.float32)}
    attention_in = {n: rng.standard_normal((1, 8, 1024, 64)).astype(np.float32) for n in "qkv"}
    nothing_softmax = Candidate("softmax", "nothing", lambda x, axis=-1: x)
    nothing_attention = Candidate("attention", "nothing", lambda q, k, v, mask=None: v)
    rows = [
        ("(16, 4096) softmax", nothing_softmax, softmax_in, (16, 4096), 50),
        ("(16, 4096) softmax", named["softmax.max_shifted"], softmax_in, (16, 4096), 20),
        ("(1, 8, 1024, 64) attention", nothing_attention, attention_in, (1, 8, 1024, 64), 20),
        (
            "(1, 8, 1024, 64) attention",
            Candidate("attention", "numpy matmul attention", matmul_attention),
            attention_in,
            (1, 8, 1024, 64),
            5,
        ),  # (the built-ins avoid BLAS for portable bits: seconds per call here)
    ]
    print(f"{'input':28} {'candidate':24} {'in process':>11} {'isolated':>11} {'overhead':>10} {'ratio':>6}")
    with InProcess() as here, Isolated() as isolated:
        for label, candidate, arrays, shape, repeat in rows:
            repeat = max(1, repeat // 4) if quick else repeat
            a, b = per_call((here, isolated), candidate, arrays, shape, repeat)
            print(
                f"{label:28} {candidate.name:24} {a * 1e3:8.2f} ms {b * 1e3:8.2f} ms "
                f"{(b - a) * 1e3:7.2f} ms {b / a:5.1f}x"
            )
            calls.append([label, candidate.name, f"{a * 1e3:.2f} ms", f"{b * 1e3:.2f} ms", f"{(b - a) * 1e3:.2f} ms"])
            calls[-1].append(f"{b / a:.1f}x")

        start = time.perf_counter()
        sleeper = Candidate("softmax", "sleeps", lambda x, axis=-1: time.sleep(5))
        with contextlib.suppress(Exception):
            isolated.call(sleeper, softmax_in, None, (16, 4096), np.float32, 0.2)
        timed_out = time.perf_counter() - start - 0.2
        start = time.perf_counter()
        isolated.call(named["softmax.max_shifted"], softmax_in, None, (16, 4096), np.float32, 60)
        after = time.perf_counter() - start

    _forget_kept_workers()
    start = first_call(named["softmax.max_shifted"], softmax_in, (16, 4096))
    print(f"\nfirst call, numpy built-in (start a worker, import, load): {start:.2f} s")
    print(f"a timeout: killing the hung worker {timed_out:.2f} s, the next call (new worker, load) {after:.2f} s")
    starts += [
        ["first call, numpy built-in (start a worker, import, load)", f"{start:.2f} s"],
        ["a timeout: killing the hung worker", f"{timed_out:.2f} s"],
        ["the call after it (a new worker, load)", f"{after:.2f} s"],
    ]
    if not quick:
        try:
            from softaudit.frameworks import torch as torch_ops
        except ImportError:
            return
        candidate = Candidate(
            "softmax", "torch.softmax", torch_ops.softmax, "torch", source="softaudit.frameworks.torch:softmax"
        )
        _forget_kept_workers()
        start = first_call(candidate, softmax_in, (16, 4096))
        print(f"first call, torch.softmax (torch imported in the worker): {start:.2f} s")
        starts.append(["first call, torch.softmax (torch imported in the worker)", f"{start:.2f} s"])
    audits = whole_audit(rounds=2 if quick else 3)
    if args.write:
        body = (
            "Per call (best of 5 rounds): a candidate called in softaudit's process and in its isolated worker.\n\n"
            + _record.table(["input", "candidate", "in process", "isolated", "overhead", "ratio"], calls)
            + "\n\nStarting and replacing the worker:\n\n"
            + _record.table(["what", "seconds"], starts)
            + "\n\nA whole audit (softmax built-ins, quick suite, float32): in process, isolated on the worker the"
            " process's last audit kept, and on a fresh worker.\n\n"
            + _record.table(["audit", "in process", "kept worker", "ratio", "fresh worker", "ratio"], audits)
        )
        _record.write("bench_isolation", "Isolation", _record.command("bench_isolation.py"), body)


def _forget_kept_workers() -> None:
    """Kill the worker an earlier executor of this process kept (softaudit/execute/_isolated.py): the next isolated
    call starts a fresh one, as the first audit of a new process does."""
    for pool in _isolated._KEPT.values():
        pool.shutdown(wait=True, kill_workers=True)
    _isolated._KEPT.clear()


def whole_audit(rounds: int) -> list[list[str]]:
    """Seconds for an audit of the softmax built-ins (quick suite, float32), isolated and in process: best of
    `rounds`, the three interleaved: in process, isolated on the worker the last audit of the process kept (a test
    suite's or a notebook's next audit), and isolated on a fresh worker (a new process's first audit)."""
    print(
        f"\n{'a whole audit (softmax built-ins, quick, float32)':52} {'in process':>10} {'kept':>10} {'ratio':>6}"
        f" {'fresh':>10} {'ratio':>6}"
    )
    found = []
    for label, cache in (("cold: references and comparisons computed", False), ("warm: prepared families kept", True)):
        best = {"none": float("inf"), "worker": float("inf"), "fresh": float("inf")}
        for _ in range(rounds):
            for mode in best:
                isolation = "none" if mode == "none" else "worker"
                runner.clear_cache()
                if cache:  # (prepared once, untimed: what is timed is the candidates' calls and their judging)
                    softaudit.audit(
                        kind="softmax", dtypes=["float32"], suite="quick", isolation="none", cache_dir="off"
                    )
                if mode == "fresh":
                    _forget_kept_workers()
                start = time.perf_counter()
                softaudit.audit(
                    kind="softmax", dtypes=["float32"], suite="quick", isolation=isolation, cache=cache, cache_dir="off"
                )
                best[mode] = min(best[mode], time.perf_counter() - start)
        a, b, c = best["none"], best["worker"], best["fresh"]
        print(f"{label:52} {a:8.2f} s {b:8.2f} s {b / a:5.2f}x {c:8.2f} s {c / a:5.2f}x")
        found.append([label, f"{a:.2f} s", f"{b:.2f} s", f"{b / a:.2f}x", f"{c:.2f} s", f"{c / a:.2f}x"])
    return found


if __name__ == "__main__":
    main()
