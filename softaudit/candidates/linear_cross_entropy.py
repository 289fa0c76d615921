"""Built-in linear cross-entropy candidates: f(x, weight, target, *, bias=None, cross_entropy's options) -> loss,
the cross-entropy of the logits x W^T + b, each forming the logits as its name says.

The product is `_ops.matmul`'s (each product in float32 for 16-bit dtypes, summed pairwise there, rounded once to
the dtype it is asked for), and the cross-entropy is `cross_entropy.f32acc`'s (best practice in the logits' dtype):
so each candidate differs from the others only where its logits are rounded.
"""

from __future__ import annotations

import numpy as np

from ..adapters import candidate
from ._ops import matmul, work_dtype
from .cross_entropy import chunked_b4096
from .cross_entropy import f32acc as _cross_entropy


def logits(x, weight, bias, dtype):
    """x W^T + b: the product summed in the working precision and rounded once to dtype, the bias added in dtype."""
    with np.errstate(all="ignore"):  # (a logit past the dtype's largest is inf: the materialised version's flaw)
        z = matmul(x, np.asarray(weight).T, dtype)
        if bias is not None:
            z = z + np.asarray(bias).astype(dtype)
    return z


@candidate(kind="linear_cross_entropy", name="linear_cross_entropy.materialised")
def materialised(x, weight, target, *, bias=None, **options):
    """The logits x W^T + b written out in the dtype, then cross-entropy on them (model code's lm_head then
    F.cross_entropy). Weakness: each logit rounded to the dtype moves the loss by up to u |logit|: in bfloat16 a
    logit of 300 is off by 1, and past 65,504 a float16 logit is inf."""
    return _cross_entropy(logits(x, weight, bias, x.dtype), target, **options)


@candidate(kind="linear_cross_entropy", name="linear_cross_entropy.f32_logits")
def f32_logits(x, weight, target, *, bias=None, **options):
    """Best practice: the logits in float32 for 16-bit dtypes (the dtype itself otherwise), cross-entropy in float32
    on them, the loss rounded once. Weakness: none known beyond the conditioning."""
    w = work_dtype(x.dtype)
    return np.asarray(_cross_entropy(logits(x, weight, bias, w), target, **options)).astype(x.dtype)


@candidate(kind="linear_cross_entropy", name="linear_cross_entropy.vocab_blocks")
def vocab_blocks(x, weight, target, *, bias=None, **options):
    """Cut Cross-Entropy's forward: the logits in float32 block by block of the vocabulary (4,096 classes), an
    online max and sum over the blocks, the loss lse - x_y, never the whole logit matrix. Weakness: lse - x_y
    cancels for a confident row (1 - p_y is lost in float32's rounding of lse), as cross_entropy.chunked_b4096."""
    w = work_dtype(x.dtype)
    return np.asarray(chunked_b4096(logits(x, weight, bias, w), target, **options)).astype(x.dtype)
