"""Qiu & Yao (arXiv 2510.04212): in a FlashAttention-style bfloat16 backward, D = rowsum(dO * O) is biased when q and
k are similar low-rank representations.

Setup (ours, built from the paper's mechanism; numbers in docs/gradients-draft.md): per head, q_i = a + eps n_i and
k_j = b + eps m_j with a, b, n_i, m_j standard Gaussian in d = 64 and eps = 1e-4 (rank one plus a little noise), so
after rounding to bfloat16 most scores of a row lie within 2**-9 of its maximum without equalling it; v and dO have
standard Gaussian entries plus a mean of +1 (or -1 for v), so that D has one sign. 256 independent heads of 16
queries and 128 keys, everything rounded to bfloat16 first; D as FlashAttention 2 computes it (`flash2_delta`: P
rounded to bfloat16 before P V, the sum l from the unrounded P, O rounded to bfloat16, the row sum in float32)
against the exact D of the same bfloat16 inputs (float64; mpmath agrees on a few rows). Statistics are over heads
(rows of a head share its keys, so they are not independent).

The mechanism: exp(s - m) just below 1 (within half an ulp, 2**-9) rounds up to exactly 1, so the rounded P sums
to more than l and O comes out inflated by about (fraction of near-max keys) x 2**-10: |D| is overestimated, and
D - D_exact has the sign of D. Exact ties (eps = 0: P = 1 exactly, nothing rounds) and Gaussian q, k show no bias.
"""

import math

import ml_dtypes
import mpmath
import numpy as np
import pytest

from softaudit.candidates import attention
from softaudit.candidates.attention_grad import flash2_delta

from . import oracle as O

HEADS, LQ, LK, D = 256, 16, 128, 64
BF16 = ml_dtypes.bfloat16


def inputs(eps, v_mean, do_mean, similar=True, seed=2510):
    rng = np.random.default_rng(seed)
    g = rng.standard_normal
    if similar:
        q = g((HEADS, 1, D)) + eps * g((HEADS, LQ, D))
        k = g((HEADS, 1, D)) + eps * g((HEADS, LK, D))
    else:
        q, k = g((HEADS, LQ, D)), g((HEADS, LK, D))
    v, do = g((HEADS, LK, D)) + v_mean, g((HEADS, LQ, D)) + do_mean
    return [a.astype(BF16) for a in (q, k, v, do)]


def exact_delta(q, k, v, do):
    o, _ = O.attention(q, k, v)
    return (do.astype(np.float64) * o).sum(-1)


def measure(q, k, v, do, delta=None):
    """Per-head means of D - D_exact: their mean, standard error and fraction positive; the mean relative error
    (D - D_exact) / D_exact; the fraction of scores within 2**-9 of their row's maximum but below it."""
    delta = flash2_delta(q, k, v, do)[..., 0] if delta is None else delta
    exact = exact_delta(q, k, v, do)
    err = delta.astype(np.float64) - exact
    heads = err.mean(axis=-1)
    s = np.einsum("hid,hjd->hij", q.astype(np.float64), k.astype(np.float64)) / math.sqrt(D)
    gap = s.max(-1, keepdims=True) - s
    return {
        "mean": float(heads.mean()),
        "se": float(heads.std(ddof=1) / math.sqrt(HEADS)),
        "positive": float((err > 0).mean()),
        "relative": float((err / exact).mean()),
        "near_max": float(((gap > 0) & (gap < 2.0**-9)).mean()),
    }


@pytest.fixture(scope="module")
def similar():
    return measure(*inputs(1e-4, 1.0, 1.0))


def test_delta_is_biased_upward_by_many_standard_errors_on_similar_low_rank_q_k(similar):
    assert similar["near_max"] > 0.5
    assert similar["mean"] > 5 * similar["se"]
    assert similar["positive"] > 0.7
    # about (fraction of near-max keys) x 2**-10 relative, the mean round-up of exp(s - m) just below 1
    assert 0.25 * 2.0**-10 < similar["relative"] < 2.0**-10


def test_the_bias_follows_the_sign_of_delta():
    flipped = measure(*inputs(1e-4, -1.0, 1.0))  # D_exact < 0 now: |D| is still overestimated
    assert flipped["mean"] < -5 * flipped["se"]
    assert flipped["relative"] > 0.25 * 2.0**-10


@pytest.mark.parametrize("case", ["exact ties", "gaussian"])
def test_no_bias_without_near_ties(case):
    measured = measure(*(inputs(0.0, 1.0, 1.0) if case == "exact ties" else inputs(0.0, 1.0, 1.0, similar=False)))
    assert measured["near_max"] < 0.05
    assert abs(measured["mean"]) < 3 * measured["se"]


def test_no_bias_when_p_stays_in_float32(similar):
    q, k, v, do = inputs(1e-4, 1.0, 1.0)
    o = attention.upcast(q, k, v)  # P in float32, O rounded once to bfloat16
    delta = (do.astype(np.float32) * o.astype(np.float32)).astype(np.float64).sum(-1)
    measured = measure(q, k, v, do, delta)
    assert abs(measured["mean"]) < 3 * measured["se"] < similar["mean"]


def test_the_float64_exact_delta_agrees_with_mpmath():
    q, k, v, do = (a[:1, :2] if a.shape[1] == LQ else a[:1] for a in inputs(1e-4, 1.0, 1.0))
    exact = exact_delta(q, k, v, do)[0]
    with mpmath.workdps(40):
        qm, km, vm, dom = (mpmath.matrix(a[0].astype(np.float64).tolist()) for a in (q, k, v, do))
        for i in range(2):
            s = [mpmath.fsum(qm[i, t] * km[j, t] for t in range(D)) / mpmath.sqrt(D) for j in range(LK)]
            top = max(s)
            e = [mpmath.exp(x - top) for x in s]
            total = mpmath.fsum(e)
            o = [mpmath.fsum(e[j] * vm[j, t] for j in range(LK)) / total for t in range(D)]
            reference = mpmath.fsum(dom[i, t] * o[t] for t in range(D))
            assert abs(exact[i] - float(reference)) <= 1e-12 * abs(float(reference))
