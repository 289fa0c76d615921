"""Attention's gradient on scores spread past float64's range (attn_large_activations): weights like e**-20000,
gradients far below every format's subnormals that round to a signed zero, decided without mpmath."""

import math
import time

import ml_dtypes
import mpmath
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from softaudit import reference as R
from softaudit.reference import _dd

from .oracle import attention_grad_exact, round_to
from .test_grad import _rounded_attention_grad, bits

DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "float64": np.float64}


def test_exp_dd_wide_is_within_its_bound_down_to_its_range_end():
    rng = np.random.default_rng(5)
    t = np.concatenate(
        [
            -rng.random(1500) * 2.0**22,
            -rng.random(500) * 3000,
            rng.random(100) * 709,
            np.log(2) * -rng.integers(1, 6_000_000, 300) + 0.3466,  # near the reduction boundaries, far out
            [0.0, _dd.WIDE_ARG_MIN, 709.0, -1e-300],
        ]
    )
    tl = t * rng.uniform(-(2.0**-53), 2.0**-53, len(t))
    tl = np.array([float(mpmath.mpf(a) + mpmath.mpf(b)) - a for a, b in zip(t, tl)])  # a normalised pair
    eh, el, k = _dd.exp_dd_wide(t, tl)
    worst = 0.0
    with mpmath.workprec(200):
        for a, b, h, lo, e in zip(t, tl, eh, el, k):
            exact = mpmath.exp(mpmath.mpf(float(a)) + mpmath.mpf(float(b)))
            got = mpmath.ldexp(mpmath.mpf(float(h)) + float(lo), int(e))
            worst = max(worst, float(abs(got / exact - 1)))
    assert 0 < worst <= _dd.EXP_DD_REL
    assert ((eh >= 2**-0.51) & (eh <= 2**0.51)).all()  # the mantissa's range, which the callers rely on


def _wide_problem(rng, dtype, lq, lk, d, dv, spread, masked):
    """q, k with scores spread over about `spread` (in units of e), v and g Gaussian, in the dtype."""
    size = math.sqrt(spread * math.sqrt(d) / (2 * math.sqrt(d)))  # c q.k ~ |q||k| / sqrt(d) * sqrt(d) / 2
    q, k = (rng.standard_normal(s) * size for s in ((lq, d), (lk, d)))
    v, g = rng.standard_normal((lk, dv)), rng.standard_normal((lq, dv))
    q, k, v, g = (a.astype(DTYPES[dtype]).astype(np.float64) for a in (q, k, v, g))
    keep = rng.random((lq, lk)) < 0.7 if masked else np.ones((lq, lk), bool)
    return q, k, v, g, keep


@settings(max_examples=25, deadline=None)
@given(
    dtype=st.sampled_from(list(DTYPES)),
    lq=st.integers(1, 4),
    lk=st.integers(1, 6),
    d=st.integers(1, 8),
    dv=st.integers(1, 3),
    spread=st.floats(800, 3e4),
    masked=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_wide_scores_match_plain_mpmath_bit_for_bit(dtype, lq, lk, d, dv, spread, masked, seed):
    """Every output, zeros with their sign, against the oracle's plain formulas (pairwise forms that do not cancel;
    mpmath's exponent range has no end), at twice the target's precision, or far more near a rounding boundary:
    dV on a midpoint of g's times 1 - e**-3000 needs thousands of bits."""
    q, k, v, g, keep = _wide_problem(np.random.default_rng(seed), dtype, lq, lk, d, dv, spread, masked)
    got = R.attention_grad(q, k, v, g, keep, dtype=dtype)
    for part, want in zip(got, _rounded_attention_grad(q, k, v, g, keep, None, dtype)):
        np.testing.assert_array_equal(bits(part), bits(want))


def test_the_large_activations_family_is_decided_without_mpmath():
    """attn_large_activations in float16 as the suite builds it (|q|, |k| ~ 136, d = 64: scores up to about 2e4
    apart), with 32 queries: in the default suite's 16, before the exponents were kept apart, 7,680 of 9,216
    outputs were left to mpmath, for their sign only."""
    rng = np.random.default_rng(11)
    scale = 1.5 * math.sqrt(65504 / 8)
    q, k = (rng.standard_normal((32, 64)) * scale for _ in range(2))
    v, g = rng.standard_normal((32, 64)), rng.standard_normal((32, 64))
    q, k, v, g = (a.astype(np.float16).astype(np.float64) for a in (q, k, v, g))
    results = R.evaluate_attention_grad(q, k, v, g, None, dtype="float16")
    tiers = np.concatenate([r.tier.ravel() for r in results])
    # Left to mpmath: dV on rounding ties (a sum of g's on a midpoint, times 1 - e**-20000), 113 of 6,144 here.
    assert (tiers == 3).sum() <= 0.025 * tiers.size, np.unique(tiers, return_counts=True)
    zeros = sum(int((r.value == 0).sum()) for r in results)
    signs = {math.copysign(1, x) for r in results for x in r.value[r.value == 0]}
    assert zeros > 0.5 * tiers.size and signs == {-1.0, 1.0}  # mostly signed zeros, of both signs
    # Spot-check against the oracle: the rows of two queries, at full width, on their own problem.
    sub = R.evaluate_attention_grad(q[:2], k, v, g[:2], None, dtype="float16")
    started = time.perf_counter()
    prec = 2 * 11 + 20
    for r, exact in zip(sub, attention_grad_exact(q[:2], k, v, g[:2], np.ones((2, 32), bool), None, prec)):
        want = np.array([[round_to(x, "float16") for x in row] for row in exact])
        np.testing.assert_array_equal(bits(r.value), bits(want))
    assert time.perf_counter() - started < 600  # (the oracle's pairwise dq is the slow part)
