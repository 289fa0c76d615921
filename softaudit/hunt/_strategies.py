"""Hypothesis strategies over the parameters that matter, not only raw floats.

A drawn recipe (length, offset, spread, gap between the top two logits, position of the max, temperature, ties,
mask pattern and density, fully masked rows, values in masked slots; for attention d, lengths and activation
scale) builds the input from a seeded generator, so Hypothesis shrinks the recipe toward small, plain inputs.
Some rows also take raw floats of the dtype (every magnitude, subnormals, signed zeros, -inf).
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from .. import kinds
from ..reference import Format, round_to


def _raw_floats(fmt: Format):
    width = 16 if fmt.precision <= 11 else 32 if fmt.precision <= 24 else 64
    return st.floats(allow_nan=False, allow_infinity=False, width=width) | st.sampled_from([-math.inf, 0.0, -0.0])


@st.composite
def rows(draw, kind: str, fmt: Format):
    """(inputs dict in the dtype, mask or None) for softmax, log_softmax, logsumexp and masked_softmax."""
    top = fmt.max_float if math.isfinite(fmt.max_float) else 1.7e308
    n = draw(st.integers(1, 64) | st.integers(65, 2048))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    spread = 10.0 ** draw(st.floats(-3, 4))
    offset = draw(st.sampled_from([0.0, 1.0, -1.0])) * min(10.0 ** draw(st.floats(0, 38)), top / 4)
    x = rng.standard_normal(n) * spread + offset
    if draw(st.booleans()):  # one logit standing out by a gap, at a chosen place
        gap = 10.0 ** draw(st.floats(-2, 3))
        x[draw(st.integers(0, n - 1))] = x.max() + gap
    if draw(st.booleans()):  # ties
        x[: draw(st.integers(1, n))] = x[0]
    x = x / draw(st.sampled_from([1.0, 1e-3, 1e-1, 10.0, 1e3]))  # temperature
    raw = draw(st.lists(_raw_floats(fmt), max_size=min(n, 4)))
    x[: len(raw)] = raw
    with np.errstate(over="ignore"):
        x = round_to(np.clip(x, -1.7e308, 1.7e308), fmt.dtype)
    if not kinds.get(kind).masked:
        return {"x": x[None, :]}, None
    mask = rng.random(n) < draw(st.floats(0, 1))
    if draw(st.booleans()):
        mask[: draw(st.integers(0, n))] = False  # a padding-like run, possibly the whole row
    junk = draw(st.sampled_from([None, 0.0, top, -top, math.inf, -math.inf, math.nan]))
    if junk is not None:
        with np.errstate(over="ignore"):
            x = np.where(mask, x, np.asarray(junk).astype(fmt.dtype))
    return {"x": x[None, :]}, mask[None, :]


@st.composite
def attention(draw, kind: str, fmt: Format):
    """(q, k, v in the dtype, mask or None) for attention."""
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    d = draw(st.sampled_from([1, 2, 8, 16, 64, 128]))
    lq, lk = draw(st.integers(1, 8)), draw(st.integers(1, 256))
    top = fmt.max_float if math.isfinite(fmt.max_float) else 1.7e308
    scale = min(10.0 ** draw(st.floats(-2, 3)), math.sqrt(top))
    q, k = (rng.standard_normal(s) * scale for s in ((lq, d), (lk, d)))
    v = rng.standard_normal((lk, d)) * 10.0 ** draw(st.floats(-2, 2))
    inputs = {name: round_to(a, fmt.dtype) for name, a in (("q", q), ("k", k), ("v", v))}
    mask = None
    if draw(st.booleans()):
        mask = rng.random((lq, lk)) < draw(st.floats(0, 1))
        if draw(st.booleans()):
            mask &= np.tril(np.ones((lq, lk), bool), k=lk - lq)
    return inputs, mask


@st.composite
def gradients(draw, kind: str, fmt: Format):
    """(inputs in the dtype with an upstream gradient g, mask or None) for the gradient kinds: the forward kind's
    inputs, and g Gaussian, constant along the row (softmax's exact VJP is then 0), one-hot, or spread over
    8 decades."""
    entry = kinds.get(kind)
    inputs, mask = draw(rows(kind, fmt) if entry.row_wise else attention(kind, fmt))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    g = entry.part("upstream")(entry, inputs, mask, rng)
    style = draw(st.sampled_from(["gaussian", "constant", "onehot", "wide"]))
    if style == "constant":
        g = np.full(g.shape, draw(st.floats(-100, 100, allow_subnormal=False)))
    elif style == "onehot" and g.ndim:
        g = (np.arange(g.shape[-1]) == rng.integers(0, g.shape[-1])).astype(np.float64) * np.ones(g.shape)
    elif style == "wide":
        g = g * 10.0 ** rng.uniform(-4, 4, g.shape)
    with np.errstate(over="ignore"):
        return inputs | {"g": round_to(g, fmt.dtype)}, mask
