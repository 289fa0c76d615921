"""Every field of Policy, at a non-default value, changes what its rule decides; each rule on hand-made tallies.

Thresholds are computed here from the documented formulas (docs/policy.md), with the dtypes' precisions written out.
"""

import math

import pytest

from softaudit.metrics import Tally
from softaudit.policy import Policy
from softaudit.reference import format_of

F16, BF16, F32, F64 = (format_of(d) for d in ("float16", "bfloat16", "float32", "float64"))


def tally(**fields) -> Tally:
    return Tally(**({"cases": 1, "elements": 10} | fields))


def rules(policy, t, kind="softmax", fmt=F16, plain=1.0, best=0.5):
    return [(r.verdict, r.rule) for r in policy.judge(kind, fmt, t, plain, best)]


def test_the_precisions_and_the_fail_bound():
    assert [f.precision for f in (F16, BF16, F32, F64)] == [11, 8, 24, 53]
    default = Policy()
    assert default.fail_above(F16, 10.0) == 20.0  # 2 x 10 beats 2**2.75 = 6.73
    assert default.fail_above(F16, 1.0) == pytest.approx(2**2.75)
    assert default.fail_above(F64, 1.0) == pytest.approx(2**13.25)
    assert default.fail_above(BF16, None) == default.fail_above(BF16, math.nan) == default.fail_above(BF16, math.inf) == 4.0
    assert Policy(factor=8).fail_above(F16, 10.0) == 80.0
    assert Policy(defect_fraction=0.5).fail_above(F32, 1.0) == 2.0**12
    assert Policy(defect_fraction=0.0).fail_above(F32, 0.1) == 1.0


def test_the_warn_bound():
    assert Policy().warn_above(0.5) == 1.0 and Policy().warn_above(3.0) == 6.0 and Policy().warn_above(None) == 1.0
    assert Policy(min_ulp=10).warn_above(3.0) == 10.0 and Policy(factor=4).warn_above(3.0) == 12.0


def test_accuracy_defect_and_below_best_practice():
    defect = tally(max_cond_err=30.0, max_ulp=100.0)  # past max(2 x 1, 6.73) in float16
    assert rules(Policy(), defect) == [("fail", "defect")]
    assert rules(Policy(factor=40), defect) == [("warn", "below_best")]  # 30 < 40 x 1; 100 ulp > 40 x 0.5
    assert rules(Policy(defect_fraction=0.5), defect) == [("warn", "below_best")]  # 30 < 2**5.5 = 45.3
    below = tally(max_cond_err=2.0, max_ulp=1.5)
    assert rules(Policy(), below) == [("warn", "below_best")]
    assert rules(Policy(min_ulp=2), below) == []
    assert rules(Policy(), tally(max_cond_err=2.0, max_ulp=0.9)) == []


@pytest.mark.parametrize(
    "field, events, rule",
    [
        ("fail_on_nan", {"nan": 3}, "nan"),
        ("fail_on_overflow", {"overflow": 2}, "overflow"),
        ("fail_on_mask_leak", {"mask_leak": 5}, "mask_leak"),
        ("nan_propagation", {"nan_not_propagated": 1}, "nan_propagation"),
    ],
)
def test_each_event_fails_unless_its_field_is_off(field, events, rule):
    t = tally(**events)
    assert ("fail", rule) in rules(Policy(), t, kind="masked_softmax")
    assert rules(Policy(**{field: False}), t, kind="masked_softmax") == []


def test_underflow_fails_only_when_asked_and_flushes_warn_unless_off():
    t = tally(underflow=4)
    assert rules(Policy(), t) == [] and rules(Policy(fail_on_underflow=True), t) == [("fail", "underflow")]
    flushed = tally(flushed=7)
    assert rules(Policy(), flushed) == [("warn", "flushed")] and rules(Policy(warn_on_flush=False), flushed) == []


@pytest.mark.parametrize("behaviour", ["nan", "uniform", "zeros", "other"])
def test_fully_masked_rows_must_give_what_the_policy_asks(behaviour):
    t = tally(fully_masked={behaviour: 2})
    for wanted in ("zeros", "nan", "uniform"):
        expected = [] if behaviour == wanted else [("fail", "fully_masked")]
        assert rules(Policy(fully_masked=wanted), t, kind="masked_softmax") == expected
        assert rules(Policy(fully_masked=wanted), t, kind="attention") == expected
    assert rules(Policy(fully_masked="any"), t, kind="masked_softmax") == []
    assert rules(Policy(), t, kind="softmax") == []  # not a masked kind


def test_verdict_and_what_fails_a_run():
    policy, strict = Policy(), Policy(strict=True)
    t = tally(nan=1, flushed=1)
    assert policy.verdict(policy.judge("softmax", F16, t, 1.0, 0.5)) == "fail"
    assert policy.verdict(policy.judge("softmax", F16, tally(flushed=1), 1.0, 0.5)) == "warn"
    assert policy.verdict([]) == "pass"
    assert not policy.failed(["pass", "warn", "skip"]) and policy.failed(["pass", "error"]) and policy.failed(["fail"])
    assert strict.failed(["pass", "warn"]) and not strict.failed(["pass", "skip"])


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"factor": 0}, "factor must be positive"),
        ({"min_ulp": -1}, "min_ulp must be non-negative"),
        ({"defect_fraction": 1.5}, "defect_fraction must be between 0 and 1"),
        ({"fully_masked": "ones"}, "fully_masked must be one of"),
    ],
)
def test_bad_fields_are_one_clear_error(fields, message):
    with pytest.raises(ValueError, match=message):
        Policy(**fields)
