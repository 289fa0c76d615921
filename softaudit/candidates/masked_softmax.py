"""Built-in masked softmax candidates: the masking idioms people write, each around a float32-accumulated softmax.

The fill value is written in the dtype, as a kernel for that dtype holds it; the softmax itself is the best
practice one, so each candidate shows what its masking idiom alone does. `where_in_dtype` is the plain comparison:
the best-practice idiom computed in the dtype itself.
"""

from __future__ import annotations

import numpy as np

from ..adapters import candidate
from ._ops import const, dtype_sum, exp, row_max, rowwise, running_sum, work_dtype
from .softmax import max_shifted_f32acc


def _normalised(e, s, mask):
    """e / s, and zeros on the fully masked rows only: guarding on s > 0 instead would turn a kept NaN (NaN > 0 is
    false) and a row of kept -inf entries into zeros, where the exact result is NaN."""
    kept = mask.any(axis=-1, keepdims=True)
    return np.where(kept, e / np.where(kept, s, np.ones((), s.dtype)), np.zeros((), e.dtype))


def _filled(x, mask, fill):
    return max_shifted_f32acc.__wrapped__(np.where(mask, x, const(fill, x.dtype)))


@candidate(kind="masked_softmax", name="masked_softmax.fill_neg1e9")
@rowwise
def fill_neg1e9(x, mask):
    """softmax(where(mask, x, -1e9)). Weakness: -1e9 is -inf in float16 (and -1e9 rounds in bfloat16): a fully
    masked row gives NaN in float16 and a uniform row elsewhere; kept logits below -1e9 lose to the fill."""
    return _filled(x, mask, -1e9)


@candidate(kind="masked_softmax", name="masked_softmax.fill_neg1e4")
@rowwise
def fill_neg1e4(x, mask):
    """softmax(where(mask, x, -1e4)), a float16-safe constant. Weakness: kept logits below about -1e4 + 10 lose
    probability to masked entries (a mask leak), and a fully masked row comes out uniform."""
    return _filled(x, mask, -1e4)


@candidate(kind="masked_softmax", name="masked_softmax.fill_neginf")
@rowwise
def fill_neginf(x, mask):
    """softmax(where(mask, x, -inf)). Weakness: a fully masked row is -inf - (-inf) = NaN."""
    return _filled(x, mask, -np.inf)


@candidate(kind="masked_softmax", name="masked_softmax.fill_finfo_min")
@rowwise
def fill_finfo_min(x, mask):
    """softmax(where(mask, x, finfo(dtype).min)). Weakness: a fully masked row comes out uniform, and a kept logit
    can sit below or near finfo.min only in theory; the fill never overflows to NaN."""
    return _filled(x, mask, "finfo_min")


@candidate(kind="masked_softmax", name="masked_softmax.where")
@rowwise
def where(x, mask):
    """Best practice: max over kept entries, exp only where kept, zeros for a fully masked row (as PyTorch's safe
    softmax since 2.5, the ONNX Attention spec and FlashAttention do), in float32 for 16-bit inputs."""
    w = x.astype(work_dtype(x.dtype))
    m = np.where(mask, w, -np.inf).max(axis=-1, keepdims=True, initial=-np.inf)
    e = np.where(mask, exp(w - np.where(np.isfinite(m), m, 0)), 0)
    return _normalised(e, dtype_sum(e), mask).astype(x.dtype)


@candidate(kind="masked_softmax", name="masked_softmax.where_in_dtype")
@rowwise
def where_in_dtype(x, mask):
    """The where idiom (max over kept entries, exp only where kept, zeros for a fully masked row) with every step
    rounded to the dtype and the sum pairwise in the dtype, as a kernel written for a 16-bit dtype without upcasting
    does. Weakness: the dtype's rounding, about log2(n) ulps of the dtype on long rows."""
    zero = np.zeros((), x.dtype)
    # finfo.min stands in for -inf as the masked entries' value: float8_e4m3fn has no -inf
    m = row_max(np.where(mask, x, const("finfo_min", x.dtype)))
    e = np.where(mask, exp(x - np.where(np.isfinite(m), m, zero)), zero)
    return _normalised(e, dtype_sum(e), mask)


@candidate(kind="masked_softmax", name="masked_softmax.where_running")
@rowwise
def where_running(x, mask):
    """where_in_dtype with the sum taken one term at a time (recursive summation) in the dtype. Weakness: a sum
    error growing with n ((n - 1) u at worst)."""
    zero = np.zeros((), x.dtype)
    m = row_max(np.where(mask, x, const("finfo_min", x.dtype)))
    e = np.where(mask, exp(x - np.where(np.isfinite(m), m, zero)), zero)
    return _normalised(e, running_sum(e), mask)
