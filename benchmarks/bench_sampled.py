"""What auditing a production shape by sampled rows costs against the candidate's own call, measured in one run.

    python benchmarks/bench_sampled.py [--quick]

Target (issue 26): attention (1, 8, 8192, 128) float16 with 256 sampled queries in at most 3x the candidate's own
time on the CPU. Each candidate is timed alone (its best of two calls on the shape's inputs, in this process), then
audited with `softaudit.audit_shapes` as `softaudit run --shape` does it (the candidate in a worker process); the
ratio is the audit's wall time over the candidate's. The audit's parts are timed too: drawing the inputs, choosing
the rows, the exact reference and conditioning scale of the sampled rows, the comparisons on them. Candidates: torch's
scaled_dot_product_attention (where torch is installed) and a numpy kernel in float32 with BLAS matrix products
(the usual upcast). A row kind at vocabulary size is measured too: log_softmax (16, 131072) bfloat16, torch's and
numpy's. --quick: (1, 4, 2048, 64) and (8, 32768), for a smoke run. The machine is small and noisy: read the ratios.

--cuda (issue 26's GPU measure, where torch sees a CUDA GPU): attention (1, 32, 32768, 128) in float16 and bfloat16
with 256 sampled queries, torch's flash and memory-efficient SDPA kernels on the GPU. "alone" is then the call as
softaudit makes it (the inputs copied to the GPU, the output copied back); the kernel's own time (CUDA events, the
inputs already on the GPU) is printed beside it.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import softaudit
from softaudit import sampled
from softaudit.execute import InProcess
from softaudit.plan import candidates_for
from softaudit.policy import Policy
from softaudit.reference import format_of


@softaudit.candidate(kind="attention", name="numpy_upcast_blas")
def numpy_attention(q, k, v, mask=None):
    """float32 throughout with BLAS matrix products, rounded once."""
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    s = (q32 @ np.swapaxes(k32, -1, -2)) / np.float32(np.sqrt(q.shape[-1]))
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return ((e @ v32) / e.sum(axis=-1, keepdims=True)).astype(q.dtype)


@softaudit.candidate(kind="log_softmax", name="numpy_log_softmax_f32")
def numpy_log_softmax(x, axis=-1):
    """float32 throughout, rounded once."""
    x32 = x.astype(np.float32)
    shifted = x32 - x32.max(axis=axis, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))).astype(x.dtype)


def torch_candidates() -> dict:
    try:
        import torch
    except ImportError:
        return {}

    @softaudit.candidate(kind="attention", framework="torch", name="torch_sdpa")
    def sdpa(q, k, v, mask=None):
        """torch.nn.functional.scaled_dot_product_attention."""
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    @softaudit.candidate(kind="log_softmax", framework="torch", name="torch_log_softmax")
    def log_softmax(x, axis=-1):
        """torch.log_softmax."""
        return torch.log_softmax(x, dim=axis)

    return {"attention": [sdpa], "log_softmax": [log_softmax]}


CUDA_TARGETS = ["softaudit.frameworks.torch:sdpa_bool_flash", "softaudit.frameworks.torch:sdpa_bool_efficient"]


def kernel_time(shape_text: str, dtype: str) -> str:
    """The flash kernel's own time on the GPU (inputs already there; best of five, after a warm-up)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dims = [int(n) for n in shape_text.split(":")[1].split("x")]
    q, k, v = (torch.randn(*dims, dtype=getattr(torch, dtype), device="cuda") for _ in range(3))
    best = float("inf")
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for _ in range(6):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.nn.functional.scaled_dot_product_attention(q, k, v)
            end.record()
            torch.cuda.synchronize()
            best = min(best, start.elapsed_time(end) / 1000)
    return f"{torch.cuda.get_device_name()}: the flash kernel alone {best * 1000:.1f} ms"


def own_time(candidate, inputs: dict, mask, shapes: tuple, dtype) -> float:
    """The candidate's best of two calls in this process (its first call loads what it needs)."""
    with InProcess() as ex:
        times = []
        for _ in range(2):
            start = time.perf_counter()
            ex.call_all(candidate, inputs, mask, shapes, dtype, None)
            times.append(time.perf_counter() - start)
    return min(times)


def parts(shape, fmt, samples: int) -> str:
    """The audit's own work on the shape, timed part by part (in this process)."""
    times, start = {}, time.perf_counter()
    shape.inputs(fmt, 0)
    times["inputs"] = time.perf_counter() - start
    start = time.perf_counter()
    problem = sampled.Problem(shape, fmt, samples, 0)
    times["ranking the rows"] = time.perf_counter() - start - times["inputs"]
    start = time.perf_counter()
    problem.family.prepared[0].bases  # noqa: B018 (the exact results and conditioning scale of the sampled rows)
    times["reference of the sample"] = time.perf_counter() - start
    start = time.perf_counter()
    with InProcess() as ex:
        problem.compare(None, ex)
    times["comparisons on the sample"] = time.perf_counter() - start
    return ", ".join(f"{name} {seconds:.2f} s" for name, seconds in times.items())


def run(text: str, samples: int, dtype: str, candidates: list, device: str | None = None) -> None:
    shape, fmt = softaudit.Shape.parse(text), format_of(dtype)
    inputs, mask = shape.inputs(fmt, 0)
    print(f"\n{text} {dtype}, {samples} sampled rows")
    print(f"  the audit's parts: {parts(shape, fmt, samples)}")
    problem = sampled.Problem(shape, fmt, 1, 0)  # (its output shape)
    for target in candidates:
        (candidate,) = candidates_for(target, shape.kind, device)
        alone = own_time(candidate, inputs, mask, problem.output_shapes, fmt.dtype)
        start = time.perf_counter()
        result = softaudit.audit_shapes(
            candidate, [shape], dtypes=[dtype], samples=samples, policy=Policy(), device=device
        )
        audit = time.perf_counter() - start
        (row,) = result.table.to_dict("records")
        called = row["seconds"]  # its call in the audit: in a worker, with one thread, as every candidate runs
        print(
            f"  {candidate.name:24s} alone {alone:6.2f} s   in the audit {called:6.2f} s   audit {audit:6.2f} s   "
            f"ratio {audit / alone:5.2f}x ({audit / called:5.2f}x its call in the audit)   "
            f"({row['verdict']}, max {row['max_ulp']:.3g} ulp, {row['max_cond_err']:.3g} x cond; "
            f"ub past fail {row['ub_past_fail']:.2%})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cuda", action="store_true")
    options = parser.parse_args()
    if options.cuda:
        attention = "attention:1x32x32768x128"
        for dtype in ("float16", "bfloat16"):
            print(kernel_time(attention, dtype))
            run(attention, 256, dtype, CUDA_TARGETS, device="cuda")
        return
    quick = options.quick
    frameworks = torch_candidates()
    attention = "attention:1x4x2048x64" if quick else "attention:1x8x8192x128"
    rows = "log_softmax:8x32768" if quick else "log_softmax:16x131072"
    run(attention, 256, "float16", frameworks.get("attention", []) + [numpy_attention])
    run(rows, 256, "bfloat16", frameworks.get("log_softmax", []) + [numpy_log_softmax])


if __name__ == "__main__":
    main()
