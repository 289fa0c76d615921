"""attention_fp8: attention of FP8 inputs with their descale factors, judged against the best kernel under the FP8
scheme the candidate declares (docs/fp8.md).

`f(q8, k8, v8, descale_q, descale_k, descale_v, mask=None) -> o`: q8 (B, Hq, Lq, d), k8 and v8 (B, Hkv, Lk, d) in
float8_e4m3fn or float8_e5m2 (q8 in bfloat16 with descale_q 1 for an FP8 KV cache: the family `fp8_kv_cache`), the
descales float32 scalars or (B, Hkv) (FlashAttention 3's convention: query head h takes KV head h // (Hq / Hkv)'s
descale_q too). The exact result is the attention of the dequantized inputs as given (q8 x descale_q exactly ...),
rounded once to o's dtype, the audited one; the inputs are kept in their own formats (`Kind.kept`), and o narrower
than the audited dtype is a skip there (`Kind.own_dtype`).

The scheme, what a kernel keeps in low precision (`Scheme`), is a convention every case is judged under
(`Kind.standing`): declared with `scheme=` on softaudit.candidate (or softaudit.fp8.declare), it is the keyword the
comparisons get (`declared`), so the row's standard algorithm is the best kernel under it; undeclared, P in float32.

(Longer than the house's 400 lines: the kind whole, as every kind's module holds it, with what its convention
needs of its own: the scheme a candidate declares, the eight families and the exact side, which softaudit.fp8's
standalone audit reads from here.)
"""

from __future__ import annotations

import dataclasses
import math
import zlib

import numpy as np

from ._kind import Kind

# ------------------------------------------------------------------------------------------------------- schemes

_FMT_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
_SHORT = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}


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
        try:
            object.__setattr__(self, "offset", float(self.offset))
        except (TypeError, ValueError):
            raise ValueError(f"scheme offset must be a number, got {self.offset!r}") from None
        if self.p in _FMT_MAX and 2.0**self.offset > _FMT_MAX[self.p]:
            raise ValueError(f"scheme offset {self.offset:g} puts P past {self.p}'s largest value")

    @property
    def words(self) -> str:
        off = f" with offset {self.offset:g}" if self.offset else ""
        short = _SHORT.get(self.p, self.p)
        return f"P in {short}{off}" + (", row sum of the converted P" if self.rowsum == "converted" else "")

    @property
    def key(self) -> str:
        """The scheme as a declared convention's value: its name where SCHEMES has it, else its fields
        ("p=float8_e4m3fn,offset=4,rowsum=unconverted")."""
        named = [name for name, s in SCHEMES.items() if s == self]
        return named[0] if named else f"p={self.p},offset={self.offset:g},rowsum={self.rowsum}"

    @property
    def settings(self) -> dict:
        """The keywords of softaudit.candidates.attention_fp8.kernel that emulate it."""
        return {"p": self.p, "offset": self.offset, "rowsum": self.rowsum}


#: The schemes by name: FlashAttention 3's (P in e4m3, offset 8), P in bfloat16 (FP8 storage, BF16 compute) and
#: the most precise, P in float32 (assumed where none is declared).
SCHEMES = {
    "fa3": Scheme("float8_e4m3fn", 8.0),
    "p_bf16": Scheme("bfloat16"),
    "float32": Scheme("float32"),
}
DEFAULT_SCHEME = "float32"


def scheme_of(declared) -> Scheme:
    """A declared scheme: a name of SCHEMES, a Scheme, a mapping of Scheme's fields, or a `Scheme.key`; ValueError
    in one line."""
    if isinstance(declared, Scheme):
        return declared
    if isinstance(declared, str):
        if declared in SCHEMES:
            return SCHEMES[declared]
        if "=" in declared:
            try:
                fields = dict(part.split("=", 1) for part in declared.split(","))
            except ValueError:
                fields = None
            if fields is not None:
                return scheme_of(fields)
        raise ValueError(f"unknown scheme {declared!r}; known: {', '.join(SCHEMES)}, or a mapping of p, offset, rowsum")
    try:
        return Scheme(**dict(declared))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ValueError) and str(exc).startswith("scheme "):
            raise
        raise ValueError(
            f"a scheme is a name ({', '.join(SCHEMES)}) or a mapping of p, offset, rowsum: {declared!r}"
        ) from None


class _Schemes(tuple):
    """The values the convention `scheme` may take (`Kind.declarable`): the default first, as every declarable's
    values; any scheme's key is one of them (the mappings are many)."""

    def __contains__(self, value) -> bool:
        try:
            return isinstance(value, str) and scheme_of(value).key == value
        except ValueError:
            return False

    @staticmethod
    def words(value: str) -> str:
        return scheme_of(value).words


# ------------------------------------------------------------------------------------------------------ families

_SIZES = {"quick": {"lq": 8, "lk": 256, "long": 1024}, "default": {"lq": 16, "lk": 512, "long": 4096}}
FORMATS = ("float8_e4m3fn", "float8_e5m2")


def _quantized(x, fmt, granularity, hk):
    """x (B, H, L, d) as float32, quantized exactly per tensor or per KV head (a query head's group shares its KV
    head's descale): (x8, descale)."""
    from ..reference import fp8 as _fp8

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
    for fmt in FORMATS:
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
    for fmt in FORMATS:
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
    from ..reference import fp8 as _fp8

    lq = lk = 2 * size["lq"] * 8
    causal = _fp8.keep_mask(lq, lk, causal=True)
    window = _fp8.keep_mask(lq, lk, window=(32, 0))
    return [
        (_case(rng, "float8_e4m3fn", "head", lq=lq, lk=lk), causal, "causal (bottom-right)"),
        (_case(rng, "float8_e4m3fn", "head", lq=lq, lk=lk), window, "sliding window of 32 keys to the left"),
    ]


def _kv_cache(rng, size):
    """An FP8 KV cache (vLLM's, SGLang's, FlashInfer's decode): q in bfloat16 with descale_q 1, k8 and v8 in e4m3
    with per-tensor scales (vLLM's k_scale, v_scale) or per (batch, KV head), decoding one query and a few."""
    import ml_dtypes

    out = []
    for lq, gran in ((1, "tensor"), (1, "head"), (4, "head")):
        q = (rng.standard_normal((2, 8, lq, 64)) * 2).astype(ml_dtypes.bfloat16)
        arrays = _case(rng, "float8_e4m3fn", gran, b=2, hq=8, hk=2, lq=lq, lk=size["lk"], heads=(0.5, 6.0))
        arrays["q8"], arrays["descale_q"] = q, np.float32(1.0).reshape(())
        queries = "one query (decoding)" if lq == 1 else f"{lq} queries"
        out.append((arrays, None, f"q in bfloat16, an e4m3 KV cache scaled per {gran}, {queries}, GQA 4:1"))
    return out


#: The attention_fp8 families: name -> (description, make(rng, size) -> [(arrays, mask, description)]).
ATTENTION_FAMILIES = {
    "fp8_heads": ("per-(batch, head) descales unequal across heads, per head and per tensor, e4m3 and e5m2", _heads),
    "fp8_massive": ("massive activations: a few channels of k thousands of times the rest", _massive),
    "fp8_stale_max": ("long rows whose scores rise slowly: a stale running max pushes P past 448", _stale),
    "fp8_limits": ("scores of hundreds; an outlier that puts k and v in FP8's subnormal range", _limits),
    "fp8_repeated": ("keys repeating a few vectors: P's rounding errors share a sign", _repeated),
    "fp8_gqa": ("16 query heads per KV head", _gqa),
    "fp8_masks": ("causal and sliding-window masks", _masks),
    "fp8_kv_cache": ("q in bfloat16 over an FP8 KV cache, decoding (descale_q 1)", _kv_cache),
}


def attention_cases(family: str, suite: str = "quick", seed: int = 0) -> list:
    """A family's cases, (arrays, mask, description) each; the same arguments always give the same bits."""
    if family not in ATTENTION_FAMILIES:
        raise ValueError(f"unknown attention_fp8 family {family!r}; known: {', '.join(ATTENTION_FAMILIES)}")
    if suite not in _SIZES:
        raise ValueError(f"suite must be one of {', '.join(_SIZES)}, got {suite!r}")
    rng = np.random.default_rng(zlib.crc32(f"{family}/{suite}/{seed}".encode()))
    return ATTENTION_FAMILIES[family][1](rng, _SIZES[suite])


def _maker(name: str):
    """A family as the loop makes it (`Kind.makers`): the quick suite's sizes where its cases are small, the
    default's otherwise. The cases do not depend on o's dtype, and the loop's rng is the family's own."""

    def make(kind, fmt, size, rng):
        return ATTENTION_FAMILIES[name][1](rng, _SIZES["quick" if size.lq <= 4 else "default"])

    return make


# ------------------------------------------------------------------------------------------ the exact side


def reference(kind, inputs: dict, mask, dtype, scheme=None) -> tuple:
    """The attention of the dequantized inputs, rounded once to o's dtype (the scheme changes the comparisons
    only)."""
    from ..reference import fp8 as _fp8

    names = ("q8", "k8", "v8", "descale_q", "descale_k", "descale_v")
    ref, _ = _fp8.attention(*(inputs[n] for n in names), mask, dtype=dtype)
    return (ref,)


def dequantized(inputs: dict, mask):
    """(q, k, v, keep): the dequantized inputs exactly in float64, k and v repeated over each KV head's query heads."""
    from ..reference import fp8 as _fp8

    q8, k8 = np.asarray(inputs["q8"]), np.asarray(inputs["k8"])
    group = q8.shape[1] // k8.shape[1]
    q = _fp8.dequantize(q8, inputs["descale_q"], group)
    k = np.repeat(_fp8.dequantize(k8, inputs["descale_k"]), group, axis=1)
    v = np.repeat(_fp8.dequantize(inputs["v8"], inputs["descale_v"]), group, axis=1)
    return q, k, v, mask


def vsum(q, k, v, keep) -> np.ndarray:
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


def conditioning(kind, inputs: dict, mask, references, scheme=None) -> tuple[dict]:
    """o: |o| + sum_j p_j |v_j| over the dequantized inputs (`vsum`); the queries undefined where the exact
    result is."""
    (ref,) = references
    exact = ref.hi + ref.lo
    terms = vsum(*dequantized(inputs, mask))
    undefined = np.asarray(ref.undefined) | ~np.isfinite(exact).all(axis=-1)
    return ({"undefined": undefined, "scale": np.abs(exact) + terms},)


def element_inputs(kind, pc, position: tuple) -> tuple[dict, np.ndarray | None]:
    """The query behind one output element, with the keys, values and descales of its (batch, KV head)."""
    b, h, i = position[0], position[1], position[2]
    group = pc.inputs["q8"].shape[1] // pc.inputs["k8"].shape[1]
    kv = h // group
    found = {
        "q8": pc.inputs["q8"][b : b + 1, h : h + 1, i : i + 1],
        "k8": pc.inputs["k8"][b : b + 1, kv : kv + 1],
        "v8": pc.inputs["v8"][b : b + 1, kv : kv + 1],
    }
    for name in ("descale_q", "descale_k", "descale_v"):
        d = np.asarray(pc.inputs[name])
        found[name] = d if d.ndim == 0 else d[b : b + 1, kv : kv + 1]
    mask = None if pc.mask is None else np.broadcast_to(pc.mask, pc.output_shape[:-1] + (pc.inputs["k8"].shape[-2],))
    return found, None if mask is None else mask[b, h, i][None, :]


def declared(inputs, mask, options, conventions) -> tuple:
    """The exact problem under a declared scheme: the same attention; the scheme goes to the comparisons, which
    emulate the best kernel under it, as their keyword."""
    return mask, dict(options) | {"scheme": conventions["scheme"]}


_MAKERS = {name: (description, _maker(name)) for name, (description, _) in ATTENTION_FAMILIES.items()}

ATTENTION_FP8 = Kind(
    "attention_fp8",
    "f(q8, k8, v8, descale_q, descale_k, descale_v, mask=None) -> o: q8 (B, Hq, Lq, d), k8 and v8 (B, Hkv, Lk, d) "
    "in float8_e4m3fn or float8_e5m2, descales float32 () or (B, Hkv); o in the audited dtype",
    arguments=("q8", "k8", "v8", "descale_q", "descale_k", "descale_v"),
    keywords=("mask",),
    outputs=("o",),
    plain="attention_fp8.scheme_standard",
    standard=("attention_fp8.scheme_standard",),
    best="attention_fp8.scheme_best",
    best_practice="the best kernel under the declared scheme, attention_fp8.scheme_best: the row's true max first, P "
    "converted once, P V in float32, o rounded once",
    families=tuple(_MAKERS),
    reference=reference,
    conditioning=conditioning,
    element_inputs=element_inputs,
    reduction=("k8", -2),
    row_wise=False,
    reduces=False,
    logarithmic=False,
    batched=False,
    scale_terms="sum p|v| over the dequantized inputs",
    max_floor=6.0,
    makers=_MAKERS,
    declarable={"scheme": ("FP8 scheme", _Schemes((DEFAULT_SCHEME,)))},
    declared=declared,
    standing=("scheme",),
    kept=("q8", "k8", "v8", "descale_q", "descale_k", "descale_v"),
    dtypes=("bfloat16", "float16", "float32"),
    own_dtype=True,
    measured=True,
)
