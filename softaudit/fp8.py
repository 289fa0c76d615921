"""FP8 audits: the quantize step (`quantize_fp8`) and FP8 attention (`attention_fp8`) judged against exact references,
an FP8 kernel against the best its declared scheme allows.

attention_fp8, `f(q8, k8, v8, descale_q, descale_k, descale_v, mask=None) -> o`: the exact result is the attention
of the dequantized inputs as given (q8 descale_q exactly ...), rounded once to o's dtype, with the conditioning scale
of those inputs (softaudit.reference._fp8.attention). A kernel declares its scheme, what it keeps in FP8 and how
(`Scheme`; `scheme=` on `audit_attention_fp8` or the `declare` decorator): the row's standard algorithm is the best
kernel under that scheme, emulated (each conversion of P rounded to nearest with saturation, the row sum from the
converted or unconverted P), and a row fails past the policy's line drawn from it (`Policy.fail_above`), so a sound
FP8 kernel passes and one that loses more than its scheme must fails; the note says how much of the error the scheme
explains, and a failing row's cause is named where a bug model (softaudit/candidates/bugs/fp8.py) reproduces it.
Undeclared, the most precise scheme (P in float32) is assumed, and the row says so.

quantize_fp8, `f(x, fmt, granularity) -> (x8, descale)`: x8 against one rounding of x scale (saturating) and
descale against RN32(1 / scale), scale = RN32(fmt_max / amax) or its power-of-two form (docs/fp8.md).

attention_fp8 is a kind of the audit loop too (softaudit/kinds/attention_fp8.py: `softaudit run` with a candidate
marked kind="attention_fp8", scheme=...), with the same families, comparisons and bug models; this module judges
one kernel on its own, its output's dtype taken from what it returns.
"""

from __future__ import annotations

import dataclasses
import zlib

import ml_dtypes
import numpy as np

from .kinds.attention_fp8 import ATTENTION_FAMILIES as ATTENTION_FAMILIES
from .kinds.attention_fp8 import DEFAULT_SCHEME as DEFAULT_SCHEME
from .kinds.attention_fp8 import SCHEMES as SCHEMES
from .kinds.attention_fp8 import Scheme as Scheme
from .kinds.attention_fp8 import attention_cases as attention_cases
from .kinds.attention_fp8 import scheme_of as scheme_of
from .kinds.attention_fp8 import vsum as _vsum
from .kinds.quantize_fp8 import quantize_cases as _quantize_cases
from .reference import fp8 as _fp8


def declare(scheme):
    """Mark an FP8 attention kernel with its scheme: @softaudit.fp8.declare("fa3"). softaudit.candidate(kind=
    "attention_fp8") on a function marked so takes its scheme (or give scheme= there)."""
    found = scheme_of(scheme)

    def mark(f):
        f.__softaudit_fp8_scheme__ = found
        return f

    return mark


# ---------------------------------------------------------------------------------------------- the measures


@dataclasses.dataclass
class _Exact:
    """A case's exact side: the reference rounded to o's dtype, the exact values, the conditioning scale, the
    defined elements and the unit roundoff of o's dtype."""

    rounded: np.ndarray
    exact: np.ndarray
    scale: np.ndarray
    defined: np.ndarray
    u: float


_EXACT: dict = {}


def _exact(arrays, mask, out) -> _Exact:
    key = (id(arrays["q8"]), np.dtype(out).name)
    if key in _EXACT and _EXACT[key][0] is arrays["q8"]:
        return _EXACT[key][1]
    from .reference import format_of

    names = ("q8", "k8", "v8", "descale_q", "descale_k", "descale_v")
    ref, (q, k, v, keep) = _fp8.attention(*(arrays[n] for n in names), mask, dtype=out)
    exact = ref.hi + ref.lo
    defined = np.broadcast_to(~np.asarray(ref.undefined)[..., None], exact.shape) & np.isfinite(exact)
    fmt = format_of(out)
    scale = np.maximum(np.abs(exact) + _vsum(q, k, v, keep), 2.0**fmt.emin)
    found = _Exact(ref.value.astype(np.float64), exact, scale, defined, 2.0**-fmt.precision)
    if len(_EXACT) > 64:
        _EXACT.clear()
    _EXACT[key] = (arrays["q8"], found)
    return found


def _cond_err(ex: _Exact, y) -> tuple[float, int]:
    """The largest |y - exact| / (u scale) over defined outputs, and how many of them are NaN or infinite."""
    y = np.asarray(y).astype(np.float64)
    bad = int(np.count_nonzero(ex.defined & ~np.isfinite(y)))
    with np.errstate(invalid="ignore"):
        err = np.where(ex.defined & np.isfinite(y), np.abs(y - ex.exact) / (ex.u * ex.scale), 0.0)
    return float(err.max(initial=0.0)), bad


#: attention_fp8's positional arguments, in order.
ATTENTION_ARGUMENTS = ("q8", "k8", "v8", "descale_q", "descale_k", "descale_v")


def _call(f, arrays, mask):
    return f(*(arrays[n] for n in ATTENTION_ARGUMENTS), mask)


def _out_dtype(y) -> np.dtype:
    dt = np.asarray(y).dtype
    if dt not in (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)):
        raise ValueError(f"o must be bfloat16, float16 or float32, got {dt}")
    return dt


def _standard(scheme: Scheme, out):
    """The best kernel under the scheme (softaudit.candidates.attention_fp8's two-pass kernel), o in `out`."""
    from .candidates.attention_fp8 import kernel

    def f(q8, k8, v8, dq, dk, dv, mask=None):
        return kernel(
            q8, k8, v8, dq, dk, dv, mask, p=scheme.p, offset=scheme.offset, rowsum=scheme.rowsum, two_pass=True, out=out
        )

    return f


def audit_attention_fp8(f, *, scheme=None, name=None, families=None, suite="quick", policy=None, seed=0):
    """Judge an FP8 attention kernel family by family: a pandas DataFrame, one row per family (candidate, kind,
    dtype, family, scheme, verdict, max_err and standard_err: the candidate's and the scheme's best kernel's largest
    |o - exact| / (u (|o| + sum p|v|)), fail_above, nan_outputs, cause, note).

    scheme: the kernel's declared scheme (a name of SCHEMES, a Scheme, a mapping), else the one `declare` marked it
    with, else P in float32 and the row says it was assumed."""
    import pandas as pd

    from .policy import Policy
    from .reference import format_of

    policy = Policy() if policy is None else policy
    declared = scheme if scheme is not None else getattr(f, "__softaudit_fp8_scheme__", None)
    found = scheme_of(DEFAULT_SCHEME if declared is None else declared)
    assumed = "" if declared is not None else "no scheme declared: judged against P in float32, the most precise; "
    name = name or getattr(f, "__name__", repr(f))
    rows = []
    for family in families or ATTENTION_FAMILIES:
        cases = attention_cases(family, suite, seed)
        row = {"candidate": name, "kind": "attention_fp8", "family": family, "scheme": found.words}
        worst, std_worst, nans, worst_case, dtype = 0.0, 0.0, 0, None, None
        try:
            outs = [np.asarray(_call(f, a, m)) for a, m, _ in cases]
            dtype = _out_dtype(outs[0])
            for (arrays, _, _), y in zip(cases, outs):
                want = arrays["q8"].shape[:-1] + arrays["v8"].shape[-1:]
                if y.shape != want or y.dtype != dtype:
                    raise ValueError(f"o must be {dtype} of shape {want}, got {y.dtype} of shape {y.shape}")
        except Exception as exc:  # (another's kernel: its failure is its row's, never the audit's)
            rows.append(row | {"dtype": "", "verdict": "error", "note": f"raised {type(exc).__name__}: {exc}"})
            continue
        for i, ((arrays, mask, _), y) in enumerate(zip(cases, outs)):
            ex = _exact(arrays, mask, dtype)
            err, bad = _cond_err(ex, y)
            std, _ = _cond_err(ex, _call(_standard(found, dtype), arrays, mask))
            nans += bad
            std_worst = max(std_worst, std)
            if err >= worst:
                worst, worst_case = err, i
        fmt = format_of(dtype)
        line = policy.fail_above(fmt, std_worst, "attention")
        verdict = "fail" if nans or worst > line else "pass"
        explains = min(std_worst, worst)
        note = (
            f"{assumed}{found.words} explains {explains:.3g} of {worst:.3g} u (|o| + sum p|v|) (fail above {line:.3g})"
        )
        if nans:
            note = f"{nans} NaN or infinite outputs where the exact result is finite; " + note
        cause = ""
        if verdict == "fail":
            arrays, mask, description = cases[worst_case]
            cause, words = _diagnose(f, arrays, mask, outs[worst_case], dtype, found, line)
            note += f"; worst case: {description}" + (f"; {words}" if words else "")
        rows.append(
            row
            | {
                "dtype": dtype.name,
                "verdict": verdict,
                "max_err": worst,
                "standard_err": std_worst,
                "fail_above": line,
                "nan_outputs": nans,
                "cause": cause,
                "note": note,
            }
        )
    return pd.DataFrame(rows)


def _diagnose(f, arrays, mask, y, dtype, scheme: Scheme, line: float) -> tuple[str, str]:
    """(cause, words): the bug model a variant of which reproduces the output on the worst case (within the fail
    line of it) while its fix has no error past the line; ("", "") where none does."""
    from .candidates.bugs import fp8 as models

    ex = _exact(arrays, mask, dtype)
    y = np.asarray(y).astype(np.float64)
    for model in models.ATTENTION_MODELS:
        for variant in model.variants:
            buggy = np.asarray(variant.buggy(*_args(arrays), mask, out=dtype)).astype(np.float64)
            with np.errstate(invalid="ignore"):
                both = ex.defined & np.isfinite(buggy) & np.isfinite(y)
                apart = np.where(both, np.abs(buggy - y) / (ex.u * ex.scale), 0.0).max(initial=0.0)
            if apart > line or _cond_err(ex, buggy)[0] <= line:
                continue
            fixed_err, _ = _cond_err(ex, variant.fixed(*_args(arrays), mask, out=dtype))
            if fixed_err <= line:
                return model.name, f"cause: {model.mistake} ({variant.label}); fix: {model.fix}"
    return "", ""


def _args(arrays):
    return tuple(arrays[n] for n in ("q8", "k8", "v8", "descale_q", "descale_k", "descale_v"))


# ------------------------------------------------------------------------------------------------- quantize


def _ordinal(x8) -> np.ndarray:
    """FP8 values as integers in value order (neighbours differ by 1; +0 and -0 both 0)."""
    bits = np.asarray(x8).view(np.uint8).astype(np.int64)
    mag = bits & 0x7F
    return np.where(bits & 0x80, -mag, mag)


#: A descale more than one float32 step from the exact one, up to this many, is a warn: it adds a relative error
#: below 2**-15, far below any FP8 step, but says the scale was not correctly rounded; further is a fail.
DESCALE_WARN_STEPS = 256


def audit_quantize_fp8(f, *, power_of_two=False, name=None, seed=0):
    """Judge a quantize step, `f(x, fmt, granularity) -> (x8, descale)`, on every format and granularity: a
    DataFrame, one row per (fmt, granularity, case) with the x8 values off by one FP8 step and by more, NaN or
    infinite ones, the descale's distance in float32 steps, the verdict (pass: every x8 within one step, as a float32
    product before the conversion may move a tie, and the descale within one; warn: the descale within
    DESCALE_WARN_STEPS; fail otherwise) and its cause in words.
    power_of_two: the step's declared scale convention (the reference's)."""
    import pandas as pd

    rng = np.random.default_rng(zlib.crc32(f"quantize_fp8/{seed}".encode()))
    name = name or getattr(f, "__name__", repr(f))
    rows = []
    cases = _quantize_cases(rng)
    for fmt in _fp8.FORMATS:
        for gran in _fp8.GRANULARITIES:
            for x, description in cases:
                rows.append(_quantize_row(f, x, fmt, gran, power_of_two, description) | {"candidate": name})
    return pd.DataFrame(rows)


def _quantize_row(f, x, fmt, gran, power_of_two, description) -> dict:
    row = {"kind": "quantize_fp8", "dtype": fmt, "granularity": gran, "case": description}
    x8_ref, d_ref = _fp8.quantize(x, fmt, gran, power_of_two)
    try:
        x8, descale = f(x, fmt, gran)
        x8 = np.asarray(x8)
        if x8.dtype != x8_ref.dtype:
            raise ValueError(f"x8 must be {fmt}, got {x8.dtype}")
        descale = np.asarray(descale, np.float32).reshape(d_ref.shape)
    except Exception as exc:  # (another's code: its failure is its row's)
        return row | {"verdict": "error", "note": f"raised {type(exc).__name__}: {exc}"}
    bad = ~np.isfinite(x8.astype(np.float64))
    steps = np.where(bad, 0, np.abs(_ordinal(x8) - _ordinal(x8_ref)))
    d_steps = np.abs(d_ref.view(np.int32).astype(np.int64) - descale.view(np.int32).astype(np.int64))
    d_bad = ~np.isfinite(descale) | (descale == 0)
    top = _fp8.fmt_max(fmt)
    clamped = int(np.count_nonzero((np.abs(x8.astype(np.float64)) == top) & (np.abs(x8_ref.astype(np.float64)) < top)))
    far = d_steps.max(initial=0)
    fail = bad.any() or d_bad.any() or steps.max(initial=0) > 1 or far > DESCALE_WARN_STEPS
    warn = not fail and far > 1
    if bad.any() and (_fp8.amax_of(x, gran) == 0).any():
        cause = (
            "zero_amax: a group whose amax is 0 gets scale fmt_max / 0 = inf and x8 = 0 x inf = NaN; guard it (scale 1)"
        )
    elif d_bad.any():
        cause = (
            "scale_overflow: fmt_max / amax past float32's range gives scale inf and descale 0; clamp the scale to "
            "float32's largest value"
        )
    elif clamped:
        cause = (
            f"amax_too_small: {clamped} values clamped at {top:g} where the exact quantization is below it: amax "
            "was taken over fewer values than share the scale (the wrong axis)"
        )
    elif bad.any():
        cause = "overflow: x scale past the format's range without saturation"
    else:
        cause = ""
    return row | {
        "verdict": "fail" if fail else "warn" if warn else "pass",
        "x8_off_by_one": int(np.count_nonzero(steps == 1)),
        "x8_off_more": int(np.count_nonzero(steps > 1)),
        "x8_nonfinite": int(np.count_nonzero(bad)),
        "descale_steps": int(d_steps.max(initial=0)),
        "cause": cause if fail else "",
        "note": "; ".join(
            n
            for n in (
                "x scale rounded to float32 before the conversion moved a tie" if steps.any() and not fail else "",
                f"descale {far} float32 steps from RN32(1 / scale): the scale was not correctly rounded (torch's "
                "float / tensor multiplies by the reciprocal)"
                if warn
                else "",
            )
            if n
        ),
    }
