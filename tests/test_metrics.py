"""Metrics on hand-made outputs whose errors are known exactly."""

import warnings

import numpy as np

import softaudit
from softaudit import conditioning, metrics
from softaudit import reference as R


def _measure(kind, x, y, dtype, mask=None):
    fmt = R.format_of(dtype)
    ref = R.evaluate(kind, x, mask, dtype=dtype)
    undefined = R.undefined_rows(x, mask)
    scale = conditioning.rows(softaudit.KINDS[kind], np.asarray(x, np.float64), mask, ref.hi + ref.lo)
    extra = {}
    if mask is not None:
        extra = {"masked": ~mask, "nothing_kept": (~mask).all(axis=-1)}
    return metrics.measure(metrics.basis(kind, fmt, ref, undefined=undefined, scale=scale, **extra), y, case_index=0)


def test_outputs_exactly_one_ulp_off_read_one_ulp():
    x = np.zeros((3, 4), np.float32)  # softmax is exactly 0.25 everywhere
    y = np.nextafter(np.full((3, 4), 0.25, np.float32), np.float32(1))
    t = _measure("softmax", x, y, "float32")
    assert t.max_ulp == 1.0 and t.mean_ulp == 1.0 and t.correctly_rounded == 0 and t.ge2_ulp == 0
    y2 = np.nextafter(np.nextafter(np.full((3, 4), 0.25, np.float32), np.float32(0)), np.float32(0))
    t2 = _measure("softmax", x, y2, "float32")
    assert t2.max_ulp == 1.0  # below a power of two the steps are half as wide: two of them make ulp(0.25)
    exact = _measure("softmax", x, np.full((3, 4), 0.25, np.float32), "float32")
    assert exact.max_ulp == 0 and exact.correctly_rounded == 12


def test_ulp_uses_the_subnormal_spacing_below_the_normal_range():
    fmt = R.format_of("float16")
    assert metrics.ulp(np.array([1.0, 2.0**-14, 2.0**-20, 0.0]), fmt).tolist() == [
        2.0**-10,
        2.0**-24,
        2.0**-24,
        2.0**-24,
    ]


def test_events_are_classified():
    x = np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 0.0], [0.0, -200.0, 1.0]], np.float32)
    y = R.softmax(x, dtype="float32").copy()
    y[0, 0] = np.nan
    y[1, 1] = np.inf
    y[2, 1] = 0.0  # e**-201 / (1 + e) is below float32's smallest subnormal: 0 is the correct rounding
    y[2, 0] = -0.25  # negative probability
    t = _measure("softmax", x, y, "float32")
    assert t.nan == 1 and t.overflow == 1 and t.negative == 1
    assert t.underflow == 0  # e**-201 relative to the row is below float32's subnormals: 0 is correct
    flipped = R.softmax(x, dtype="float32").copy()
    flipped[0] = flipped[0][::-1]
    assert _measure("softmax", x, flipped, "float32").argmax_flips == 1


def test_underflow_mask_leak_and_fully_masked_behaviour():
    x = np.array([[0.0, -90.0], [1.0, 2.0], [3.0, 4.0]], np.float32)  # e**-90 = 8.2e-40, a float32 subnormal
    mask = np.array([[True, True], [True, False], [False, False]])
    y = R.masked_softmax(x, mask, dtype="float32").copy()
    y[0, 1] = 0.0  # underflow: the reference is a nonzero subnormal
    y[1, 1] = 1e-3  # probability on a masked entry
    y[2] = 0.5  # a fully masked row comes out uniform
    t = _measure("masked_softmax", x, y, "float32", mask)
    assert t.underflow == 1 and t.mask_leak == 1
    assert t.fully_masked_behaviour == "uniform"


def test_the_short_route_gives_the_same_tally_as_the_general_one():
    """measure() skips the event masks where every element is compared and the output is finite; forcing the
    general route on the same outputs must give the same numbers, field for field."""
    import dataclasses

    from softaudit import candidates
    from softaudit.adapters._call import call
    from softaudit.cases import FAMILIES
    from softaudit.runner import Prepared

    shorts = 0
    for kind, dtype, family in [
        ("softmax", "float16", "gaussian"),
        ("softmax", "float32", "long"),
        ("log_softmax", "bfloat16", "dominant"),
        ("logsumexp", "float32", "offset"),
        ("masked_softmax", "float16", "padding"),
        ("attention", "float16", "attn_gaussian"),
    ]:
        fmt = R.format_of(dtype)
        for i, case in enumerate(FAMILIES[family].cases(kind, fmt, "quick")):
            pc = Prepared(case, fmt, i)
            for cand in (c for c in candidates.builtins() if c.kind == kind):
                y, _ = call(cand, pc.inputs, pc.mask, pc.output_shape, fmt.dtype, None)
                general = dataclasses.replace(pc.basis)
                general.everything_compared = False
                shorts += pc.basis.everything_compared and bool(np.isfinite(y.astype(float)).all())
                fast, slow = metrics.measure(pc.basis, y, case_index=i), metrics.measure(general, y, case_index=i)
                assert dataclasses.asdict(fast) == dataclasses.asdict(slow), (cand.name, dtype, case.description)
    assert shorts > 50  # the short route was taken


def test_relative_error_of_a_reference_far_below_the_dtype_spacing():
    """softmax of [0, -727] in float16: p = e**-727 / (1 + e**-727), about 1.7e-316, rounds to 0 (float16's
    smallest subnormal is 6e-8, and 2**-24 / p overflows float64). A candidate's 0 is then off by all of p:
    relative error 1 (not inf), ULP error p / 2**-24, and no underflow event (0 is the correct rounding)."""
    x = np.array([[0.0, -727.0]])
    y = np.array([[1.0, 0.0]], np.float16)
    t = _measure("softmax", x.astype(np.float16), y, "float16")
    assert t.max_rel_err == 1.0 and t.underflow == 0
    assert np.isclose(t.max_ulp, np.exp(-727.0) / 2.0**-24, rtol=1e-6, atol=0)


def test_a_relative_error_past_the_largest_float_is_inf_without_a_numpy_warning():
    """A uniform row where the exact probabilities reach 1e-300s (temperature, float16): |y - r| / |r| overflows."""

    def uniform(x, axis=-1):
        return np.full_like(x, 1.0 / x.shape[axis])

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        result = softaudit.audit(
            uniform, kind="softmax", dtypes=["float16"], suite="quick", families=["temperature"], isolation="none"
        )
    assert result.table.max_rel_err.max() == np.inf
