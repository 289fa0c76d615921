"""A FlashAttention-style forward in Triton (tiles of queries and keys, an online softmax), audited anywhere.

    softaudit run examples/triton_attention.py --dtype float16 --dtype bfloat16 --dtype float32
    softaudit run examples/triton_attention.py --device cuda   # on the GPU

Each program takes BLOCK_M queries of one batch entry and walks the keys BLOCK_N at a time, as FlashAttention 2's
forward does: scores S = c Q K^T by `tl.dot` with float32 accumulation, a running max m and sum l, the tile's
P = exp(S - m) cast to the dtype of V before P V (FlashAttention's choice: the second matrix product runs on the
tensor cores in 16 bits), and O = acc / l at the end. A query with no key it may attend gets 0 (l = 0), as
FlashAttention 2 writes. Two precision choices of Triton show in float32: `tl.dot` on float32 inputs defaults to
TF32 (10 explicit significand bits), and `tl.exp` is the fast approximate exponential. framework="triton": with
--device cuda it runs on the GPU; on the CPU (the default) in Triton's interpreter, made to round as a GPU does
(docs/triton.md), where float32 `tl.dot` is full float32, not TF32. Without Triton every row is a `skip`.
"""

from __future__ import annotations

import functools
import math

from _gpu import only

import softaudit

BLOCK_M, BLOCK_N = 64, 32


@functools.cache
def _kernel():
    try:
        import triton
        import triton.language as tl
    except ImportError:
        raise softaudit.CandidateSkip("needs Triton (pip install triton)") from None

    @triton.jit
    def attention_kernel(q_ptr, k_ptr, v_ptr, keep_ptr, o_ptr, lq, lk, d, dv, scale,
                         HAS_MASK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):  # fmt: skip
        start = tl.program_id(0) * BLOCK_M
        b = tl.program_id(1)
        rows = start + tl.arange(0, BLOCK_M)
        cols_d = tl.arange(0, BLOCK_D)
        cols_v = tl.arange(0, BLOCK_DV)
        q = tl.load(q_ptr + b * lq * d + rows[:, None] * d + cols_d[None, :],
                    mask=(rows[:, None] < lq) & (cols_d[None, :] < d), other=0.0)  # fmt: skip
        m = tl.full((BLOCK_M,), -float("inf"), tl.float32)
        total = tl.zeros((BLOCK_M,), tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)
        for key_start in range(0, lk, BLOCK_N):
            keys = key_start + tl.arange(0, BLOCK_N)
            k = tl.load(k_ptr + b * lk * d + keys[:, None] * d + cols_d[None, :],
                        mask=(keys[:, None] < lk) & (cols_d[None, :] < d), other=0.0)  # fmt: skip
            v = tl.load(v_ptr + b * lk * dv + keys[:, None] * dv + cols_v[None, :],
                        mask=(keys[:, None] < lk) & (cols_v[None, :] < dv), other=0.0)  # fmt: skip
            s = tl.dot(q, tl.trans(k)) * scale
            allowed = (rows[:, None] < lq) & (keys[None, :] < lk)
            if HAS_MASK:
                keep = tl.load(keep_ptr + b * lq * lk + rows[:, None] * lk + keys[None, :], mask=allowed, other=0)
                allowed = allowed & (keep != 0)
            s = tl.where(allowed, s, -float("inf"))
            m_new = tl.maximum(m, tl.max(s, axis=1))
            shift = tl.where(m_new == -float("inf"), 0.0, m_new)  # a row with nothing kept yet stays at zero
            p = tl.exp(s - shift[:, None])
            alpha = tl.exp(m - shift)
            total = total * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        out = acc / tl.where(total == 0.0, 1.0, total)[:, None]
        tl.store(o_ptr + b * lq * dv + rows[:, None] * dv + cols_v[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=(rows[:, None] < lq) & (cols_v[None, :] < dv))  # fmt: skip

    return triton, attention_kernel


@softaudit.candidate(kind="attention", name="triton.flash_forward", framework="triton")
def flash_forward(q, k, v, mask=None):
    """FlashAttention-2-style forward in Triton: tiled, online softmax, P cast to V's dtype, 0 for empty rows."""
    import torch

    only(q.dtype, ("float16", "bfloat16", "float32"), "tl.dot takes 16- and 32-bit floats here")
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    lq, lk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    q, k, v = (a.expand(batch + a.shape[-2:]).reshape((-1,) + a.shape[-2:]) for a in (q, k, v))
    keep = None if mask is None else mask.expand(batch + (lq, lk)).reshape(-1, lq, lk).to(torch.int8)
    q, k, v, *rest = (t.contiguous() for t in (q, k, v, *(() if keep is None else (keep,))))
    triton, kernel = _kernel()
    out = q.new_empty(q.shape[:-1] + (dv,))
    if out.numel() and lk:
        grid = (triton.cdiv(lq, BLOCK_M), q.shape[0])
        kernel[grid](q, k, v, rest[0] if rest else q, out, lq, lk, d, dv, 1 / math.sqrt(d), HAS_MASK=bool(rest),
                     BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=max(16, triton.next_power_of_2(d)),
                     BLOCK_DV=max(16, triton.next_power_of_2(dv)), num_stages=1)  # fmt: skip
    elif out.numel():
        out.zero_()
    return out.reshape(batch + (lq, dv))
