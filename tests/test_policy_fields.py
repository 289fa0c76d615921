"""Every field of Policy, at a non-default value, changes what its rule decides; each rule on hand-made tallies.

Thresholds are computed here from the documented formulas (docs/policy.md), never read back from policy.py: the
measured line F = Policy.fail_above = max(factor x plain_cond, 2**(defect_fraction x p)) and warn_above = max(factor
x best_ulp, min_ulp), with the dtypes' precisions p written out. The hand-made tallies carry no per-element line
(max_line_err NaN): a dtype narrower than proven_bits fails past F, any past factor x u (scale + T) (max_bound_err;
docs/policy.md, "The fail line"). The last tests run whole audits on small candidates written here.
"""

import dataclasses
import math

import numpy as np
import pytest

import softaudit
from softaudit.metrics import Tally
from softaudit.policy import Policy
from softaudit.reference import format_of
from softaudit.reproducibility import Moved

F16, BF16, F32, F64 = (format_of(d) for d in ("float16", "bfloat16", "float32", "float64"))
NAN, INF = math.nan, math.inf

#: Each field at a non-default value, and the tests below that show it changes a decision.
NON_DEFAULT = {
    "factor": 40.0,  # test_factor_*, test_an_accuracy_defect_*
    "min_ulp": 2.0,  # test_min_ulp_*, test_a_softmax_in_the_dtype_*
    "defect_fraction": 0.5,  # test_defect_fraction_*, test_factor_turns_*
    "max_floor": 64.0,  # test_max_floor_*
    "proven_bits": 25,  # test_proven_bits_*
    "fully_masked": "nan",  # test_fully_masked_*, test_nan_on_fully_masked_rows_*
    "fail_on_nan": False,  # test_each_event_*
    "fail_on_sum": False,  # test_probabilities_*
    "fail_on_overflow": False,
    "fail_on_mask_leak": False,
    "nan_propagation": False,
    "fail_on_underflow": True,  # test_underflow_*
    "warn_on_flush": False,  # test_flushed_*
    "strict": True,  # test_strict_*, test_a_softmax_in_the_dtype_*
    "require": ("deterministic", "batch-invariant"),  # test_require_*, tests/test_reproducibility.py
}


def tally(**fields) -> Tally:
    """A tally of one case with 10 compared elements, exact unless told otherwise."""
    return Tally(**({"cases": 1, "elements": 10} | fields))


def rules(policy, t, kind="softmax", fmt=F16, plain=1.0, best=0.5):
    """(verdict, rule) of each reason judge gives, in its order."""
    return [(r.verdict, r.rule) for r in policy.judge(kind, fmt, t, plain, best)]


# -- the fields and their defaults --------------------------------------------------------------------------------


def test_every_field_has_a_non_default_value_tested_and_the_defaults_are_the_documented_ones():
    """A field added to Policy without a test here fails this; the defaults are docs/policy.md's."""
    fields = {f.name: f.default for f in dataclasses.fields(Policy)}
    assert set(fields) == set(NON_DEFAULT)
    assert fields == {
        "factor": 2.0,
        "min_ulp": 1.0,
        "defect_fraction": 0.25,
        "max_floor": 16.0,
        "proven_bits": 24,
        "fully_masked": "zeros",
        "fail_on_nan": True,
        "fail_on_sum": True,
        "fail_on_overflow": True,
        "fail_on_mask_leak": True,
        "fail_on_underflow": False,
        "warn_on_flush": True,
        "nan_propagation": True,
        "strict": False,
        "require": (),
    }
    assert all(NON_DEFAULT[name] != default for name, default in fields.items())
    assert Policy(**NON_DEFAULT) != Policy()  # every value is accepted together


def test_the_dtype_precisions():
    """p, the significand bits with the leading one: 11, 8, 24, 53."""
    assert [f.precision for f in (F16, BF16, F32, F64)] == [11, 8, 24, 53]


# -- fail_above and warn_above ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt, floor",
    [(F16, 6.727171322029716), (BF16, 4.0), (F32, 16.0), (F64, 16.0)],  # 2**2.75, 2**2, then the cap 16
)
def test_fail_above_is_the_floor_where_the_plain_error_is_small_or_missing(fmt, floor):
    """The floor min(2**(0.25 p), 16) wins over 2 x a small plain error, and is all there is without a finite one."""
    assert floor == pytest.approx(min(2 ** (0.25 * fmt.precision), 16), rel=1e-15)
    for plain in (0.0, 1.0, floor / 2, None, NAN, INF):
        assert Policy().fail_above(fmt, plain) == pytest.approx(floor, rel=1e-15)


def test_fail_above_is_factor_times_the_plain_error_past_the_floor():
    """2 x plain_cond once that passes the floor, in each dtype."""
    assert Policy().fail_above(F16, 10.0) == 20.0  # 20 > 6.73
    # attention's own cap: 6 (docs/policy.md), under a policy's higher max_floor, over a lower one
    assert [Policy().fail_above(f, 1.0, "attention") for f in (F16, BF16, F32, F64)] == [6.0, 4.0, 6.0, 6.0]
    assert Policy(max_floor=64.0).fail_above(F32, 1.0, "attention") == 6.0
    assert Policy(max_floor=5.0).fail_above(F32, 1.0, "attention") == 5.0
    assert Policy().fail_above(F32, 1.0, "attention_grad") == 16.0
    assert Policy().fail_above(BF16, 2.5) == 5.0  # 5 > 4
    assert Policy().fail_above(F32, 100.0) == 200.0  # 200 > 16
    assert Policy().fail_above(F64, 9.0) == 18.0  # 18 > 16
    assert Policy().fail_above(F32, 7.0) == 16.0  # 14 < 16: the floor


def test_factor_scales_fail_above_and_warn_above():
    """factor multiplies both the plain error (fail) and best practice's (warn)."""
    assert Policy(factor=40).fail_above(F16, 10.0) == 400.0 and Policy().fail_above(F16, 10.0) == 20.0
    assert Policy(factor=0.5).fail_above(F32, 30.0) == 16.0  # 15 < 16: the floor again
    assert Policy(factor=40).warn_above(3.0) == 120.0 and Policy().warn_above(3.0) == 6.0
    assert Policy(factor=40).fail_above(F16, None) == pytest.approx(2**2.75)  # no plain error: factor plays no part


def test_defect_fraction_moves_the_floor():
    """The floor is 2**(defect_fraction x p) below the cap: 0 gives 1, 1 gives 2**p."""
    assert Policy(defect_fraction=0.125).fail_above(F16, 1.0) == pytest.approx(2**1.375)
    assert Policy(defect_fraction=0.125).fail_above(F32, 1.0) == 8.0 and Policy().fail_above(F32, 1.0) == 16.0
    assert Policy(defect_fraction=1.0, max_floor=math.inf).fail_above(F16, 1.0) == 2048.0
    assert Policy(defect_fraction=1.0, max_floor=math.inf).fail_above(BF16, None) == 256.0
    assert Policy(defect_fraction=0.0).fail_above(F64, 0.1) == 1.0
    assert Policy(defect_fraction=0.0).fail_above(F64, 3.0) == 6.0  # then 2 x plain wins


def test_max_floor_caps_the_floor():
    """min(2**(defect_fraction x p), max_floor): 16 by default, so float32's 64 and float64's 9742 give 16, and the
    16-bit floors (6.73, 4) are below it; inf restores 2**(p/4); below 1 is refused."""
    assert Policy(max_floor=64).fail_above(F32, 1.0) == 64.0 and Policy().fail_above(F32, 1.0) == 16.0
    assert Policy(max_floor=math.inf).fail_above(F64, None) == pytest.approx(2**13.25)
    assert Policy(max_floor=2).fail_above(F16, 0.5) == 2.0 and Policy().fail_above(F16, 0.5) == pytest.approx(2**2.75)
    t = tally(max_cond_err=30.0, max_ulp=100.0)  # float16 with defect_fraction=1: min(2**11, max_floor)
    assert ("fail", "defect") in rules(Policy(defect_fraction=1), t) and ("fail", "defect") not in rules(
        Policy(defect_fraction=1, max_floor=64), t
    )
    with pytest.raises(ValueError, match="max_floor"):
        Policy(max_floor=0.5)


def test_proven_bits_chooses_the_dtypes_failed_past_the_proven_line_alone():
    """float32 (24 bits) is failed past factor x u (scale + T) alone by default: 30 x the conditioning within the
    proven bound passes there, and fails past the measured line 16 where proven_bits=25 judges float32 as a narrow
    dtype. Past the proven line a row fails whatever proven_bits says."""
    within = tally(max_cond_err=30.0, max_ulp=0.4, max_bound_err=0.5)
    assert rules(Policy(), within, fmt=F32) == [] and rules(Policy(proven_bits=25), within, fmt=F32) == [
        ("fail", "defect")
    ]
    past = tally(max_cond_err=3.0, max_ulp=0.4, max_bound_err=2.5)  # 2.5 > factor 2
    assert rules(Policy(), past, fmt=F32) == [("fail", "defect")] == rules(Policy(proven_bits=25), past, fmt=F32)
    assert rules(Policy(), past, fmt=F16) == [("fail", "defect")]  # (under F = 6.73, past the proven line)
    # A per-element line, where measured, decides alone: past 1 fails, at 1 does not.
    assert rules(Policy(), tally(max_cond_err=30.0, max_ulp=0.4, max_line_err=1.01), fmt=F32) == [("fail", "defect")]
    assert rules(Policy(), tally(max_cond_err=30.0, max_ulp=0.4, max_line_err=1.0), fmt=F16) == []


def test_min_ulp_is_the_floor_of_warn_above():
    """warn_above = max(2 x best_ulp, min_ulp); only min_ulp without a finite best practice."""
    assert Policy().warn_above(0.5) == 1.0 and Policy().warn_above(0.25) == 1.0 and Policy().warn_above(3.0) == 6.0
    assert Policy(min_ulp=10).warn_above(3.0) == 10.0 and Policy(min_ulp=10).warn_above(7.0) == 14.0
    assert Policy(min_ulp=0).warn_above(0.25) == 0.5
    for best in (None, NAN, INF):
        assert Policy().warn_above(best) == 1.0 and Policy(min_ulp=2.5).warn_above(best) == 2.5


# -- judge: accuracy ----------------------------------------------------------------------------------------------


def test_an_accuracy_defect_fails_past_fail_above_and_not_at_it():
    """defect: max_cond_err > max(2 x plain, floor), strictly; below it a large ULP error only warns."""
    plain = 4.0  # fail_above = max(8, 6.73) = 8 in float16
    assert rules(Policy(), tally(max_cond_err=8.001, max_ulp=0.4), plain=plain) == [("fail", "defect")]
    assert rules(Policy(), tally(max_cond_err=8.0, max_ulp=0.4), plain=plain) == []
    assert rules(Policy(), tally(max_cond_err=8.0, max_ulp=50.0), plain=plain) == [("warn", "below_best")]
    assert rules(Policy(), tally(max_cond_err=6.8, max_ulp=0.4), plain=None) == [("fail", "defect")]  # > 6.73
    assert rules(Policy(), tally(max_cond_err=6.7, max_ulp=0.4), plain=NAN) == []


def test_factor_turns_a_defect_into_a_warning():
    """factor=40: 30 x the conditioning is below 40 x 1, and 100 ulp is still past 40 x 0.5."""
    defect = tally(max_cond_err=30.0, max_ulp=100.0)  # past max(2 x 1, 6.73) in float16
    assert rules(Policy(), defect) == [("fail", "defect")]
    assert rules(Policy(factor=40), defect) == [("warn", "below_best")]
    assert rules(Policy(factor=400), defect) == []  # 100 ulp < 400 x 0.5


def test_defect_fraction_turns_a_defect_into_a_warning_and_back():
    """defect_fraction=0.5 lifts the float16 floor to 2**5.5 = 45.3 (with max_floor lifted past it); 0 lowers it
    to 1."""
    defect = tally(max_cond_err=30.0, max_ulp=100.0)
    lifted = Policy(defect_fraction=0.5, max_floor=64)
    assert rules(lifted, defect) == [("warn", "below_best")]
    assert rules(lifted, tally(max_cond_err=46.0, max_ulp=100.0)) == [("fail", "defect")]
    small = tally(max_cond_err=1.5, max_ulp=0.4)  # plain 0.5: 2 x 0.5 = 1 < 1.5
    assert rules(Policy(), small, plain=0.5) == []
    assert rules(Policy(defect_fraction=0), small, plain=0.5) == [("fail", "defect")]


def test_min_ulp_silences_below_best_practice():
    """below_best: max_ulp > max(2 x best_ulp, min_ulp); min_ulp=2 lets 1.5 ulp pass."""
    below = tally(max_cond_err=2.0, max_ulp=1.5)
    assert rules(Policy(), below) == [("warn", "below_best")]
    assert rules(Policy(min_ulp=2), below) == []
    assert rules(Policy(), tally(max_cond_err=2.0, max_ulp=1.0)) == []  # at the bound: no warning
    assert rules(Policy(min_ulp=0), tally(max_cond_err=0.1, max_ulp=1.01)) == [("warn", "below_best")]  # > 2 x 0.5
    assert rules(Policy(), tally(max_cond_err=2.0, max_ulp=5.0), best=3.0) == []
    assert rules(Policy(), tally(max_cond_err=2.0, max_ulp=6.5), best=3.0) != []


def test_a_warning_needs_the_error_past_best_practice_in_the_conditioning_too():
    """An ULP error far past best practice's that the conditioning explains (an output that cancels, a subnormal
    one: issue 24's all-float32 FlashAttention kernel at 1,140 ulp and 0.70x the conditioning) is no warning: the
    row must also read more than factor x best practice's max_cond_err, and more than min_ulp."""
    far = tally(max_cond_err=0.7, max_ulp=1140.0)
    assert rules(Policy(), far, best=2.0) == []
    judge = Policy().judge
    assert judge("softmax", F16, tally(max_cond_err=3.0, max_ulp=1140.0), 1.0, 2.0, best_cond=2.0) == []
    (warn,) = judge("softmax", F16, tally(max_cond_err=4.5, max_ulp=1140.0), 1.0, 2.0, best_cond=2.0)
    assert warn.text == (
        "max error 1.14e+03 ulp > 4 = max(2 x best practice's 2, 1), and 4.5 x the conditioning > 2 x best practice's 2"
    )
    assert rules(Policy(), tally(max_cond_err=1.01, max_ulp=9.0)) == [("warn", "below_best")]  # (no best_cond: > 1)


def test_a_flush_warning_needs_more_flushed_results_than_best_practice():
    """A subnormal result that best practice gives as 0 too is cancellation (torch's float32 softmax backward on
    gaussian: g_j - <g, p> cancels to 0 at an exact 8.14e-44), not a flush."""
    flushed = tally(flushed=3)
    assert rules(Policy(), flushed) == [("warn", "flushed")]
    judge = Policy().judge
    assert judge("softmax", F16, flushed, 1.0, 0.5, best_cond=0.5, best_flushed=3) == []
    assert [r.rule for r in judge("softmax", F16, flushed, 1.0, 0.5, best_cond=0.5, best_flushed=2)] == ["flushed"]


def test_nothing_compared_is_not_judged_on_accuracy():
    """With no compared elements the accuracy rules stay quiet, whatever the measures say."""
    assert rules(Policy(), tally(elements=0, max_cond_err=1e9, max_ulp=1e9)) == []
    assert rules(Policy(), tally(elements=1, max_cond_err=1e9, max_ulp=1e9)) == [("fail", "defect")]


def test_the_texts_give_the_numbers_and_the_bound():
    """The defect text names the error and both terms; attention's warning adds the error in ulps of sum p|v|."""
    (defect,) = Policy().judge("softmax", F16, tally(max_cond_err=30.0, max_ulp=0.4), 4.0, 0.5)
    assert defect.text == "error 30 x the conditioning > 8 = max(2 x the worst same-dtype algorithm's 4, 2**2.75)"
    (warn,) = Policy().judge("attention", F32, tally(max_cond_err=1.5, max_ulp=3.0, max_ulp_vsum=0.7), 1.0, 0.5)
    assert warn.text == "max error 3 ulp (0.7 ulp of sum p|v|) > 1 = max(2 x best practice's 0.5, 1)"
    (warn,) = Policy(min_ulp=2).judge("softmax", F32, tally(max_cond_err=3.0, max_ulp=3.0), 1.0, None)
    assert warn.text == "max error 3 ulp > 2 = max(best practice: nothing compared, 2)"


# -- judge: events ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, events, rule",
    [
        ("fail_on_nan", {"nan": 3}, "nan"),
        ("fail_on_overflow", {"overflow": 2}, "overflow"),
        ("fail_on_mask_leak", {"mask_leak": 5}, "mask_leak"),
        ("nan_propagation", {"nan_not_propagated": 1}, "nan_propagation"),
    ],
)
@pytest.mark.parametrize("kind", ["softmax", "masked_softmax", "attention"])
def test_each_event_fails_unless_its_field_is_off(field, events, rule, kind):
    """Each event fails by default, for its own rule only, and not at all with its field False."""
    t = tally(**events)
    assert rules(Policy(), t, kind=kind) == [("fail", rule)]
    assert rules(Policy(**{field: False}), t, kind=kind) == []
    others = {name: False for name in ("fail_on_nan", "fail_on_overflow", "fail_on_mask_leak", "nan_propagation")}
    assert rules(Policy(**(others | {field: True})), t, kind=kind) == [("fail", rule)]


def test_probabilities_that_sum_more_than_a_half_from_1_fail_unless_fail_on_sum_is_off():
    """sum_err is max |sum p - 1| in ulps of 1 (2**-10 in float16): 513 of them is 0.501 from 1, a stalled or
    overflowed sum (every output 0 reads 1024), which no rounding gives; 512 is not past it. Only for probabilities."""
    assert rules(Policy(), tally(sum_err=513.0)) == [("fail", "sum")]
    assert rules(Policy(), tally(sum_err=512.0)) == []
    assert rules(Policy(fail_on_sum=False), tally(sum_err=1024.0)) == []
    assert rules(Policy(), tally(sum_err=1024.0), kind="softmax_grad") == []  # (its sum_err is another measure)
    (reason,) = Policy().judge("softmax", F16, tally(sum_err=1024.0), 1.0, 0.5)
    assert reason.text == "a row's probabilities sum 1 away from 1"


def test_the_event_texts_count_what_happened():
    """Counts appear in the texts; a mask leak reads differently for attention."""
    texts = [r.text for r in Policy().judge("masked_softmax", F16, tally(nan=3, overflow=2, mask_leak=5), 1.0, 0.5)]
    assert texts == [
        "3 NaN where the exact result is defined",
        "2 inf where the exact result is finite",
        "mask leak: masked entries get probability (5 elements)",
    ]
    (leak,) = Policy().judge("attention", F16, tally(mask_leak=4), 1.0, 0.5)
    assert leak.text == "mask leak: outputs move when masked keys change (4 elements)"


def test_underflow_fails_only_when_asked():
    """fail_on_underflow is off by default: zeros where the rounded result is not 0 fail only with it on."""
    t = tally(underflow=4)
    assert rules(Policy(), t) == []
    assert rules(Policy(fail_on_underflow=True), t) == [("fail", "underflow")]
    assert rules(Policy(fail_on_underflow=True), tally()) == []


def test_flushed_results_warn_unless_warn_on_flush_is_off():
    """Flushed subnormals warn by default (1 result, or n results), never with warn_on_flush=False."""
    assert rules(Policy(), tally(flushed=7)) == [("warn", "flushed")]
    assert rules(Policy(warn_on_flush=False), tally(flushed=7)) == []
    assert [r.text for r in Policy().judge("softmax", F16, tally(flushed=1), 1.0, 0.5)] == [
        "1 subnormal result came out 0 and none came out subnormal: a flush to zero (an FTZ/DAZ mode, an exp that "
        "flushes), or an intermediate that underflowed"
    ]
    assert rules(Policy(min_ulp=1e9), tally(flushed=2)) == [("warn", "flushed")]  # min_ulp does not silence it


@pytest.mark.parametrize("behaviour", ["nan", "uniform", "zeros", "other"])
@pytest.mark.parametrize("kind", ["masked_softmax", "attention"])
def test_fully_masked_rows_must_give_what_the_policy_asks(behaviour, kind):
    """A masked kind's fully masked rows must give the policy's behaviour ("zeros" by default); "any" takes all."""
    t = tally(fully_masked={behaviour: 2})
    assert rules(Policy(), t, kind=kind) == ([] if behaviour == "zeros" else [("fail", "fully_masked")])
    for wanted in ("zeros", "nan", "uniform"):
        expected = [] if behaviour == wanted else [("fail", "fully_masked")]
        assert rules(Policy(fully_masked=wanted), t, kind=kind) == expected
    assert rules(Policy(fully_masked="any"), t, kind=kind) == []


def test_fully_masked_reads_the_behaviour_of_the_rows_seen():
    """Mixed behaviours fail every rule but "any"; zero counts and plain kinds are not judged."""
    mixed = tally(fully_masked={"nan": 1, "zeros": 3})
    assert mixed.fully_masked_behaviour == "mixed"
    for wanted in ("zeros", "nan", "uniform"):
        assert rules(Policy(fully_masked=wanted), mixed, kind="masked_softmax") == [("fail", "fully_masked")]
    assert rules(Policy(fully_masked="any"), mixed, kind="masked_softmax") == []
    (reason,) = Policy(fully_masked="nan").judge("attention", F16, mixed, 1.0, 0.5)
    assert reason.text == "fully masked rows give mixed, expected nan"
    none_seen = tally(fully_masked={"nan": 0, "zeros": 2})  # a count of 0 is not a behaviour seen
    assert none_seen.fully_masked_behaviour == "zeros" and rules(Policy(), none_seen, kind="masked_softmax") == []
    for kind in ("softmax", "log_softmax", "logsumexp"):
        assert rules(Policy(), tally(fully_masked={"nan": 2}), kind=kind) == []


def test_fails_come_before_warnings_in_rule_order():
    """Every broken rule is listed: fails in rule order, then warnings."""
    t = tally(
        nan=1,
        overflow=1,
        mask_leak=1,
        nan_not_propagated=1,
        fully_masked={"uniform": 1},
        underflow=1,
        max_cond_err=100.0,
        max_ulp=100.0,
        flushed=1,
    )
    assert rules(Policy(fail_on_underflow=True), t, kind="masked_softmax") == [
        ("fail", "nan"),
        ("fail", "overflow"),
        ("fail", "mask_leak"),
        ("fail", "nan_propagation"),
        ("fail", "fully_masked"),
        ("fail", "underflow"),
        ("fail", "defect"),
        ("warn", "flushed"),
    ]
    t.max_cond_err = 1.5  # no defect: below best practice warns instead (the two never come together)
    assert rules(Policy(), t, kind="masked_softmax")[-2:] == [("warn", "below_best"), ("warn", "flushed")]


# -- verdict, failed, strict --------------------------------------------------------------------------------------


def test_verdict_is_the_worst_reason():
    """fail if a reason fails, warn if there are only warnings, pass with none."""
    policy = Policy()
    assert policy.verdict(policy.judge("softmax", F16, tally(nan=1, flushed=1), 1.0, 0.5)) == "fail"
    assert policy.verdict(policy.judge("softmax", F16, tally(flushed=1, max_ulp=3.0), 1.0, 0.5)) == "warn"
    assert policy.verdict(policy.judge("softmax", F16, tally(), 1.0, 0.5)) == "pass"
    assert policy.verdict([]) == "pass"


def test_strict_makes_a_warning_fail_the_run():
    """A fail or an error always fails a run; a warning does only with strict; skip and pass never do."""
    default, strict = Policy(), Policy(strict=True)
    for policy in (default, strict):
        assert policy.failed(["pass", "fail"]) and policy.failed(["error"]) and policy.failed(("skip", "error"))
        assert not policy.failed(["pass", "skip"]) and not policy.failed([])
    assert not default.failed(["pass", "warn", "skip"])
    assert strict.failed(["pass", "warn", "skip"]) and strict.failed(iter(["warn"]))
    assert strict.verdict(strict.judge("softmax", F16, tally(flushed=1), 1.0, 0.5)) == "warn"  # the row stays a warn


def test_require_fails_what_moved_and_each_requirement_only_its_own_moves():
    """Outputs that moved run to run fail `deterministic` only, between batches `batch-invariant` only; without a
    requirement neither changes the verdict (the note says it)."""
    run_to_run = Moved(repeat_checked=10, repeat_moved=3, repeat_ulp=1.0)
    batches = Moved(repeat_checked=10, batch_checked=10, batch_moved=2, batch_ulp=2.0, batch_sizes=frozenset({1, 4}))
    both = Policy(require=["deterministic", "batch-invariant"])

    def judged(policy, moved):
        return [(r.verdict, r.rule) for r in policy.judge("softmax", F32, tally(), 1.0, 0.5, moved=moved)]

    assert judged(Policy(), run_to_run) == judged(Policy(), batches) == []
    assert judged(both, run_to_run) == [("fail", "nondeterministic")]
    assert judged(both, batches) == [("fail", "batch_variant")]
    assert judged(Policy(require=["deterministic"]), batches) == []
    assert judged(Policy(require=["batch-invariant"]), run_to_run) == []
    assert judged(both, Moved(repeat_checked=10, batch_checked=10)) == []  # nothing moved


# -- validation ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"factor": 0}, "factor must be positive and finite, got 0"),
        ({"factor": math.inf}, "factor must be positive and finite, got inf"),
        ({"min_ulp": math.inf}, "min_ulp must be non-negative and finite, got inf"),
        ({"factor": -2.0}, "factor must be positive"),
        ({"factor": NAN}, "factor must be positive"),
        ({"min_ulp": -1}, "min_ulp must be non-negative and finite, got -1"),
        ({"min_ulp": NAN}, "min_ulp must be non-negative"),
        ({"defect_fraction": 1.5}, "defect_fraction must be between 0 and 1, got 1.5"),
        ({"defect_fraction": -0.1}, "defect_fraction must be between 0 and 1"),
        ({"defect_fraction": NAN}, "defect_fraction must be between 0 and 1"),
        ({"fully_masked": "ones"}, "fully_masked must be one of zeros, nan, uniform, any, got 'ones'"),
        ({"fully_masked": "Zeros"}, "fully_masked must be one of"),
    ],
)
def test_bad_fields_are_one_clear_error(fields, message):
    """Each out-of-range value raises a ValueError naming the field and the value."""
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        Policy(**fields)


def test_the_edges_of_each_range_are_accepted():
    """min_ulp 0, defect_fraction 0 and 1, a tiny factor and every fully_masked rule are valid."""
    for fields in (
        {"min_ulp": 0},
        {"defect_fraction": 0},
        {"defect_fraction": 1},
        {"factor": 1e-9},
        *({"fully_masked": rule} for rule in ("zeros", "nan", "uniform", "any")),
    ):
        assert dataclasses.asdict(Policy(**fields)).items() >= fields.items()


# -- whole audits -------------------------------------------------------------------------------------------------


def nan_when_nothing_kept(x, mask, axis=-1):
    """where(mask, x, -inf) then softmax in float64: a row with nothing kept gives exp(-inf + inf) = NaN."""
    w = np.where(mask, x.astype(np.float64), -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(w - w.max(axis=axis, keepdims=True))
        return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def softmax_in_dtype(x, axis=-1):
    """exp(x - max) / sum, every step in the audited dtype: sound, below best practice."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def schraudolph_softmax(x, axis=-1):
    """Softmax with Schraudolph's bit-trick exp in float32 (about 6% relative error): an accuracy defect."""
    w = np.maximum(x.astype(np.float32) - x.max(axis, keepdims=True).astype(np.float32), -87)
    e = (np.float32(12102203) * w + np.float32(1065353216)).astype(np.int32).view(np.float32)
    return (e / e.sum(axis, keepdims=True)).astype(x.dtype)


def audit(fn, kind, dtypes, family, policy=None):
    return softaudit.audit(fn, kind=kind, dtypes=dtypes, suite="quick", families=[family], policy=policy, cache=False)


def test_nan_on_fully_masked_rows_passes_only_when_the_policy_asks_for_nan():
    """fully_masked="nan" (or "any") accepts the NaN rows that the default "zeros" fails."""
    default = audit(nan_when_nothing_kept, "masked_softmax", ["float16", "float32"], "fully_masked").table
    assert list(default.verdict) == ["fail", "fail"] and set(default.cause) == {"fully_masked"}
    assert set(default.fully_masked) == {"nan"} and (default.nan == 0).all()  # undefined rows are not NaN events
    assert all("fully masked rows give nan, expected zeros" in note for note in default.note)
    for rule, verdict in (("nan", "pass"), ("any", "pass"), ("uniform", "fail")):
        policy = Policy(fully_masked=rule)
        result = audit(nan_when_nothing_kept, "masked_softmax", ["float16", "float32"], "fully_masked", policy)
        assert list(result.table.verdict) == [verdict] * 2, rule
        assert result.passed == (verdict == "pass") and result.settings["policy"]["fully_masked"] == rule


def test_a_softmax_in_the_dtype_warns_until_min_ulp_allows_it_and_strict_fails_the_run():
    """Several roundings in float16 cost a few ulps: warn by default (the run passes), pass with min_ulp=1000,
    warn and fail the run with strict."""
    (row,) = audit(softmax_in_dtype, "softmax", ["float16"], "gaussian").table.itertuples()
    assert row.warn_above == max(2 * row.best_ulp, 1.0) == 1.0  # best practice is correctly rounded: 1 ulp
    # (fail_above: the line at the worst element, at least what the measured line and the reordered sums allow)
    assert row.max_line_err < 1 and row.max_cond_err < row.fail_above
    assert row.max_ulp > 2 and (row.verdict, row.cause) == ("warn", "precision")
    assert row.note.split("; ", 1)[-1].startswith(f"max error {row.max_ulp:.3g} ulp > 1 = max(2 x best practice's")
    loose = audit(softmax_in_dtype, "softmax", ["float16"], "gaussian", Policy(min_ulp=1000))
    assert list(loose.table.verdict) == ["pass"] and list(loose.table.warn_above) == [1000.0]
    assert list(loose.table.max_ulp) == [row.max_ulp]  # the same measures, another verdict
    assert audit(softmax_in_dtype, "softmax", ["float16"], "gaussian").passed
    strict = audit(softmax_in_dtype, "softmax", ["float16"], "gaussian", Policy(strict=True))
    assert list(strict.table.verdict) == ["warn"] and not strict.passed


def test_factor_turns_an_approximate_exp_from_a_defect_into_a_warning_and_defect_fraction_cannot():
    """The bit-trick exp fails in float16 past the proven line, 2 x u (scale + T): factor=20 raises the line past its
    error (it still warns: far past best practice) and factor=1000 lets it pass; defect_fraction=1 (max_floor lifted)
    raises only the measured line, and past the proven one no floor lets an error through."""
    (row,) = audit(schraudolph_softmax, "softmax", ["float16"], "gaussian").table.itertuples()
    fail_at = max(2 * row.plain_cond_err, 2**2.75)  # the measured line F
    assert row.max_line_err > 1 and row.max_cond_err > row.fail_above and row.max_cond_err > fail_at
    assert (row.verdict, row.cause) == ("fail", "precision") and not audit(
        schraudolph_softmax, "softmax", ["float16"], "gaussian"
    ).passed
    rules = row.note.split("; ", 1)[-1]  # (after the finding's sentence)
    assert rules.startswith(f"error {row.max_bound_err:.3g} x u (scale + T) > 2: past what rounding")
    # Chosen from the measures, so that each really flips: 20 x u (scale + T) passes its error, 20 x best does not.
    assert 2 < row.max_bound_err < 20 and max(20 * row.best_ulp, 1.0) < row.max_ulp < 1000 * row.best_ulp
    for policy, verdict in (
        (Policy(factor=20), "warn"),
        (Policy(factor=1000), "pass"),
        (Policy(defect_fraction=1.0, max_floor=math.inf), "fail"),
    ):
        (changed,) = audit(schraudolph_softmax, "softmax", ["float16"], "gaussian", policy).table.itertuples()
        assert changed.verdict == verdict and (changed.max_line_err > 1) == (verdict == "fail"), policy
        assert changed.max_cond_err == row.max_cond_err


def test_zeros_that_best_practice_does_not_give_warn_within_the_conditioning():
    """logsumexp of [0, -90] in float32: log(1 + e**-90) is 8e-40, which m + log s gives as 0, within the rounding
    of s (the log kinds' scale holds it), while log1p keeps it: more zeros than best practice warn."""
    judge = Policy().judge
    t = tally(max_cond_err=1e-30, max_ulp=1.5e7, underflow=4)
    assert judge("logsumexp", F32, t, 1.0, 4.0, best_cond=0.5, best_zeros=4) == []
    (warn,) = judge("logsumexp", F32, t, 1.0, 4.0, best_cond=0.5, best_zeros=0)
    assert warn.rule == "below_best" and warn.text.endswith("and 4 zeros where the result is not 0 (best practice: 0)")
