"""Built-in quantize steps, `f(x, fmt, granularity) -> (x8, descale)`, as people write them before an FP8 kernel
(x float32; granularity "tensor", "head" or "block": softaudit.reference._fp8), each with its weakness.

Every one computes in float32 as a framework does: amax, scale = fmt_max / amax (or a power of two), x scale
rounded to float32 and then converted with saturation (two roundings: the product's can move a tie), descale =
1 / scale. Each takes the FP8 conversion from softaudit's exact one, which ml_dtypes and torch match bit for bit.
"""

from __future__ import annotations

import numpy as np

from ..adapters import candidate
from ..reference import fp8 as _fp8


def _amax(x, granularity):
    return _fp8.amax_of(x, granularity).astype(np.float32)


def _finish(x, fmt, granularity, scale):
    scale = np.asarray(scale, np.float32)
    with np.errstate(all="ignore"):
        per = _fp8.spread(scale.astype(np.float64), x.shape, granularity).astype(np.float32)
        x8 = _fp8.to_fp8((np.asarray(x, np.float32) * per).astype(np.float64), fmt)
        descale = (np.float32(1) / scale).astype(np.float32)
    return x8, descale


def textbook(x, fmt, granularity):
    """amax, scale = fmt_max / amax in float32 (guarded: 1 where amax is 0), x scale in float32, a saturating
    conversion: sound; the float32 product rounds once before the conversion."""
    amax = _amax(x, granularity)
    with np.errstate(all="ignore"):
        scale = np.where(amax > 0, np.float32(_fp8.fmt_max(fmt)) / np.where(amax > 0, amax, 1), 1)
    return _finish(x, fmt, granularity, np.minimum(scale, np.finfo(np.float32).max))


def power_of_two(x, fmt, granularity):
    """The scale rounded down to a power of two (DeepSeek-V3's and MXFP8's choice): x scale and descale are exact,
    at the price of up to half of FP8's range left unused. Sound, judged against the power-of-two reference."""
    _, descale = _fp8.scales(_fp8.amax_of(x, granularity), fmt, power_of_two=True)
    scale, _ = _fp8.scales(_fp8.amax_of(x, granularity), fmt, power_of_two=True)
    x8, _ = _finish(x, fmt, granularity, scale)
    return x8, descale


def wrong_axis(x, fmt, granularity):
    """A defect: amax taken over the last token of each head only (`x.abs().amax(-1)[..., -1]`), so every larger
    value elsewhere saturates at fmt_max."""
    if granularity != "head":
        return textbook(x, fmt, granularity)
    amax = np.abs(np.asarray(x, np.float32)[:, :, -1, :]).max(axis=-1)
    with np.errstate(all="ignore"):
        scale = np.where(amax > 0, np.float32(_fp8.fmt_max(fmt)) / np.where(amax > 0, amax, 1), 1)
    return _finish(x, fmt, granularity, scale.astype(np.float32))


def unguarded(x, fmt, granularity):
    """A defect: no guard for a zero amax, so an all-zero tensor or head gets scale inf, x8 = 0 x inf = NaN and
    descale 0."""
    amax = _amax(x, granularity)
    with np.errstate(all="ignore"):
        scale = np.float32(_fp8.fmt_max(fmt)) / amax
    return _finish(x, fmt, granularity, scale)


#: name -> (callable, power_of_two: which reference convention it is judged against, sound)
BUILTINS = {
    "quantize_fp8.textbook": (textbook, False, True),
    "quantize_fp8.power_of_two": (power_of_two, True, True),
    "quantize_fp8.wrong_axis": (wrong_axis, False, False),
    "quantize_fp8.unguarded": (unguarded, False, False),
}


# The comparisons of the audit loop's quantize_fp8 rows: the declared scale convention (the keyword `scale`,
# "nearest" or "power_of_two") computed as the textbook step does, and exactly.


@candidate(kind="quantize_fp8", name="quantize_fp8.scaled_standard")
def scaled_standard(x, fmt, granularity, scale="nearest"):
    """The standard comparison: the textbook step (x scale in float32, then the conversion), with the scale
    rounded to nearest or to a power of two as declared."""
    return (power_of_two if scale == "power_of_two" else textbook)(x, fmt, granularity)


@candidate(kind="quantize_fp8", name="quantize_fp8.scaled_exact")
def scaled_exact(x, fmt, granularity, scale="nearest"):
    """Best practice: x scale rounded once to the FP8 format (the product exact in float64), descale RN32(1 /
    scale): softaudit's exact quantize step."""
    x8, descale = _fp8.quantize(x, fmt, granularity, power_of_two=scale == "power_of_two")
    return x8, descale.reshape(-1) if granularity == "tensor" else descale


# Each step a candidate of the audit loop with its scale convention declared (`softaudit run
# softaudit.candidates.quantize_fp8 --dtype float8_e4m3fn`); the main job leaves this module out.
for _name, (_f, _two, _) in BUILTINS.items():
    _scale = "power_of_two" if _two else "nearest"
    globals()[_f.__name__] = candidate(_f, kind="quantize_fp8", name=_name, conventions={"scale": _scale})
