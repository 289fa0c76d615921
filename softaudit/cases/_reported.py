"""Families from reported bugs: the input patterns behind real issues in frameworks and kernels, each naming its source.

They run in `softaudit run` for the kinds that list them, and seed the hunt (softaudit/hunt/_strategies.py). Each is
kept small (a few rows, a few short attention cases) so the main job stays about as fast; the patterns that need a
length (2**16 equal logits, key lengths at tile edges) keep the length and few rows. Where the calling convention
cannot carry a pattern (masks are boolean, the inputs arrive contiguous), the family builds the closest honest
version and says so.
"""

from __future__ import annotations

import math

import numpy as np

from .. import kinds
from ._case import family

#: The names of the families in this module.
REPORTED: list[str] = []


def reported(name: str, description: str):
    """Register a family (as `family` does) and list it in REPORTED."""
    REPORTED.append(name)
    return family(name, description)


def _all_kept(kind, x):
    return np.ones(x.shape, bool) if kinds.get(kind).masked else None


# --- the row kinds ------------------------------------------------------------------------------------------------


@reported(
    "reported_vectors",
    "log-softmax of [1 - log(eps), 0] (PyTorch #113708; eps the dtype's) and of [[800, 800, 400]] (PyTorch #56340).",
)
def reported_vectors(kind, fmt, size, rng):
    eps = 2.0 ** (1 - fmt.precision)
    out = []
    for row, source in (([1 - math.log(eps), 0.0], "PyTorch #113708"), ([800.0, 800.0, 400.0], "PyTorch #56340")):
        x = np.array([row])
        out.append(({"x": x}, _all_kept(kind, x), f"{[round(v, 4) for v in row]} ({source})"))
    return out


@reported(
    "uniform_512",
    "Rows of 512 equal logits (exact softmax 2**-9): a running sum of terms near 1 stalls at 256 in bfloat16 "
    "(ExecuTorch PR #20089).",
)
def uniform_512(kind, fmt, size, rng):
    x = np.repeat(np.array([[0.0], [1.0], [-7.5]]), 512, axis=1)
    return [({"x": x}, _all_kept(kind, x), "512 equal logits: 0, 1, -7.5")]


@reported(
    "equal_sum_overflow",
    "Rows of equal logits longer than the dtype's max (2**16 in float16): the sum of the exps, n, overflows though "
    "every term is 1 (issue 13's list; the same rows stall a running float16 sum at 2048: huggingface/candle #3727, "
    "sonos/tract PR #2586). float16 and the 8-bit dtypes only.",
)
def equal_sum_overflow(kind, fmt, size, rng):
    if fmt.max_float >= 2.0**17:
        return []
    n = 2 ** math.ceil(math.log2(fmt.max_float + 1))
    x = np.zeros((1, n))
    return [({"x": x}, _all_kept(kind, x), f"{n} equal logits (0)", {"n": n})]


@reported(
    "tile_edges",
    "Row lengths at tile edges (n % 128 in {0, 64}, n % 32 == 1, 127, 128, 129) with the max in the last, partial "
    "tile (PyTorch #191937, FlashAttention #443), and a row of 257 whose max, inside the second tile of 128, stands "
    "past exp's overflow above the rest.",
)
def tile_edges(kind, fmt, size, rng):
    out = []
    for n in (33, 64, 65, 127, 128, 129, 192):
        x = rng.standard_normal((2, n)) * 3
        x[:, -1] = x.max() + 2
        out.append(({"x": x}, _all_kept(kind, x), f"n={n}, max last", {"n": n}))
    # The max inside a later tile (not alone in it) and past exp's overflow above every logit of the first: a
    # streaming kernel whose running max misses it (a tile's min or first entry taken for its max) overflows.
    x = rng.standard_normal((2, 257)) * 3
    x[:, 200] = x.max() + math.log(fmt.max_float if math.isfinite(fmt.max_float) else 1.7e308) + 1
    out.append(({"x": x}, _all_kept(kind, x), "n=257, max at 200, past exp's overflow above the rest", {"n": 257}))
    return out


def _planes(length: int, padded: int) -> tuple[np.ndarray, np.ndarray]:
    """Boolean planes (length x length) of what a causal mask and a left padding of `padded` keys take away; the
    first `padded` queries see only padding (fully masked)."""
    causal = np.triu(np.ones((length, length), bool), k=1)
    padding = np.broadcast_to(np.arange(length) < padded, (length, length))
    return causal, padding


@reported(
    "mask_planes",
    "Scores carrying additive masks: two finfo.min planes summed, which overflows to -inf (NeMo Automodel PR #2658, "
    "transformers PR #20605); -10000 padding plus -10000 causal (ONNX Runtime #14363); float32's finfo.min added to "
    "half-precision scores (PyTorch PR #191612: masks here are boolean, so the float32 mask arrives already added, "
    "rounded to the dtype).",
)
def mask_planes(kind, fmt, size, rng):
    causal, padding = _planes(8, 3)
    finfo_min = -fmt.max_float if math.isfinite(fmt.max_float) else -1.7e308
    out = []
    additive = [
        (finfo_min, 2, "two finfo.min planes"),
        (-1e4, 2, "-10000 padding + -10000 causal"),
        (-3.4028234663852886e38, 1, "float32's finfo.min plane"),
    ]
    for fill, planes, source in additive:
        x = rng.standard_normal((8, 8)) * 3
        with np.errstate(over="ignore"):  # (two float64 finfo.min planes overflow float64 itself)
            x = x + (fill * causal + fill * padding if planes == 2 else fill * (causal | padding))
        mask = ~(causal | padding) if kinds.get(kind).masked else None
        out.append(({"x": x}, mask, f"8 x 8, causal, 3 keys of left padding: {source}"))
    return out


# --- attention ----------------------------------------------------------------------------------------------------


def _qkv(rng, batch, lq, lk, d, dv=None, kv_batch=None):
    kv_batch = batch if kv_batch is None else kv_batch
    q = rng.standard_normal(batch + (lq, d))
    k = rng.standard_normal(kv_batch + (lk, d))
    v = rng.standard_normal(kv_batch + (lk, d if dv is None else dv))
    return {"q": q, "k": k, "v": v}


@reported(
    "attn_nan_masked_key",
    "NaN in keys that are masked out: the output must not depend on them (PyTorch #101967). Their values hold the "
    "dtype's max, not NaN: P V multiplies them by P's exact zeros, and 0 x NaN is NaN in every kernel that forms P V "
    "as a product, best practice included.",
)
def attn_nan_masked_key(kind, fmt, size, rng):
    ramp = np.arange(8.0).reshape(1, 2, 4)
    issue = {"q": ramp.copy(), "k": ramp.copy(), "v": ramp.copy()}
    issue["k"][0, 1, 0] = np.nan
    padded = _qkv(rng, (2,), 8, 16, 32)
    padded["k"][:, 12:], padded["v"][:, 12:] = np.nan, fmt.max_float if math.isfinite(fmt.max_float) else 1.7e308
    return [
        (issue, np.array([[True, False], [True, False]]), "the issue's repro: k[0, 1, 0] = NaN, masked out"),
        (padded, np.broadcast_to(np.arange(16) < 12, (8, 16)).copy(), "4 padded keys: NaN in k, the max in v"),
    ]


@reported(
    "attn_tile_edges",
    "Key lengths at tile edges (Lk % 128 in {0, 64}, Lk % 32 == 1, 127, 128, 129) and a causal 129 x 129 (PyTorch "
    "#191937, FlashAttention #443).",
)
def attn_tile_edges(kind, fmt, size, rng):
    out = [(_qkv(rng, (), 4, lk, 64), None, f"Lq=4, Lk={lk}, d=64", {"lk": lk}) for lk in (33, 64, 65, 127, 128, 129)]
    out.append((_qkv(rng, (), 4, 192, 64), None, "Lq=4, Lk=192, d=64", {"lk": 192}))
    causal = np.tril(np.ones((129, 129), bool))
    out.append((_qkv(rng, (), 129, 129, 32), causal, "Lq=Lk=129, d=32, causal", {"lk": 129}))
    return out


@reported(
    "attn_fp8_keys_128",
    "Key lengths that are multiples of 128 in float8, the key tile of fp8 attention kernels (issue 13's list); 8-bit "
    "dtypes only.",
)
def attn_fp8_keys_128(kind, fmt, size, rng):
    if fmt.dtype is None or np.dtype(fmt.dtype).itemsize != 1:
        return []
    return [(_qkv(rng, (), 4, lk, 64), None, f"Lq=4, Lk={lk}, d=64", {"lk": lk}) for lk in (128, 256, 384)]


@reported(
    "attn_causal_alignment",
    "Causal masks aligned top-left (query i sees keys <= i) and bottom-right (keys <= i + Lk - Lq, as with a KV "
    "cache) when Lq != Lk: FlashAttention 2.1 moved to bottom-right, ONNX Runtime PR #28958 fixed its alignment; Lq "
    "> Lk bottom-right leaves the first queries fully masked.",
)
def attn_causal_alignment(kind, fmt, size, rng):
    out = []
    for lq, lk in ((4, 9), (9, 4)):
        for name, offset in (("top-left", 0), ("bottom-right", lk - lq)):
            mask = np.tril(np.ones((lq, lk), bool), k=offset)
            out.append((_qkv(rng, (), lq, lk, 16), mask, f"Lq={lq}, Lk={lk}, causal {name}"))
    return out


@reported(
    "attn_broadcast_kv",
    "K and V shared across query heads: one K/V head for 4 query heads (multi-query; a caller's stride-0 expand, "
    "which arrives here as a broadcast axis of size 1) and grouped-query heads, 2 K/V heads for 3 query heads each "
    "(Ainslie et al. 2023).",
)
def attn_broadcast_kv(kind, fmt, size, rng):
    grouped = _qkv(rng, (1, 2, 3), 6, 24, 32, kv_batch=(1, 2, 1))
    return [
        (_qkv(rng, (2, 4), 6, 24, 32, kv_batch=(2, 1)), None, "batch 2, 4 query heads, 1 K/V head"),
        (grouped, np.tril(np.ones((6, 24), bool), k=18), "2 K/V heads x 3 query heads, causal bottom-right"),
    ]


@reported(
    "attn_exact_probes",
    "Inputs with an exact answer: a single key (the output is v) and V all ones (the output is exactly 1; an fp8 "
    "kernel that summed l before casting P gave 0.637, ROCm FlyDSL PR #1020).",
)
def attn_exact_probes(kind, fmt, size, rng):
    ones = _qkv(rng, (2,), 8, 96, 64)
    ones["v"] = np.ones_like(ones["v"])
    kept = rng.random((8, 96)) < 0.5
    kept[:, 0] = True
    return [
        (_qkv(rng, (2,), 8, 1, 64), None, "a single key: the output is v"),
        (ones, None, "V all ones: the output is 1"),
        (ones, kept, "V all ones, random mask: the output is 1"),
    ]
