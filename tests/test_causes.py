"""A row's cause, note and fix say what happened at its worst element and the fix for that, not a neighbour's.

Each test here is one finding that was worded wrongly in the committed reports: the fix for the wrong mechanism, a
subnormal cause where the exact result is 0, cancellation as the reason for an error larger than the terms, or
"flushed to zero" where nothing was flushed.
"""

import math

import numpy as np
import pytest

import softaudit
from softaudit import causes
from softaudit.metrics import Tally
from softaudit.policy import Policy
from softaudit.reference import format_of

F16, BF16, F64 = format_of("float16"), format_of("bfloat16"), format_of("float64")


def audit(targets, kind, family, dtype):
    """The rows of the targets on one family (or several) in one dtype."""
    families = [family] if isinstance(family, str) else family
    kwargs = {} if kind is None else {"kind": kind}
    table = softaudit.audit(targets, dtypes=[dtype], families=families, isolation="none", cache=False, **kwargs)
    return table.table[table.table.family == families[-1]]


# -- a NaN in a masked key: the mask, not the max --------------------------------------------------------------


def additive_mask_attention(q, k, v, mask=None):
    """Attention that masks by adding a -inf bias to the scores, as SDPA's math backend does with a bool mask: a
    masked key whose k holds NaN has a NaN score, and NaN + -inf is NaN."""
    w = np.float64
    with np.errstate(all="ignore"):
        s = q.astype(w) @ np.swapaxes(k.astype(w), -1, -2) / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s + np.where(mask, 0.0, -np.inf)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return ((e / e.sum(axis=-1, keepdims=True)) @ v.astype(w)).astype(q.dtype)


def test_a_nan_in_a_masked_key_is_diagnosed_and_fixed_by_selecting_not_by_the_max():
    """PyTorch #101967: a NaN in a masked-out key's k gives NaN through an additive mask. Subtracting the largest
    score (the common NaN fix) changes nothing there; selecting the kept scores with where does."""
    # (with a family it gets right: NaN on every family would be an error row)
    families = ["attn_exact_probes", "attn_nan_masked_key"]
    row = audit(additive_mask_attention, "attention", families, "float32").iloc[0]
    assert row.verdict == "fail" and row.cause == "nan" and row.nan > 0, row.note
    # (a softmax over every key masked afterwards gives the same NaN on these inputs: both are named)
    assert "additive_mask" in row.finding.split(" or ") and "NaN + -inf" in row.note, row.note
    assert "where" in row.fix and "values out of P V" in row.fix and "largest score" not in row.fix, row.fix


def test_an_attention_nan_from_scores_past_the_range_keeps_the_max_fix():
    """Scores past the dtype's range are what the largest-score fix is for (attention's own NaN fix)."""
    why, pattern = causes.diagnose("attention", F16, {"q": np.full((1, 4), 300.0), "k": np.full((3, 4), 300.0)}, None)
    assert "past float16's largest value" in why and pattern == ""
    assert "largest score" in causes.fix("nan", "attention", "nan", pattern)


# -- a sum past the dtype: the float32 sum, not the max ------------------------------------------------------------


@pytest.mark.parametrize("target", ["log_softmax:shifted", "logsumexp:shifted"])
def test_a_max_shifted_log_kind_whose_float16_sum_overflows_is_told_to_sum_in_float32(target):
    """log-softmax and log-sum-exp of 65,536 equal logits already subtract the max; their inf comes from the sum of
    the exponentials (65,536 > 65,504), so the fix is the float32 sum alone (softmax gets it as sum_overflow)."""
    row = audit(f"softaudit.candidates.{target}", None, "equal_sum_overflow", "float16").iloc[0]
    assert row.verdict == "fail" and row.cause == "overflow" and "sum to 65536" in row.note, row.note
    # (the built-in computes every step in float16: that and a float16 sum alone reproduce it alike)
    assert "sum_in_dtype" in row.finding.split(" or ") and "subtract" not in row.fix, row.finding
    assert "accumulate the sum in float32" in row.fix, row.fix


def test_a_format_without_infinity_names_the_minus_inf_too():
    """float8_e4m3fn has no infinity: -inf is NaN there (jax.nn.log_softmax starts its max at -inf), so the
    diagnosis and the fix say so beside the overflowing exp."""
    fp8 = format_of("float8_e4m3fn")
    why, pattern = causes.diagnose("log_softmax", fp8, {"x": np.array([[10.0, 0.0, -5.0]])}, None)
    assert "no infinity" in why and pattern == "no_inf"
    fix = causes.fix("nan", "log_softmax", "nan", pattern)
    assert "-inf" in fix and "float32" in fix


def test_a_row_with_nan_on_every_family_carries_no_stale_fix():
    """A candidate that gives NaN everywhere is an error row; the NaN rule's fix (subtract the row max) was left
    on it although its note no longer says NaN where anything is defined."""
    from softaudit.judge import UnitResult, settle

    row = {"dtype": "float16", "verdict": "fail", "cause": "nan", "note": "3 NaN", "fix": "subtract the row max"}
    (settled,) = settle([UnitResult([row], all_nan=[True])])
    assert settled.rows[0]["verdict"] == "error" and settled.rows[0]["fix"] == ""
    fp8 = dict(row, dtype="float8_e4m3fn")
    (settled,) = settle([UnitResult([fp8], all_nan=[True])])
    assert "no infinity" in settled.rows[0]["note"] and "-inf" in settled.rows[0]["fix"]


# -- an exact result of 0 is not a subnormal one -------------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt, y, scale",
    [(BF16, 0.001968, 112.46), (F64, 0.6103515625, 26858228.07)],  # attention_grad.naive; JAX's float64 dq
)
def test_a_nonzero_output_where_the_exact_gradient_is_0_is_a_cancellation_not_a_subnormal(fmt, y, scale):
    """attn_exact_probes (V all ones) and attn_constant_1000 make dS = P (dP - D) exactly 0: dq and dk are exactly
    0 while their terms are not. What a candidate gives there is what its roundings left of the cancelling terms,
    which no gradual underflow fixes."""
    cause, why = causes.classify("attention_grad", fmt, y, 0.0, 0.0, scale, 4)
    assert cause == "cancellation" and "cancel exactly" in why and "normal range" not in why, why
    assert "u of them" in why


def test_the_exact_gradient_of_0_reads_as_cancellation_in_the_audit():
    """dq and dk are exactly 0 on the probes; the naive bfloat16 VJP leaves rounding residue there, within the
    conditioning (so the rows pass), and the worst element says why: the terms cancel."""
    result = softaudit.audit(
        "softaudit.candidates.attention_grad:naive",
        dtypes=["bfloat16"],
        families=["attn_exact_probes"],
        isolation="none",
        cache=False,
    )
    zeros = result.table[result.table.output.isin(["dq", "dk"])]
    assert set(zeros.verdict) == {"pass"}, zeros[["output", "max_cond_err", "note"]].to_string()
    worst = [w for w in result.worst.values() if w.output_name in ("dq", "dk")]
    assert len(worst) == 2 and {w.cause for w in worst} == {"cancellation"}, [w.explanation for w in worst]
    assert all("the exact result is 0" in w.explanation for w in worst)


def test_a_subnormal_result_read_against_a_large_scale_is_not_called_subnormal():
    """The subnormal cause says errors count against the smallest normal; where the element's scale is far above it
    (g constant along a softmax row: the gradient cancels to almost 0), they count against the scale."""
    cause, _ = causes.classify("softmax_grad", BF16, -2.0e-39, -4.0e-41, -4.0e-41, 3.0e-1, 32)
    assert cause == "cancellation"
    cause, why = causes.classify("softmax", BF16, 0.0 + 1.0e-40, 4.08e-41, 4.08e-41, 1.1754943508222875e-38, 32)
    assert cause == "subnormal" and "smallest normal" in why


def test_an_exact_output_is_not_explained_as_an_error():
    cause, why = causes.classify("attention_grad", F16, 0.0, 0.0, 0.0, 1608.3, 64)
    assert cause == "rounding" and "exact" in why


# -- an error larger than every term is no rounding ----------------------------------------------------------------


def test_an_error_past_the_whole_scale_is_a_wrong_term_not_a_cancellation():
    """JAX's float64 dv on a bottom-right causal mask with Lq > Lk: 0.8516 where the exact value is 0.0105 and its
    terms add up to 0.1975. Cancellation explains at most 0.1975 / 0.0105 = 18.8 u of relative error per rounding;
    an error 4.3x the terms themselves is a term that should not be there (the fully masked queries' g)."""
    cause, why = causes.classify("attention_grad", F64, 0.85161834, 0.0105116018845, 0.0105116018845, 0.19748690, 4)
    assert cause == "wrong_terms" and "4.2" in why and "cancels" not in why, why
    assert "missing, extra or wrong" in why
    assert "nothing to attend" in causes.fix("defect", "attention_grad", "wrong_terms")


def uniform_for_nothing_kept_grad(q, k, v, g, mask=None):
    """An attention backward that masks with a finite fill: a query with nothing to attend gets uniform weights, so
    its g reaches every key's dv (as jax.nn.dot_product_attention's does)."""
    q0 = q
    q, k, v, g = (a.astype(np.float64) for a in (q, k, v, g))
    c = 1 / math.sqrt(q.shape[-1])
    s = q @ np.swapaxes(k, -1, -2) * c
    if mask is not None:
        s = np.where(mask, s, -1e30)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    dp = g @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    grads = (ds @ k * c, np.swapaxes(ds, -1, -2) @ q * c, np.swapaxes(p, -1, -2) @ g)
    return tuple(grad.astype(q0.dtype) for grad in grads)


def test_the_gradient_of_queries_with_nothing_to_attend_is_named_as_the_wrong_term():
    table = audit(uniform_for_nothing_kept_grad, "attention_grad", "attn_causal_alignment", "float32")
    dv = table[table.output == "dv"].iloc[0]
    assert dv.verdict == "fail" and dv.cause == "wrong_terms", dv.note
    assert "attend no key" in dv.note and "cancels" not in dv.note, dv.note


# -- zeros where the exact result is subnormal: say what is known ----------------------------------------------------


def test_flushed_results_are_not_called_a_flush_when_others_came_out_subnormal():
    """A zero where the exact result is subnormal is a flush only if the arithmetic drops subnormals; a candidate
    that gave other subnormal results keeps them, so its zeros were lost on the way."""
    (kept,) = Policy().judge("softmax", F16, Tally(cases=1, elements=10, flushed=3, subnormal_kept=5), 1.0, 0.5)
    assert kept.rule == "flushed" and "flushed to zero" not in kept.text and "not a flush" in kept.text, kept.text
    (none,) = Policy().judge("softmax", F16, Tally(cases=1, elements=10, flushed=3), 1.0, 0.5)
    assert none.text.startswith("3 subnormal results came out 0") and "or an intermediate" in none.text, none.text
    assert "intermediate" in causes.fix("flushed", "softmax", "flushed")
    (log,) = Policy().judge("log_softmax", F16, Tally(cases=1, elements=10, flushed=2), 1.0, 0.5)
    assert "rounds to 1" in log.text and "FTZ" not in log.text, log.text


def test_subnormal_zeros_of_a_log_kind_are_said_to_be_absorbed():
    """log_softmax.shifted's subnormal results (the largest entry's log p, about minus the sum of the others) come
    out 0 because log of a sum that rounds to 1 is 0, as its worst element does: not a flush."""
    row = audit("softaudit.candidates.log_softmax:shifted", None, "dominant", "float32").iloc[0]
    assert row.flushed > 0 and row.cause == "absorbed", row.note
    assert "flushed to zero" not in row.note and "rounds to 1" in row.note.split("; ")[-1], row.note
    assert "log1p" in row.fix, row.fix


def test_a_numpy_softmax_in_float16_keeps_subnormals_so_its_zeros_are_underflow_on_the_way():
    """softmax_grad.in_dtype computes p in float16 with gradual underflow: some gradients below the normal range
    come out subnormal, others 0 where p itself underflowed."""
    table = audit("softaudit.candidates.softmax_grad:in_dtype", None, "g_wide", "float16")
    row = table.iloc[0]
    assert row.flushed > 0 and "flushed to zero" not in row.note and "not a flush" in row.note, row.note


def test_a_logit_just_past_the_overflow_threshold_reads_apart_from_it():
    """float16's smallest overflowing logit is 11.09375 and log(65504) = 11.0903...: four digits print both 11.09."""
    why, _ = causes.diagnose_row(format_of("float16"), {"x": np.array([[0.0, 11.09375]], np.float16)}, None)
    assert "the largest logit, 11.094, is past log(6.55e+04) = 11.090" in why


def test_an_error_between_the_pairwise_and_the_running_budgets_is_accumulation_only_if_the_row_shares_it():
    """Between what pairwise and running sums in the dtype can cost, a sum's error moves the whole row by one factor;
    an approximate exp (Schraudolph's, 4% relative) moves each output its own way: precision, not accumulation."""
    args = ("softmax", F16, 0.03757, 0.03928, 0.03928, 0.04, 32)
    budget = (0.5, 400.0)  # (pairwise, running) in units of u: 4 u (0.04 + 0.5) < err = 0.0017 < 4 u (0.04 + 400)
    assert causes.classify(*args, budget=budget, common=0.97)[0] == "accumulation"
    assert causes.classify(*args, budget=budget)[0] == "accumulation"  # (unknown: a sum can explain it)
    cause, why = causes.classify(*args, budget=budget, common=0.1)
    assert cause == "precision" and "approximate function" in why and "0.1 of it is common" in why, why
