"""attention_lse: the exact log-sum-exp of the (modified) scores against mpmath at 300 bits, -inf for a query with
no key, and FlashAttention PR #978's +inf failing `lse_empty` while best practice passes."""

import math
from fractions import Fraction

import ml_dtypes
import mpmath
import numpy as np
import pytest
from mpmath import libmp

import softaudit
from softaudit import reference
from softaudit.candidates import attention_lse as builtin

PRECISION = {np.float16: 11, ml_dtypes.bfloat16: 8, np.float32: 24, np.float64: 53}
BF16 = ml_dtypes.bfloat16


def _exact(q, k, mask, bias, cap, sinks, dtype):
    out = np.empty(q.shape[:-1])
    with mpmath.workprec(300):
        for b in range(q.shape[0]):
            for i in range(q.shape[1]):
                terms = []
                for j in range(k.shape[1]):
                    extra = 0 if bias is None else mpmath.mpf(float(bias[b, i, j]))
                    if not mask[b, i, j] or extra == -mpmath.inf:
                        continue
                    s = mpmath.fsum(mpmath.mpf(float(x)) * mpmath.mpf(float(y)) for x, y in zip(q[b, i], k[b, j]))
                    s /= mpmath.sqrt(q.shape[-1])
                    s = s if cap is None else cap * mpmath.tanh(s / cap)
                    terms.append(mpmath.exp(s + extra))
                if sinks is not None:
                    terms.append(mpmath.exp(float(sinks[b])))
                if not terms:
                    out[b, i] = -np.inf
                    continue
                value = mpmath.log(mpmath.fsum(terms))  # at 300 bits, then rounded once
                with mpmath.workprec(PRECISION[dtype]):
                    out[b, i] = float(+value)
    return out


@pytest.mark.parametrize("dtype", list(PRECISION), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("modifiers", [{}, {"bias": True}, {"softcap": 2.0}, {"sinks": True}], ids=str)
def test_the_lse_is_mpmaths_correctly_rounded(dtype, modifiers):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s).astype(dtype) for s in ((2, 3, 8), (2, 20, 8), (2, 20, 4)))
    mask = np.ones((2, 3, 20), bool)
    mask[1, 2] = False  # no key: -inf (or the sink's z alone)
    bias = rng.standard_normal((2, 3, 20)).astype(dtype).astype(np.float64) if modifiers.get("bias") else None
    sinks = np.array([0.3, -2.0]) if modifiers.get("sinks") else None
    cap = modifiers.get("softcap")
    got = reference.evaluate_attention_lse(q, k, v, mask, dtype=dtype, bias=bias, softcap=cap, sinks=sinks)
    want = _exact(q.astype(np.float64), k.astype(np.float64), mask, bias, cap, sinks, dtype)
    assert np.array_equal(got.value.astype(np.float64), want) and not got.undefined.any()


@pytest.mark.parametrize("d", [1, 2, 9, 16, 64])
def test_a_single_key_s_lse_is_rounded_exactly_where_the_scale_is_exact(d):
    """One kept key: lse = q.k / sqrt(d) (+ its bias). For a perfect square d that is a rational, which the reference
    rounds exactly: a product of bfloat16s can lie halfway between two of them, where a Ziv loop never decides (the
    hunt found d = 1: PrecisionExhausted at 131072 bits). d = 2 checks the irrational scale."""
    rng = np.random.default_rng(d)
    q, k, v = (rng.standard_normal(s).astype(ml_dtypes.bfloat16) for s in ((6, 1, d), (6, 1, d), (6, 1, 2)))
    q[0, 0, :], q[0, 0, 0], k[0, 0, 0] = 0, 1.5, 1 + 2**-7  # (q.k = 1.5 + 3 x 2**-8: halfway between two bfloat16s)
    bias = np.full((6, 1, 1), 0.25)
    for extra in ({}, {"bias": bias}):
        got = reference.evaluate_attention_lse(q, k, v, dtype=ml_dtypes.bfloat16, **extra).value.astype(np.float64)
        if d == 2:
            mask = np.ones((6, 1, 1), bool)
            want = _exact(q.astype(np.float64), k.astype(np.float64), mask, extra.get("bias"), None, None, BF16)
        else:  # the exact rational, rounded to 8 bits (ties to even) by mpmath's from_rational
            want = np.zeros((6, 1))
            for b in range(6):
                dot = sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(q[b, 0], k[b, 0]))
                value = dot / math.isqrt(d) + (Fraction(1, 4) if extra else 0)
                want[b, 0] = float(mpmath.mpf(libmp.from_rational(value.numerator, value.denominator, 8, "n")))
        assert np.array_equal(got, want)


@softaudit.candidate(kind="attention_lse", name="test.flash_attention_978")
def plus_inf_for_no_key(q, k, v, mask=None, **modifiers):
    """FlashAttention PR #978: a query with no key got lse = +inf."""
    o, lse = builtin.upcast(q, k, v, mask, **modifiers)
    return o, np.where(lse == -np.inf, np.array(np.inf, lse.dtype), lse)


def test_plus_inf_for_no_key_fails_lse_empty_and_best_practice_passes():
    def verdicts(target):
        table = softaudit.audit(
            target,
            families=["lse_empty"],
            dtypes=["bfloat16", "float32"],
            suite="quick",
            isolation="none",
            cache_dir=None,
        ).table
        return dict(zip(zip(table.dtype, table.output), table.verdict))

    bad = verdicts(plus_inf_for_no_key)
    assert {bad[(d, "lse")] for d in ("bfloat16", "float32")} == {"fail"}
    assert {bad[(d, "o")] for d in ("bfloat16", "float32")} == {"pass"}
    assert set(verdicts("softaudit.candidates.attention_lse:upcast").values()) == {"pass"}
