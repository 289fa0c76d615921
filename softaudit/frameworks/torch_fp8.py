"""torch's FP8 paths on a CPU, as people write them, for softaudit.fp8's audits (docs/fp8.md): a quantize step with
torch's float8 casts, and FP8 attention through `torch._scaled_mm` (FP8 operands with float32 scales, a float32
result) in FlashAttention 3's scheme, P in e4m3 with offset 8.

They take and return numpy arrays (FP8 and bfloat16 as ml_dtypes holds them, moved to and from torch by their bits).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ..fp8 import declare
from ._need import need

need("torch", "torch")
import torch  # noqa: E402  (after the install hint)


def _to_torch(a) -> torch.Tensor:
    """An FP8 or float32 numpy array as a torch tensor of the same dtype (FP8 by its bits)."""
    a = np.asarray(a)
    if a.dtype.name.startswith("float8"):
        return torch.from_numpy(a.view(np.uint8).copy()).view(getattr(torch, a.dtype.name))
    return torch.from_numpy(np.ascontiguousarray(a, np.float32))


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    """A torch tensor as numpy, an FP8 or bfloat16 one by its bits."""
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return t.contiguous().view(torch.uint8).numpy().view(getattr(ml_dtypes, str(t.dtype).split(".")[1]))
    return t.numpy()


def quantize(x, fmt, granularity):
    """amax per group with torch (per tensor, per (batch, head), per block of 128 rows), scale = fmt_max / amax in
    float32 (1 for a zero amax, float32's largest past its range), x scale clamped to +-fmt_max and cast with
    torch's float8 cast (which gives NaN past the format's range where not clamped), descale = 1 / scale."""
    dtype = getattr(torch, fmt)
    top = torch.finfo(dtype).max
    t = torch.from_numpy(np.asarray(x, np.float32))
    if granularity == "tensor":
        amax = t.abs().amax()
        groups = amax
    elif granularity == "head":
        amax = t.abs().amax(dim=(2, 3))
        groups = amax[:, :, None, None]
    else:
        b, h, length, d = t.shape
        blocks = -(-length // 128)
        padded = torch.zeros((b, h, blocks * 128, d))
        padded[:, :, :length] = t
        amax = padded.abs().reshape(b, h, blocks, 128 * d).amax(dim=-1)
        groups = amax.repeat_interleave(128, dim=-1)[..., :length, None]
    scale = torch.where(amax > 0, top / amax.clamp_min(torch.finfo(torch.float32).tiny), torch.ones_like(amax))
    scale = scale.clamp_max(torch.finfo(torch.float32).max)
    per = torch.where(groups > 0, top / groups.clamp_min(torch.finfo(torch.float32).tiny), torch.ones_like(groups))
    per = per.clamp_max(torch.finfo(torch.float32).max)
    x8 = (t * per).clamp(-top, top).to(dtype)
    return _to_numpy(x8), scale.reciprocal().numpy()


@declare("fa3")
def attention(q8, k8, v8, descale_q, descale_k, descale_v, mask=None):
    """FP8 attention head by head through torch._scaled_mm: S = q8 k8^T with descale_q and descale_k as its scales
    (float32 out), P = 2**(s log2(e) / sqrt(d) - m + 8) cast to e4m3 (P <= 2**8, so the cast never overflows),
    l = sum of the unconverted P, O = P8 v8 with descale_v as v's scale (float32 out), o = O / l in bfloat16."""
    q, k, v = (_to_torch(a) for a in (q8, k8, v8))
    b, hq, lq, d = q.shape
    hk = k.shape[1]
    group = hq // hk
    dq, dk, dv = (np.broadcast_to(np.asarray(a, np.float32), (b, hk)) for a in (descale_q, descale_k, descale_v))
    keep = None if mask is None else torch.from_numpy(np.broadcast_to(mask, (lq, k.shape[2])).copy())
    c = math.log2(math.e) / math.sqrt(d)
    out = torch.empty((b, hq, lq, v.shape[-1]), dtype=torch.bfloat16)
    one = torch.tensor(1.0)
    for i in range(b):
        for h in range(hq):
            kv = h // group
            sq, sk, sv = (torch.tensor(float(x[i, kv])) for x in (dq, dk, dv))
            s = torch._scaled_mm(q[i, h], k[i, kv].t(), scale_a=sq, scale_b=sk, out_dtype=torch.float32) * c
            if keep is not None:
                s = s.masked_fill(~keep, -math.inf)
            m = s.amax(dim=-1, keepdim=True)
            m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
            p = torch.exp2(s - m + 8)
            total = p.sum(dim=-1, keepdim=True)
            o = torch._scaled_mm(p.to(torch.float8_e4m3fn), v[i, kv], scale_a=one, scale_b=sv, out_dtype=torch.float32)
            out[i, h] = torch.where(total > 0, o / total, torch.zeros_like(o)).to(torch.bfloat16)
    return _to_numpy(out)
