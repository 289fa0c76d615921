"""Verdicts on backward implementations that are none of the built-ins (tests/gradients/heldout.py): each defective
one fails for its reason, the sound ones neither fail nor warn; a correctly rounded VJP reads at most 0.5 ulp and
one exactly 1 ulp off reads between 0.5 and 2.5 (issue 12's "done when")."""

import numpy as np
import pytest

import softaudit
from softaudit import reference as R

from . import heldout

KIND = {
    heldout.softmax_grad_missing_dot: "softmax_grad",
    heldout.masked_softmax_grad_nan_fully_masked: "masked_softmax_grad",
    heldout.masked_softmax_grad_leaks: "masked_softmax_grad",
    heldout.attention_grad_scale_1_over_d: "attention_grad",
    heldout.attention_grad_dk_missing_scale: "attention_grad",
    heldout.attention_grad_delta_rowsum_do: "attention_grad",
    heldout.attention_grad_delta_unnormalized_o: "attention_grad",
    heldout.sound_softmax_grad: "softmax_grad",
    heldout.sound_masked_softmax_grad: "masked_softmax_grad",
    heldout.sound_attention_grad: "attention_grad",
}
#: What each defect is caught by (the failing rows' note: "x the conditioning >" is the accuracy rule, past the
#: worst standard same-dtype algorithm), and the outputs that must fail.
# (an accuracy defect's rule: past the measured line in 16-bit dtypes, past 2 x u (scale + T) in float32: "The fail
# line" in docs/policy.md)
DEFECT, NAN, LEAK = ("x the conditioning >", "x u (scale + T) >"), ("NaN",), ("mask leak",)
CAUGHT = {
    heldout.softmax_grad_missing_dot: (DEFECT, None),
    heldout.masked_softmax_grad_nan_fully_masked: (NAN, None),
    heldout.masked_softmax_grad_leaks: (LEAK, None),
    heldout.attention_grad_scale_1_over_d: (DEFECT, {"dq", "dk", "dv"}),  # (P itself is wrong: dv too)
    heldout.attention_grad_dk_missing_scale: (DEFECT, {"dk"}),
    heldout.attention_grad_delta_rowsum_do: (DEFECT, {"dq", "dk"}),
    heldout.attention_grad_delta_unnormalized_o: (DEFECT, {"dq", "dk"}),
}
FAMILIES = {
    "softmax_grad": ["gaussian", "g_onehot"],
    "masked_softmax_grad": ["random_mask", "fully_masked"],
    "attention_grad": ["attn_gaussian", "attn_masks"],
}


def _audit(fn, dtype):
    kind = KIND[fn]
    return softaudit.audit(fn, kind=kind, dtypes=[dtype], suite="quick", families=FAMILIES[kind], cache_dir="off").table


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("fn", list(CAUGHT), ids=lambda f: f.__name__)
def test_each_defective_backward_fails_for_its_reason(fn, dtype):
    table = _audit(fn, dtype)
    rule, outputs = CAUGHT[fn]
    failed = table[table.verdict == "fail"]
    assert len(failed), table[["family", "output", "verdict", "cause", "note"]].to_string()
    assert any(r in note for note in failed.note for r in rule), failed[["cause", "note"]].to_string()
    if outputs is not None:
        assert outputs <= set(failed.output), failed[["family", "output"]].to_string()
        if "dv" not in outputs:  # the defect leaves dv right: it must not fail
            assert not (failed.output == "dv").any()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize(
    "fn",
    [heldout.sound_softmax_grad, heldout.sound_masked_softmax_grad, heldout.sound_attention_grad],
    ids=lambda f: f.__name__,
)
def test_sound_backwards_neither_fail_nor_warn(fn, dtype):
    table = _audit(fn, dtype)
    assert set(table.verdict) == {"pass"}, table[["family", "output", "verdict", "cause", "note"]].to_string()


def correctly_rounded(x, g, axis=-1):
    """The reference itself: softmax's VJP correctly rounded to x's dtype."""
    return R.softmax_grad(x, g, axis=axis, dtype=x.dtype)


def one_ulp_off(x, g, axis=-1):
    """The correctly rounded VJP moved one ulp of the dtype away from zero (zeros to the smallest subnormal)."""
    exact = R.softmax_grad(x, g, axis=axis, dtype=x.dtype)
    return np.nextafter(exact, np.copysign(np.inf, exact))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_a_correctly_rounded_vjp_reads_half_an_ulp_and_one_ulp_off_reads_one(dtype):
    families = ["gaussian", "ties", "dominant", "g_onehot", "g_wide"]
    exact = softaudit.audit(
        correctly_rounded, kind="softmax_grad", dtypes=[dtype], suite="quick", families=families, cache_dir="off"
    ).table
    assert (exact.max_ulp <= 0.5).all() and set(exact.verdict) == {"pass"}, exact[["family", "max_ulp"]].to_string()
    off = softaudit.audit(
        one_ulp_off, kind="softmax_grad", dtypes=[dtype], suite="quick", families=families, cache_dir="off"
    ).table
    assert ((off.max_ulp >= 0.5) & (off.max_ulp <= 2.5)).all(), off[["family", "max_ulp"]].to_string()
