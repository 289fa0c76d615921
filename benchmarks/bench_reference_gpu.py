"""The correctly rounded attention reference on a CUDA GPU, against a plain float64 torch attention there (issue 14).

    python benchmarks/bench_reference_gpu.py [--shape 1,32,4096,128] [--dtype float16]

Goal: the reference of (1, 32, 4096, 128) float16 attention in at most 1 s on an H100, and at most 20x a plain
float64 torch attention on the same GPU. The reference is timed end to end, numpy arrays in and correctly rounded
numpy arrays out (preparing, moving to the GPU and back, the CPU tiers for what the GPU tier leaves); the plain
attention is timed on the device with its inputs already there. Also printed: the CPU path's time on two heads,
scaled to all (so the GPU's gain over this machine's CPU), and a bit-for-bit check of the two paths on those heads.
Each time is the best of several runs; read the ratios.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from bench_audit import best_of  # (run as a script: benchmarks/ is on the path)

from softaudit import reference as R
from softaudit.reference import _attention


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="1,32,4096,128")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_reference_gpu needs a CUDA GPU (torch.cuda.is_available() is False)")
    shape = tuple(int(s) for s in args.shape.split(","))
    dtype = R.format_of(args.dtype).dtype
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(shape).astype(dtype) for _ in range(3))
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")

    R.attention(q[..., :2, :, :], k[..., :2, :, :], v[..., :2, :, :], dtype=args.dtype, device="cuda")  # warm up
    reference = best_of(lambda: R.attention(q, k, v, dtype=args.dtype), args.repeat)
    preparing = best_of(lambda: _attention.prepare(q, k, v, None, None), args.repeat)
    result = R.evaluate_attention(q, k, v, dtype=args.dtype)
    tiers = np.bincount(result.tier.ravel(), minlength=4).tolist()

    qd, kd, vd = (torch.from_numpy(a.astype(np.float64)).cuda() for a in (q, k, v))

    def plain():
        scores = (qd @ kd.transpose(-1, -2)) / math.sqrt(shape[-1])
        out = torch.softmax(scores, dim=-1) @ vd
        torch.cuda.synchronize()
        return out

    plain()
    plain_time = best_of(plain, 10)

    heads = (slice(None),) * (len(shape) - 3) + (slice(0, 2),)
    qs, ks, vs = (a[heads] for a in (q, k, v))
    cpu = best_of(lambda: R.attention(qs, ks, vs, dtype=args.dtype, device="numpy"), 1)
    cpu_all = cpu * (np.prod(shape[:-2]) / np.prod(qs.shape[:-2]))
    same = np.array_equal(
        R.attention(qs, ks, vs, dtype=args.dtype, device="numpy").view(np.uint8),
        R.attention(qs, ks, vs, dtype=args.dtype, device="cuda").view(np.uint8),
    )

    print(f"attention {shape} {args.dtype} -> {args.dtype}, correctly rounded:")
    print(f"  reference on the GPU (device='auto'), end to end  {reference:8.3f} s   (goal <= 1 s)")
    print(f"    of which preparing on the CPU (checks, NaN rows)  {preparing:8.3f} s")
    print(f"  plain float64 torch attention on the GPU          {plain_time:8.4f} s")
    print(f"  ratio reference / plain float64                   {reference / plain_time:8.1f}x  (goal <= 20x)")
    print(f"  reference on this machine's CPU (numpy path)      {cpu_all:8.2f} s   (2 heads timed, scaled)")
    print(f"  ratio CPU path / GPU path                         {cpu_all / reference:8.1f}x")
    print(f"  elements decided by tier exact/A/B/C: {tiers}; CPU and GPU paths bit for bit on 2 heads: {same}")


if __name__ == "__main__":
    main()
