"""A tutorial-style fused softmax in Triton (one program per row, the row held in registers), audited anywhere.

    softaudit run examples/triton_softmax.py --dtype float16 --dtype bfloat16 --dtype float32
    softaudit run examples/triton_softmax.py --device cuda   # on the GPU

The kernel follows Triton's fused-softmax tutorial: load a row (masked lanes read -inf), subtract its max, exp,
sum, divide; the arithmetic is float32 whatever the input dtype, the result is stored in the input's dtype.
Triton's `tl.exp` in float32 compiles to the GPU's fast approximate exponential (ex2.approx), which is where this
kernel's float32 error comes from; `softaudit run` reports it against a float32 softmax built on an accurate exp.
framework="triton": with --device cuda the kernel runs on the GPU; on the CPU (the default) it runs in Triton's
interpreter, which softaudit makes round as a GPU does (docs/triton.md; numpy's exp stands in for ex2.approx
there). Without Triton every row is a `skip`.
"""

from __future__ import annotations

import functools

from _gpu import only

import softaudit

#: One program keeps a whole row in registers: beyond this the tutorial's design stops being sensible.
MAX_ROW = 16384


@functools.cache
def _kernel():
    try:
        import triton
        import triton.language as tl
    except ImportError:
        raise softaudit.CandidateSkip("needs Triton (pip install triton)") from None

    @triton.jit
    def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * in_stride + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        z = x - tl.max(x, axis=0)
        num = tl.exp(z)
        out = num / tl.sum(num, axis=0)
        tl.store(out_ptr + row * out_stride + cols, out.to(out_ptr.dtype.element_ty), mask=cols < n_cols)

    return triton, softmax_kernel


@softaudit.candidate(kind="softmax", name="triton.fused_softmax", framework="triton")
def fused_softmax(x, axis=-1):
    """Triton tutorial fused softmax: one program per row, float32 arithmetic, tl.exp."""
    only(x.dtype, ("float16", "bfloat16", "float32"), "the kernel loads 16- and 32-bit floats only")
    moved = x.movedim(axis, -1).contiguous()
    n = moved.shape[-1]
    if n > MAX_ROW:
        raise softaudit.CandidateSkip(f"rows of {n} > {MAX_ROW}: the kernel holds a row in registers")
    triton, kernel = _kernel()
    rows = moved.reshape(-1, n) if n else moved.reshape(-1, 0)
    out = rows.new_empty(rows.shape)
    if rows.numel():
        block = triton.next_power_of_2(n)
        kernel[(rows.shape[0],)](out, rows, rows.stride(0), out.stride(0), n, BLOCK=block,
                                  num_warps=4 if block <= 2048 else 8 if block <= 4096 else 16)  # fmt: skip
    return out.reshape(moved.shape).movedim(-1, axis)
