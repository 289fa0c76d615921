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

These two kinds are audited here, on their own families, rather than through the registered kinds' loop: their
inputs keep their own formats (FP8 and float32 beside o's dtype), which the loop's rounding to one audited dtype
does not express (docs/fp8.md says what the loop would need).

(Longer than the house's 400 lines: the two FP8 kinds are audited outside the registered loop, on families, exact
results and rows of their own that this module alone uses.)
"""

from __future__ import annotations

import dataclasses
import math
import zlib

import ml_dtypes
import numpy as np

from .reference import fp8 as _fp8

# ------------------------------------------------------------------------------------------------------- schemes


@dataclasses.dataclass(frozen=True)
class Scheme:
    """What an FP8 attention kernel keeps in low precision: P's format for the P V product ("float8_e4m3fn",
    "bfloat16", "float16" or "float32"), its offset (P = 2**(s - m + offset), at most 2**offset: FlashAttention 3
    takes 8 for e4m3), and whether the row sum adds the unconverted or the converted P; accumulation is float32."""

    p: str = "float32"
    offset: float = 0.0
    rowsum: str = "unconverted"

    def __post_init__(self):
        if self.p not in ("float8_e4m3fn", "float8_e5m2", "bfloat16", "float16", "float32"):
            raise ValueError(
                f"scheme p must be float8_e4m3fn, float8_e5m2, bfloat16, float16 or float32, got {self.p!r}"
            )
        if self.rowsum not in ("unconverted", "converted"):
            raise ValueError(f"scheme rowsum must be 'unconverted' or 'converted', got {self.rowsum!r}")
        if self.p.startswith("float8") and 2.0**self.offset > _fp8.fmt_max(self.p):
            raise ValueError(f"scheme offset {self.offset:g} puts P past {self.p}'s largest value")

    @property
    def words(self) -> str:
        off = f" with offset {self.offset:g}" if self.offset else ""
        short = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}.get(self.p, self.p)
        return f"P in {short}{off}" + (", row sum of the converted P" if self.rowsum == "converted" else "")


#: The schemes by name: FlashAttention 3's (P in e4m3, offset 8), P in bfloat16 (FP8 storage, BF16 compute) and
#: the most precise, P in float32 (assumed where none is declared).
SCHEMES = {
    "fa3": Scheme("float8_e4m3fn", 8.0),
    "p_bf16": Scheme("bfloat16"),
    "float32": Scheme("float32"),
}
DEFAULT_SCHEME = "float32"


def scheme_of(declared) -> Scheme:
    """A declared scheme: a name of SCHEMES, a Scheme, or a mapping of Scheme's fields; ValueError in one line."""
    if isinstance(declared, Scheme):
        return declared
    if isinstance(declared, str):
        if declared not in SCHEMES:
            raise ValueError(
                f"unknown scheme {declared!r}; known: {', '.join(SCHEMES)}, or a mapping of p, offset, rowsum"
            )
        return SCHEMES[declared]
    try:
        return Scheme(**dict(declared))
    except TypeError:
        raise ValueError(
            f"a scheme is a name ({', '.join(SCHEMES)}) or a mapping of p, offset, rowsum: {declared!r}"
        ) from None


def declare(scheme):
    """Mark an FP8 attention kernel with its scheme: @softaudit.fp8.declare("fa3")."""
    found = scheme_of(scheme)

    def mark(f):
        f.__softaudit_fp8_scheme__ = found
        return f

    return mark


# ------------------------------------------------------------------------------------------------------ families

_SIZES = {"quick": {"lq": 8, "lk": 256, "long": 1024}, "default": {"lq": 16, "lk": 512, "long": 4096}}


def _quantized(x, fmt, granularity, hk):
    """x (B, H, L, d) as float32, quantized exactly per tensor or per KV head (a query head's group shares its KV
    head's descale): (x8, descale)."""
    x = np.asarray(x, np.float32).astype(np.float64)
    b, h, length, d = x.shape
    if granularity == "tensor":
        return _fp8.quantize(x, fmt, "tensor")
    grouped = x.reshape(b, hk, (h // hk) * length, d)
    x8, descale = _fp8.quantize(grouped, fmt, "head")
    return x8.reshape(b, h, length, d), descale


def _case(rng, fmt, granularity, *, b=1, hq=2, hk=2, lq=8, lk=256, d=64, heads=None, q=None, k=None, v=None):
    heads = np.ones(hk) if heads is None else np.asarray(heads, np.float64)
    per_q = np.repeat(heads, hq // hk)[None, :, None, None]
    per_k = heads[None, :, None, None]
    q = rng.standard_normal((b, hq, lq, d)) * per_q if q is None else q
    k = rng.standard_normal((b, hk, lk, d)) * per_k if k is None else k
    v = rng.standard_normal((b, hk, lk, d)) * per_k if v is None else v
    (q8, dq), (k8, dk), (v8, dv) = (_quantized(x, fmt, granularity, hk) for x in (q, k, v))
    return {"q8": q8, "k8": k8, "v8": v8, "descale_q": dq, "descale_k": dk, "descale_v": dv}


def _heads(rng, size):
    out = []
    for fmt in _fp8.FORMATS:
        for gran in ("head", "tensor"):
            arrays = _case(rng, fmt, gran, b=2, hq=4, hk=4, lq=size["lq"], lk=size["lk"], heads=(0.05, 1, 20, 300))
            out.append((arrays, None, f"{fmt}, per {gran}, heads of scale 0.05 to 300"))
    return out


def _massive(rng, size):
    lk, d = size["lk"], 64
    k = rng.standard_normal((1, 2, lk, d))
    k[..., [3, 17, 40, 41]] *= 2000.0  # a few channels thousands of times the rest (arXiv 2402.17762)
    return [
        (
            _case(rng, "float8_e4m3fn", gran, lq=size["lq"], lk=lk, k=k),
            None,
            f"massive activations in 4 of k's 64 channels, per {gran}",
        )
        for gran in ("head", "tensor")
    ]


def _stale(rng, size):
    """Scores that rise slowly along the keys: each block's max above the first block's by less than 4 (log2
    units), so a max kept stale below 4 never rescales and P reaches 2**(8 + 3.9)."""
    lk, d = size["long"], 64
    q = np.zeros((1, 2, size["lq"], d))
    q[..., 0] = 8.0
    q[..., 1:] = rng.standard_normal(q[..., 1:].shape) * 0.05
    k = rng.standard_normal((1, 2, lk, d)) * 0.05
    # scaled score in log2 units: 8 k0 / sqrt(64) log2(e) = 1.4427 k0
    k[..., 0] = np.linspace(0.0, 3.9 / 1.4427, lk) + rng.standard_normal(lk) * 0.01
    return [
        (
            _case(rng, "float8_e4m3fn", "head", lq=size["lq"], lk=lk, q=q, k=k),
            None,
            f"{lk} keys whose scores rise by 3.9 (log2 units) along the row: a max kept stale below 4 lets P reach "
            "2**11.9 (FlashAttention #2716)",
        )
    ]


def _limits(rng, size):
    out = []
    for fmt in _fp8.FORMATS:
        big = _case(
            rng,
            fmt,
            "head",
            lq=size["lq"],
            lk=size["lk"],
            q=rng.standard_normal((1, 2, size["lq"], 64)) * 30,
            k=rng.standard_normal((1, 2, size["lk"], 64)) * 30,
        )
        out.append((big, None, f"{fmt}: scores of hundreds, every input at the top of the format after scaling"))
        x = rng.standard_normal((1, 2, size["lk"], 64))
        x[..., 0, 0] = 1e4  # one outlier sets the scale: the rest in FP8's subnormal range
        sub = _case(rng, fmt, "tensor", lq=size["lq"], lk=size["lk"], k=x, v=x.copy())
        out.append((sub, None, f"{fmt}, per tensor: an outlier 1e4 times the rest puts k and v in the subnormal range"))
    return out


def _repeated(rng, size):
    """Keys drawn from a few distinct vectors (padding, repeated tokens): P's values cluster, so their rounding
    errors share a sign and do not average out; with the row sum of the unconverted P, o moves by P's relative
    rounding error."""
    lk, d = size["lk"], 64
    out = []
    for distinct in (2, 3):
        k = np.repeat(rng.standard_normal((1, 2, distinct, d)) * 0.5, -(-lk // distinct), axis=2)[:, :, :lk]
        v = np.abs(np.repeat(rng.standard_normal((1, 2, distinct, d)), -(-lk // distinct), axis=2)[:, :, :lk])
        arrays = _case(rng, "float8_e4m3fn", "head", lq=size["lq"], lk=lk, k=k, v=v)
        out.append((arrays, None, f"{lk} keys repeating {distinct} distinct vectors, values of one sign"))
    return out


def _gqa(rng, size):
    return [
        (
            _case(rng, "float8_e4m3fn", "head", b=2, hq=16, hk=1, lq=size["lq"], lk=size["lk"], heads=(7.0,)),
            None,
            "grouped-query attention, 16 query heads per KV head",
        )
    ]


def _masks(rng, size):
    lq = lk = 2 * size["lq"] * 8
    causal = _fp8.keep_mask(lq, lk, causal=True)
    window = _fp8.keep_mask(lq, lk, window=(32, 0))
    return [
        (_case(rng, "float8_e4m3fn", "head", lq=lq, lk=lk), causal, "causal (bottom-right)"),
        (_case(rng, "float8_e4m3fn", "head", lq=lq, lk=lk), window, "sliding window of 32 keys to the left"),
    ]


#: The attention_fp8 families: name -> (description, make(rng, size) -> [(arrays, mask, description)]).
ATTENTION_FAMILIES = {
    "fp8_heads": ("per-(batch, head) descales unequal across heads, per head and per tensor, e4m3 and e5m2", _heads),
    "fp8_massive": ("massive activations: a few channels of k thousands of times the rest", _massive),
    "fp8_stale_max": ("long rows whose scores rise slowly: a stale running max pushes P past 448", _stale),
    "fp8_limits": ("scores of hundreds; an outlier that puts k and v in FP8's subnormal range", _limits),
    "fp8_repeated": ("keys repeating a few vectors: P's rounding errors share a sign", _repeated),
    "fp8_gqa": ("16 query heads per KV head", _gqa),
    "fp8_masks": ("causal and sliding-window masks", _masks),
}


def attention_cases(family: str, suite: str = "quick", seed: int = 0) -> list:
    """A family's cases, (arrays, mask, description) each; the same arguments always give the same bits."""
    if family not in ATTENTION_FAMILIES:
        raise ValueError(f"unknown attention_fp8 family {family!r}; known: {', '.join(ATTENTION_FAMILIES)}")
    if suite not in _SIZES:
        raise ValueError(f"suite must be one of {', '.join(_SIZES)}, got {suite!r}")
    rng = np.random.default_rng(zlib.crc32(f"{family}/{suite}/{seed}".encode()))
    return ATTENTION_FAMILIES[family][1](rng, _SIZES[suite])


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


def _vsum(q, k, v, keep) -> np.ndarray:
    """sum_j p_j |v_j| per output, p the softmax of the dequantized scores in float64 (a scale, not a result): the
    P V product's condition, what a rounding of P costs. The scores' share of attention's conditioning scale is left
    out: FP8 inputs are exact as given and kernels form the scores in float32, far below o's rounding."""
    with np.errstate(all="ignore"):
        s = np.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
        if keep is not None:
            s = np.where(np.broadcast_to(keep, s.shape), s, -np.inf)
        m = s.max(axis=-1, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
        p = e / np.where(e.sum(axis=-1, keepdims=True) > 0, e.sum(axis=-1, keepdims=True), 1.0)
        return np.nan_to_num(np.einsum("...qk,...kd->...qd", p, np.abs(v)))


def _cond_err(ex: _Exact, y) -> tuple[float, int]:
    """The largest |y - exact| / (u scale) over defined outputs, and how many of them are NaN or infinite."""
    y = np.asarray(y).astype(np.float64)
    bad = int(np.count_nonzero(ex.defined & ~np.isfinite(y)))
    with np.errstate(invalid="ignore"):
        err = np.where(ex.defined & np.isfinite(y), np.abs(y - ex.exact) / (ex.u * ex.scale), 0.0)
    return float(err.max(initial=0.0)), bad


def _call(f, arrays, mask):
    names = ("q8", "k8", "v8", "descale_q", "descale_k", "descale_v")
    return f(*(arrays[n] for n in names), mask)


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
    for model in models.MODELS:
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


def _quantize_cases(rng) -> list:
    """(x float32 (B, H, L, d), description) of the quantize families."""
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
