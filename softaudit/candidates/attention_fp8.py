"""Built-in FP8 attention kernels, `f(q8, k8, v8, descale_q, descale_k, descale_v, mask=None) -> o` (o bfloat16):
q8 (B, Hq, Lq, d), k8 and v8 (B, Hkv, Lk, d) in float8_e4m3fn or float8_e5m2, descales float32 scalars or (B, Hkv)
(FlashAttention 3's convention: query head h uses KV head h // (Hq / Hkv)'s descale_q too), each with its scheme
(softaudit.fp8.Scheme: the format P takes for the P V product, its offset, the row sum's source) and its weakness.

They are FlashAttention 3's forward in float32 as a CPU emulates it: scores of the FP8 values (exact products,
added in float32), times descale_q descale_k c log2(e); over blocks of 128 keys a running max m, P = 2**(s - m +
offset) converted to the scheme's format (round to nearest, saturating at 448 for e4m3, as the hardware's
cvt .satfinite), the row sum from the unconverted P, P V in float32, then descale_v / l and one rounding to bfloat16.
Products and sums come from `_ops` (the same bits on every CPU).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ..adapters import candidate
from ..kinds import scheme_of
from ..kinds.attention_fp8 import DEFAULT_SCHEME
from ..reference import fp8 as _fp8
from ..reference import round_to as _round_to
from ._ops import dtype_sum, exp2, matmul

_LOG2E = np.float32(math.log2(math.e))
KEY_BLOCK = 128


def _convert(p: np.ndarray, fmt: str) -> np.ndarray:
    """P as the scheme's format holds it, back in float32."""
    if fmt == "float32":
        return p
    if fmt in _fp8.FORMATS:
        return _fp8.to_fp8(p.astype(np.float64), fmt).astype(np.float32)
    return _round_to(p.astype(np.float64), fmt).astype(np.float32)


def _per_head(descale, b: int, heads: int, group: int) -> np.ndarray:
    """A descale as (B, Hq, 1, 1) float32, a KV head's value repeated over its query heads."""
    d = np.asarray(descale, np.float32)
    if d.ndim == 0:
        return np.full((b, heads, 1, 1), d, np.float32)
    return np.repeat(d, group, axis=1)[:, :, None, None]


def kernel(
    q8,
    k8,
    v8,
    descale_q,
    descale_k,
    descale_v,
    mask=None,
    *,
    p="float8_e4m3fn",
    offset=8.0,
    rowsum="unconverted",
    stale=0.0,
    two_pass=False,
    out=ml_dtypes.bfloat16,
    drop=(),
):
    """The parametrized FlashAttention 3 forward: p, offset and rowsum the scheme; stale: the running max is kept
    while a block's max exceeds it by less than this (in log2 units, FlashAttention #2716's skipped rescale);
    two_pass: the row's true max first (best practice under the scheme); drop: the descales left out ("q", "k",
    "v": read as 1, vLLM PR #51363's defect)."""
    q8, k8, v8 = np.asarray(q8), np.asarray(k8), np.asarray(v8)
    b, hq, lq, d = q8.shape
    hk, lk = k8.shape[1], k8.shape[2]
    group = hq // hk
    dq, dk, dv = (
        np.ones((b, hq, 1, 1), np.float32) if name in drop else _per_head(x, b, hq, group)
        for name, x in (("q", descale_q), ("k", descale_k), ("v", descale_v))
    )
    q = q8.astype(np.float32)
    k = np.repeat(k8.astype(np.float32), group, axis=1)
    v = np.repeat(v8.astype(np.float32), group, axis=1)
    c = (dq * dk * np.float32(1 / math.sqrt(d)) * _LOG2E).astype(np.float32)
    s = matmul(q, np.swapaxes(k, -1, -2), np.float32) * c
    if mask is not None:
        s = np.where(np.broadcast_to(mask, s.shape), s, np.float32(-np.inf))
    off = np.float32(offset)
    with np.errstate(all="ignore"):
        if two_pass:
            m = s.max(axis=-1, keepdims=True)
            m = np.where(np.isfinite(m), m, np.float32(0))
            pr = exp2((s - m + off).astype(np.float32))
            pc = _convert(pr, p)
            l_sum = dtype_sum(pr if rowsum == "unconverted" else pc)
            pv = matmul(pc, v, np.float32)
            o = pv / l_sum * dv
        else:
            m = np.full((b, hq, lq, 1), -np.inf, np.float32)
            l_sum = np.zeros((b, hq, lq, 1), np.float32)
            acc = np.zeros((b, hq, lq, v.shape[-1]), np.float32)
            for j0 in range(0, lk, KEY_BLOCK):
                sj = s[..., j0 : j0 + KEY_BLOCK]
                top = sj.max(axis=-1, keepdims=True)
                grow = top > m + np.float32(stale) if stale else top > m
                new = np.where(grow | ~np.isfinite(m), np.maximum(m, top), m)
                safe = np.where(np.isfinite(new), new, np.float32(0))
                alpha = np.where(np.isfinite(m), exp2((m - safe).astype(np.float32)), np.float32(0))
                pr = exp2((sj - safe + off).astype(np.float32))
                pc = _convert(pr, p)
                l_sum = l_sum * alpha + dtype_sum(pr if rowsum == "unconverted" else pc)
                acc = acc * alpha + matmul(pc, v[..., j0 : j0 + KEY_BLOCK, :], np.float32)
                m = new
            o = acc / l_sum * dv
    o = np.where(l_sum > 0, o, np.float32(0))  # (a query with nothing kept: 0, FlashAttention's convention)
    return _round_to(o.astype(np.float64), out)


def _built(name, doc, **settings):
    def f(q8, k8, v8, descale_q, descale_k, descale_v, mask=None):
        return kernel(q8, k8, v8, descale_q, descale_k, descale_v, mask, **settings)

    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


@candidate(kind="attention_fp8", name="attention_fp8.scheme_standard")
def scheme_standard(q8, k8, v8, descale_q, descale_k, descale_v, mask=None, scheme=DEFAULT_SCHEME):
    """The standard comparison of every attention_fp8 row: FlashAttention 3's form (blocks of 128 keys, a running max
    rescaled whenever it grows) under the scheme given (the candidate's declared one, which the loop passes as this
    keyword), o in float32, which the loop rounds once to the audited dtype. Undeclared: P in float32."""
    settings = scheme_of(scheme).settings
    return kernel(q8, k8, v8, descale_q, descale_k, descale_v, mask, out=np.float32, **settings)


@candidate(kind="attention_fp8", name="attention_fp8.scheme_best")
def scheme_best(q8, k8, v8, descale_q, descale_k, descale_v, mask=None, scheme=DEFAULT_SCHEME):
    """Best practice under the scheme given (as `scheme_standard` takes it): the row's true max first (two passes),
    P converted once; softaudit.fp8's standard algorithm."""
    settings = scheme_of(scheme).settings
    return kernel(q8, k8, v8, descale_q, descale_k, descale_v, mask, two_pass=True, out=np.float32, **settings)


fa3 = _built(
    "fa3",
    "FlashAttention 3's form: P in e4m3 with max offset 8 (P <= 2**8), row sum from the unconverted P. Sound under "
    "its scheme; P's 4 significand bits cost about 16x what P in bfloat16 does.",
)
p_bf16 = _built(
    "p_bf16",
    "P in bfloat16 (no offset), row sum from the unconverted P: FP8 storage, BF16 compute (FlashAttention #1848's "
    "precision). Sound under its scheme.",
    p="bfloat16",
    offset=0.0,
)
stale_max_budget = _built(
    "stale_max_budget",
    "A running max kept stale while it grows by less than 4, with the offset lowered to 4 so P stays below "
    "2**8 <= 448: the skipped rescale within its offset budget (FlashAttention PR #2717's fix). Sound.",
    stale=4.0,
    offset=4.0,
)
stale_max = _built(
    "stale_max",
    "A defect (FlashAttention #2716): the running max kept stale while it grows by less than 4, with offset 8, so P "
    "reaches 2**12; the saturating e4m3 conversion clamps it at 448 while the row sum adds the unclamped values.",
    stale=4.0,
)
dropped_descale = _built(
    "dropped_descale",
    "A defect (vLLM PR #51363): descale_k dropped on the path, read as 1: the scores come out scaled wrongly, "
    "head by head.",
    drop=("k",),
)
best_e4m3 = _built(
    "best_e4m3",
    "Best practice under P in e4m3: the row's true max first (two passes), P = 2**(s - m + 8) in e4m3, row sum "
    "from the unconverted P.",
    two_pass=True,
)
best_bf16 = _built(
    "best_bf16",
    "Best practice under P in bfloat16: the row's true max first, P in bfloat16, row sum from the unconverted P.",
    p="bfloat16",
    offset=0.0,
    two_pass=True,
)
best_float32 = _built(
    "best_float32",
    "Best practice with nothing but the inputs in FP8: P in float32 throughout, one rounding of o.",
    p="float32",
    offset=0.0,
    two_pass=True,
)

#: name -> (callable, its scheme (a name of softaudit.fp8.SCHEMES or Scheme's fields), sound)
BUILTINS = {
    "attention_fp8.fa3": (fa3, "fa3", True),
    "attention_fp8.p_bf16": (p_bf16, "p_bf16", True),
    "attention_fp8.stale_max_budget": (stale_max_budget, {"p": "float8_e4m3fn", "offset": 4.0}, True),
    "attention_fp8.stale_max": (stale_max, "fa3", False),
    "attention_fp8.dropped_descale": (dropped_descale, "fa3", False),
    "attention_fp8.best_e4m3": (best_e4m3, "fa3", True),
    "attention_fp8.best_bf16": (best_bf16, "p_bf16", True),
    "attention_fp8.best_float32": (best_float32, "float32", True),
}

# Each kernel a candidate of the audit loop with its scheme declared (`softaudit run softaudit.candidates.
# attention_fp8`); the main job leaves this module out (docs/fp8.md).
for _name, (_f, _scheme, _) in BUILTINS.items():
    globals()[_f.__name__] = candidate(_f, kind="attention_fp8", name=_name, scheme=_scheme)
