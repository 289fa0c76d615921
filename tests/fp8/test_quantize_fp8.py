"""The quantize step's audit: sound steps pass under their scale convention, the defects fail with their cause."""

import numpy as np
import pytest

from softaudit import fp8
from softaudit.candidates import quantize_fp8 as steps
from softaudit.reference import fp8 as _fp8


@pytest.mark.parametrize("name", ["quantize_fp8.textbook", "quantize_fp8.power_of_two"])
def test_sound_quantize_steps_pass(name):
    f, power_of_two, _ = steps.BUILTINS[name]
    table = fp8.audit_quantize_fp8(f, power_of_two=power_of_two, name=name)
    assert len(table) == 2 * 3 * 5 and set(table.verdict) == {"pass"}
    assert table.x8_off_more.sum() == 0 and table.descale_steps.max() <= 1


def test_a_power_of_two_step_judged_as_fmt_max_over_amax_fails():
    # the two conventions are different answers: declaring the wrong one is a finding, not noise
    table = fp8.audit_quantize_fp8(steps.power_of_two, power_of_two=False)
    assert "fail" in set(table.verdict)


def test_amax_over_the_wrong_axis_fails_as_values_clamped():
    table = fp8.audit_quantize_fp8(steps.wrong_axis)
    failed = table[table.verdict == "fail"]
    assert set(failed.granularity) == {"head"}
    assert failed.cause.str.startswith("amax_too_small").any()


def test_a_zero_amax_unguarded_is_nan_and_named():
    table = fp8.audit_quantize_fp8(steps.unguarded)
    # a group all zero: every case of zeros, and the zero head wherever a head or a block has its own scale
    zero = table[
        table.case.str.contains("every value zero")
        | (table.case.str.contains("all zero") & (table.granularity != "tensor"))
    ]
    assert len(zero) == 2 * 5
    assert set(table[table.case.str.contains("all zero") & (table.granularity == "tensor")].verdict) == {"pass"}
    assert set(zero.verdict) == {"fail"} and zero.cause.str.startswith("zero_amax").all()
    tiny = table[table.case.str.contains("subnormal")]
    assert tiny.cause.str.startswith("scale_overflow").all()


def test_which_convention_rounds_more():
    """A power-of-two scale is at most fmt_max / amax, so every value it maps to zero the other maps to zero too
    (rounding is monotonic) and it flushes more; on values in the normal range the two round alike (the relative
    rounding of a significand does not depend on where in its binade the scale puts it, on average), and the
    power-of-two descale is exact where the other is rounded to float32."""
    x = np.random.default_rng(0).standard_normal((1, 1, 8192, 16)).astype(np.float32).astype(np.float64)
    found = {}
    for p2 in (False, True):
        x8, d = _fp8.quantize(x, "float8_e4m3fn", "tensor", p2)
        back = x8.astype(np.float64) * float(d)
        normal = np.abs(x8.astype(np.float64)) >= 2.0**-6
        found[p2] = (
            int(np.count_nonzero(x8.astype(np.float64) == 0)),
            np.mean(np.abs(back - x)[normal] / np.abs(x[normal])),
        )
    assert found[True][0] >= found[False][0]
    assert abs(found[True][1] - found[False][1]) < 0.02 * found[False][1]
    scale, descale = _fp8.scales(np.array([np.abs(x).max()]), "float8_e4m3fn", power_of_two=True)
    assert float(scale[0]) * float(descale[0]) == 1.0


def test_a_step_that_returns_the_wrong_dtype_is_an_error_row():
    table = fp8.audit_quantize_fp8(lambda x, fmt, g: (x, np.float32(1)))
    assert set(table.verdict) == {"error"} and table.note[0].startswith("raised ValueError: x8 must be")
