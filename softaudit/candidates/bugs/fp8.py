"""Bug models of FP8 attention and of the quantize step, each the standard algorithm with one known mistake beside the
same algorithm without it. Attention, `f(q8, k8, v8, descale_q, descale_k, descale_v, mask=None) -> o`: FlashAttention
3's forward under a scheme (softaudit.candidates.attention_fp8's `kernel`); the quantize step, `f(x, fmt, granularity)
-> (x8, descale)`: softaudit.candidates.quantize_fp8's textbook step. The audit loop (softaudit/diagnosis.py) and
softaudit.fp8 name a failing row's cause only where a variant reproduces the candidate's output and its fix does not
have the error. A variant takes the loop's keyword `scheme` (the candidate's declared scheme, which the model's own
settings replace) and `out`, o's dtype (float32, which the loop reads against the audited dtype,
where none is given)."""

from __future__ import annotations

import numpy as np

from .. import quantize_fp8
from ..attention_fp8 import kernel
from ._model import Model, Variant

_SCHEMES = {"P in e4m3, offset 8": {"p": "float8_e4m3fn", "offset": 8.0}, "P in bfloat16": {"p": "bfloat16"}}


def _variant(label, buggy, fixed) -> Variant:
    return Variant(label, _model(buggy), _model(fixed))


def _model(settings: dict):
    def f(q8, k8, v8, descale_q, descale_k, descale_v, mask=None, *, scheme=None, out=np.float32):
        return kernel(q8, k8, v8, descale_q, descale_k, descale_v, mask, out=out, **settings)

    return f


STALE_MAX = Model(
    "stale_max",
    "attention_fp8",
    "the running max is kept stale while a block's max exceeds it by less than a threshold, and the offset of "
    "P = 2**(s - m + offset) leaves no room for it: P passes 448 and the saturating e4m3 conversion clamps the "
    "largest weights while the row sum adds them unclamped (FlashAttention #2716)",
    "lower the offset by the stale threshold so 2**(offset + threshold) <= 448, or rescale whenever the max grows "
    "(FlashAttention PR #2717)",
    tuple(
        _variant(f"P in e4m3, offset 8, stale below {t:g}", {"stale": t}, {})
        for t in (4.0, 2.0, 8.0)  # (4 is FlashAttention's; each threshold is one kernel's choice)
    ),
)

DROPPED_DESCALE = Model(
    "dropped_descale",
    "attention_fp8",
    "a descale factor is dropped on the kernel's path (read as 1), so scores or outputs are off by the head's "
    "quantization scale (vLLM PR #51363)",
    "pass descale_q, descale_k and descale_v to every path, per (batch, KV head)",
    tuple(
        _variant(f"{scheme}, descale_{which} dropped", {"drop": (which,), **settings}, settings)
        for scheme, settings in _SCHEMES.items()
        for which in ("q", "k", "v")
    ),
)


def _step(f):
    def step(x, fmt, granularity, scale="nearest"):
        return f(x, fmt, granularity)

    return step


UNGUARDED_SCALE = Model(
    "unguarded_scale",
    "quantize_fp8",
    "scale = fmt_max / amax is taken unguarded: a zero amax gives scale inf and x8 = 0 x inf = NaN, and an amax "
    "below float32's normal range gives scale inf and descale 0",
    "use scale 1 where amax is 0, and clamp the scale to float32's largest value",
    (Variant("scale rounded to nearest", _step(quantize_fp8.unguarded), _step(quantize_fp8.textbook)),),
)

WRONG_AXIS = Model(
    "amax_too_small",
    "quantize_fp8",
    "amax is taken over fewer values than share the scale (the wrong axis: the last token of each head), so the "
    "larger values saturate at fmt_max",
    "take amax over every value that shares the scale",
    (Variant("per head, amax over the last token", _step(quantize_fp8.wrong_axis), _step(quantize_fp8.textbook)),),
)

#: FP8 attention's models (softaudit.fp8's standalone audit replays these), then the quantize step's.
ATTENTION_MODELS = (STALE_MAX, DROPPED_DESCALE)
MODELS = (*ATTENTION_MODELS, UNGUARDED_SCALE, WRONG_AXIS)
