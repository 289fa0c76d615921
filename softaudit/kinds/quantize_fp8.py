"""quantize_fp8: the quantize step people write before an FP8 kernel, judged against its exact rounding (docs/fp8.md).

`f(x, fmt, granularity) -> (x8, descale)`, called f(x, fmt=..., granularity=...): x float32 (B, H, L, d), kept as the
case gives it (`Kind.kept`); fmt the audited dtype, the FP8 format (`Kind.dtypes`), and granularity "tensor", "head" or
"block", both the case's options. x8 is measured in the FP8 format's steps and the descale in float32's
(`Kind.formats`): the conditioning scale of each is its format's step at the exact value over u, so the error reads in
steps. The scale convention, rounded to nearest or a power of two, is a declared convention every case is judged under
(`Kind.standing`), as attention_fp8's scheme is."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ._kind import Kind

GRANULARITIES = ("tensor", "head", "block")
_PRECISION = {"float8_e4m3fn": (4, -6), "float8_e5m2": (3, -14), "float32": (24, -126)}


def quantize_cases(rng) -> list:
    """(x float32 (B, H, L, d), description): the quantize cases, of this kind's family and of softaudit.fp8's
    standalone audit."""
    heads = rng.standard_normal((2, 4, 200, 16)) * np.array([1e-3, 1.0, 30.0, 2e3])[None, :, None, None]
    massive = rng.standard_normal((1, 2, 200, 16))
    massive[..., 5] *= 3000.0
    zero = rng.standard_normal((1, 3, 200, 16))
    zero[:, 1] = 0.0
    tiny = rng.standard_normal((1, 2, 200, 16)) * 1e-39  # float32 subnormals: fmt_max / amax past float32's range
    return [
        (heads.astype(np.float32), "heads of scale 1e-3 to 2e3"),
        (massive.astype(np.float32), "massive activations in one channel"),
        (zero.astype(np.float32), "one head all zero"),
        (np.zeros((1, 2, 130, 16), np.float32), "every value zero (amax 0)"),
        (tiny.astype(np.float32), "float32 subnormal values: the scale saturates float32"),
    ]


def _maker(granularity: str):
    def make(kind, fmt, size, rng):
        options = {"fmt": fmt.name, "granularity": granularity}
        return [({"x": x}, None, f"{d}, per {granularity}", {}, options) for x, d in quantize_cases(rng)]

    return make


def _step(values: np.ndarray, fmt: str) -> np.ndarray:
    """The format's spacing at each |value| (its smallest subnormal at 0 and below its normal range)."""
    p, emin = _PRECISION[fmt]
    _, e = np.frexp(np.abs(values))
    return np.ldexp(1.0, np.maximum(e - p, emin - p + 1).astype(int))


def _descale_shape(granularity: str, shape: tuple) -> tuple:
    return (1,) if granularity == "tensor" else shape  # (a per-tensor descale held as one value, as a mean is)


def reference(kind, inputs: dict, mask, dtype, fmt=None, granularity="tensor", scale="nearest") -> tuple:
    """(x8, descale): x8's exact value x scale saturated at fmt_max (exact in float64: x and scale are float32),
    rounded once to the FP8 format; the descale's exact value 1 / scale, rounded once to float32."""
    from ..reference import Result
    from ..reference import fp8 as _fp8

    fmt = np.dtype(dtype).name if fmt is None else fmt
    x = np.asarray(inputs["x"], np.float64)
    amax = _fp8.amax_of(x, granularity)
    scales, descale = _fp8.scales(amax, fmt, power_of_two=scale == "power_of_two")
    per = _fp8.spread(scales.astype(np.float64), x.shape, granularity)
    top = _fp8.fmt_max(fmt)
    with np.errstate(invalid="ignore"):
        exact = np.clip(x * per, -top, top)
    undefined = ~np.isfinite(exact)
    x8 = Result(
        _fp8.to_fp8(exact, fmt), exact, np.zeros(x.shape), np.zeros(x.shape), np.zeros(x.shape, np.int8), undefined
    )
    hi, lo = np.empty(descale.shape), np.empty(descale.shape)
    for i, s in enumerate(scales.astype(np.float64).flat):
        if np.isfinite(s):
            inverse = 1 / Fraction(s)
            hi.flat[i] = float(inverse)
            lo.flat[i] = float(inverse - Fraction(hi.flat[i]))
        else:
            hi.flat[i] = lo.flat[i] = np.nan
    shape = _descale_shape(granularity, descale.shape)
    d = Result(
        descale.reshape(shape),
        hi.reshape(shape),
        lo.reshape(shape),
        np.zeros(shape),
        np.zeros(shape, np.int8),
        ~np.isfinite(hi.reshape(shape)),
    )
    return x8, d


def conditioning(kind, inputs: dict, mask, references, fmt=None, granularity="tensor", scale="nearest") -> tuple:
    """Each output's scale is its format's step at the exact value over u, so an error reads in steps: x8 in the
    FP8 format's, the descale in float32's."""
    x8, d = references
    fmt = np.asarray(x8.value).dtype.name if fmt is None else fmt
    u8, u32 = 2.0 ** -_PRECISION[fmt][0], 2.0**-24
    exact = (d.hi + d.lo).astype(np.float64)
    return (
        {"undefined": np.asarray(x8.undefined), "scale": _step(np.nan_to_num(x8.hi), fmt) / u8},
        {"undefined": np.asarray(d.undefined), "scale": _step(np.nan_to_num(exact), "float32") / u32},
    )


def element_inputs(kind, pc, position: tuple) -> tuple[dict, None]:
    """The case's x, whole: its group's amax sets the element's scale."""
    return {"group": pc.inputs["x"]}, None


def declared(inputs, mask, options, conventions) -> tuple:
    """The exact problem under a declared power-of-two scale: the comparisons and the reference take it as the
    keyword `scale`."""
    return mask, dict(options) | {"scale": conventions["scale"]}


_MAKERS = {
    f"quantize_{g}": (f"the quantize cases (heads of scale 1e-3 to 2e3, massive, zero, subnormal) per {g}", _maker(g))
    for g in GRANULARITIES
}

QUANTIZE_FP8 = Kind(
    "quantize_fp8",
    "f(x) -> (x8, descale), called f(x, fmt=..., granularity=...): x float32 (B, H, L, d), fmt the audited FP8 "
    "format, granularity 'tensor', 'head' or 'block'; descale () per tensor, (B, H) per head, (B, H, blocks) per block",
    arguments=("x",),
    keywords=(),
    outputs=("x8", "descale"),
    plain="quantize_fp8.scaled_standard",
    standard=("quantize_fp8.scaled_standard",),
    best="quantize_fp8.scaled_exact",
    best_practice="x scale rounded once to the FP8 format, descale = RN32(1 / scale) (quantize_fp8.scaled_exact)",
    families=tuple(_MAKERS),
    reference=reference,
    conditioning=conditioning,
    element_inputs=element_inputs,
    reduction=("x", -1),
    row_wise=False,
    reduces=False,
    logarithmic=False,
    batched=False,
    scale_terms="the format's step at the exact value",
    makers=_MAKERS,
    declarable={"scale": ("scale", ("nearest", "power_of_two"))},
    declared=declared,
    standing=("scale",),
    kept=("x",),
    dtypes=("float8_e4m3fn", "float8_e5m2"),
    measured=True,
    formats={"descale": "float32"},
)
