"""A custom CUDA softmax kernel built into a torch op (torch.utils.cpp_extension.load_inline), audited through torch.

    softaudit run examples/cuda_softmax_op.py --dtype float16 --dtype bfloat16 --dtype float32

The kernel is the common hand-written one: one warp per row, float32 arithmetic, warp-shuffle max and sum, and
the fast `__expf` intrinsic (what `-use_fast_math` gives every expf). 16-bit inputs are upcast to float32 by the
wrapper and the result cast back, as such ops usually do. nvcc builds it while the module imports (about a minute,
outside the per-call time limit; torch caches the build). Without a CUDA GPU, or without nvcc, every row is a
`skip`.
"""

from __future__ import annotations

import functools

from _gpu import on_gpu, only

import softaudit

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void softmax_rows(const float* x, float* y, long rows, long n) {
    long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* in = x + row * n;
    float m = -INFINITY;
    for (long j = lane; j < n; j += 32) m = fmaxf(m, in[j]);
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
    float s = 0.0f;
    for (long j = lane; j < n; j += 32) s += __expf(in[j] - m);
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffff, s, o);
    for (long j = lane; j < n; j += 32) y[row * n + j] = __expf(in[j] - m) / s;
}

torch::Tensor softmax_last(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.size(-1), rows = n ? x.numel() / n : 0;
    if (rows) {
        int warps = 4;
        softmax_rows<<<(rows + warps - 1) / warps, 32 * warps>>>(x.data_ptr<float>(), y.data_ptr<float>(), rows, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}
"""


@functools.cache
def _build():
    """The compiled op, or None and the reason it did not build (kept: a failed build is not retried per call)."""
    from torch.utils.cpp_extension import load_inline

    try:
        module = load_inline("softaudit_example_softmax", cpp_sources="torch::Tensor softmax_last(torch::Tensor x);",
                             cuda_sources="#include <c10/cuda/CUDAException.h>\n" + CUDA_SOURCE,
                             functions=["softmax_last"], extra_cuda_cflags=["-O3"])  # fmt: skip
    except Exception as exc:  # no nvcc, no compiler, a compile error: say so in every skip
        return None, f"the CUDA op did not build: {str(exc).splitlines()[0][:160]}"
    return module.softmax_last, None


def _gpu_present() -> bool:
    import torch

    return torch.cuda.is_available()


if _gpu_present():  # build while the module imports: a minute of nvcc is no candidate call under the time limit
    _build()


@softaudit.candidate(kind="softmax", name="cuda_op.warp_softmax", framework="torch")
def warp_softmax(x, axis=-1):
    """Hand-written CUDA softmax: a warp per row, float32, __expf; 16-bit inputs upcast and cast back."""
    only(x.dtype, ("float16", "bfloat16", "float32"), "the op computes in float32 and is not meant for float64")
    import torch

    (moved,) = on_gpu(x.movedim(axis, -1))
    op, why_not = _build()
    if op is None:
        raise softaudit.CandidateSkip(why_not)
    return op(moved.to(torch.float32).contiguous()).to(x.dtype).movedim(-1, axis)
