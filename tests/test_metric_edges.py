"""Every error measure against an independent mpmath computation, at the edges of every dtype.

Exact values r are placed (through softmax and log-sum-exp of float64 rows) at a dtype's smallest normal, just
below it, among its subnormals, just below and above powers of two, and near its largest finite value; candidate
outputs are a few spacings off the correct rounding. The true ULP, relative and absolute errors are computed here in
mpmath from r itself (its binade from its own exponent, ml_dtypes' finfo for the format), never from softaudit's
reference arrays, and softaudit's measures (a Basis made as prepare.py makes one) must agree to 1e-6 relative, or
to 1e-6 of the measure's unit for errors far below one (a correctly rounded output's error can be any fraction of an
ulp; the reference knows r to far better than an ulp, not to every bit). Absolute errors are float64 numbers: below
2**-1022 they lie on its 2**-1074 grid.
"""

import math

import ml_dtypes
import mpmath
import numpy as np
import pytest

from softaudit import kinds, metrics
from softaudit import reference as R

DTYPES = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e4m3b11fnuz",
    "float8_e3m4",
    "float8_e4m3",
)
PREC = 2400  # bits: 1 - 2**-1074 held exactly, and r's own rounding nothing against a tolerance of 1e-9
TOL = 1e-6


def _finfo(dtype):
    info = ml_dtypes.finfo(np.dtype(getattr(ml_dtypes, dtype, None) or dtype))
    return int(info.nmant) + 1, int(info.minexp), float(info.max)  # precision, emin, largest finite


def _exact(kind, row):
    """r for one float64 row, in mpmath at PREC bits."""
    x = [mpmath.mpf(float(v)) for v in row]
    total = mpmath.fsum(mpmath.exp(v) for v in x)
    return [mpmath.log(total)] if kind == "logsumexp" else [mpmath.exp(v) / total for v in x]


def _spacing(v, p, emin):
    """The spacing of a format of precision p at the (nonzero or zero) value v: from v's own binade."""
    e = emin if v == 0 else max(int(mpmath.frexp(v)[1]) - 1, emin)
    return mpmath.ldexp(1, e - (p - 1))


def _softmax_row(v):
    """A float64 row [0, -t] whose second softmax output is about v (and whose first is about 1 - v)."""
    return [0.0, -float(mpmath.log((1 - v) / v))]


def _rows(dtype):
    """(kind, row) pairs that put r at dtype's edges."""
    p, emin, top = _finfo(dtype)
    normal = mpmath.ldexp(1, emin)
    close = mpmath.ldexp(1, -min(p + 8, 40))  # (t is a float64: r moves by about 2**-43 relative with it)
    rows = [
        ("softmax", _softmax_row(normal * (1 + close))),  # just above the smallest normal
        ("softmax", _softmax_row(normal * (1 - close))),  # just below it (rounds up to it)
        ("softmax", _softmax_row(normal * mpmath.mpf("0.37"))),  # a subnormal
        ("softmax", _softmax_row(normal * mpmath.mpf("0.0037"))),  # a small subnormal
        # rounds to 0 (beside 1 / (1 + e**-0.5): 1 - v itself would lie closer to 1 than a float64 lo can say)
        ("softmax", [0.0, -0.5, _softmax_row(mpmath.ldexp(mpmath.mpf("0.3"), emin - p))[1]]),
        ("softmax", [0.0, math.ldexp(1.0, -(p + 10))]),  # 0.5 -+ 2**-(p + 12): both sides of a power of two
        ("softmax", _softmax_row(mpmath.ldexp(1, -(p + 6)))),  # 1 - 2**-(p + 6): just below 1, rounds to 1
        ("softmax", _softmax_row(mpmath.mpf(0.3))),
    ]
    if dtype == "float64":
        rows.append(("softmax", _softmax_row(mpmath.mpf("6.2165e-320"))))
        rows.append(("logsumexp", [top, top]))  # r = largest + log 2: rounds down to the largest finite
    else:  # r = largest (1 - 2**-(p + 6)): just below the largest finite value
        rows.append(("logsumexp", [float(mpmath.mpf(top) * (1 - mpmath.ldexp(1, -(p + 6))) - mpmath.log(2))] * 2))
    return rows


def _basis(kind, x, dtype):
    """The Basis as prepare.Prepared makes it: the kind's reference and conditioning parts, then metrics.basis."""
    k = kinds.get(kind)
    inputs = {"x": x}
    refs = k.reference(k, inputs, None, np.dtype(getattr(ml_dtypes, dtype, None) or dtype))
    (extra,) = k.conditioning(k, inputs, None, refs)
    return metrics.basis(kind, R.format_of(dtype), refs[0], **extra), refs[0]


def _case(kind, row, dtype, steps):
    """softaudit's tally and the true (max ULP, mean ULP, max relative, max absolute) error of an output `steps`
    spacings off the correctly rounded one (per element)."""
    p, emin, _ = _finfo(dtype)
    x = np.array([row])
    b, ref = _basis(kind, x, dtype)
    rounded = np.asarray(ref.value, np.float64).reshape(-1)
    with mpmath.workprec(PREC):
        exact = _exact(kind, row)
        wanted = [mpmath.mpf(float(v)) + k * _spacing(mpmath.mpf(float(v)), p, emin) for v, k in zip(rounded, steps)]
        wanted += [mpmath.mpf(float(v)) for v in rounded[len(steps) :]]
        y = np.array([float(v) for v in wanted]).astype(ref.value.dtype).reshape(ref.value.shape)
        got = [mpmath.mpf(float(v)) for v in y.astype(np.float64).reshape(-1)]
        absolute = [abs(g - r) for g, r in zip(got, exact)]
        ulps = [a / _spacing(r, p, emin) for a, r in zip(absolute, exact)]
        relative = [a / abs(r) for a, r in zip(absolute, exact)]  # (1 for a y of 0 where r rounds to 0)
        scales = _scales(kind, row, exact)
        cond = [a / (mpmath.ldexp(1, -p) * max(s, mpmath.ldexp(1, emin))) for a, s in zip(absolute, scales)]
        truth = (max(ulps), mpmath.fsum(ulps) / len(ulps), max(relative), max(absolute), max(cond))
    return metrics.measure(b, y, case_index=0), truth


def _scales(kind, row, exact):
    """The conditioning scales docs/metrics.md defines, in mpmath: softmax p_i (1 + (1 - p_i) |x_i| +
    sum_{k != i} p_k |x_k|), log-sum-exp |r| + sum_k p_k |x_k| + 1 (the rounding of the sum)."""
    x = [mpmath.mpf(float(v)) for v in row]
    total = mpmath.fsum(mpmath.exp(v) for v in x)
    p = [mpmath.exp(v) / total for v in x]
    if kind == "logsumexp":
        return [abs(exact[0]) + mpmath.fsum(pk * abs(xk) for pk, xk in zip(p, x)) + 1]
    spread = mpmath.fsum(pk * abs(xk) for pk, xk in zip(p, x))
    return [pi * (1 + (1 - pi) * abs(xi) + spread - pi * abs(xi)) for pi, xi in zip(p, x)]


def _close(got, true, unit=1.0, grid=0.0):
    """got within TOL relative of true, or within TOL units of the measure, or within `grid` (float64's)."""
    return abs(mpmath.mpf(got) - true) <= max(TOL * abs(true), TOL * unit, grid)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_measure_matches_mpmath_at_the_edges(dtype):
    for kind, row in _rows(dtype):
        for steps in ((4, -3, 2), (-2, 1, 1), (0, 0, 0)):
            steps = steps[:1] if kind == "logsumexp" else steps
            if kind == "logsumexp" and steps[0] > 0:  # (above the largest finite there is nothing)
                steps = (-steps[0],)
            t, (max_ulp, mean_ulp, rel, absolute, cond) = _case(kind, row, dtype, steps)
            where = f"{dtype} {kind} {row} {steps}"
            p, emin, _ = _finfo(dtype)
            with mpmath.workprec(PREC):
                biggest = max(_spacing(r, p, emin) for r in _exact(kind, row))
            assert _close(t.max_ulp, max_ulp), (where, "max_ulp", t.max_ulp, max_ulp)
            assert _close(t.mean_ulp, mean_ulp), (where, "mean_ulp", t.mean_ulp, mean_ulp)
            assert _close(t.max_rel_err, rel, 2.0 ** (1 - p)), (where, "max_rel_err", t.max_rel_err, rel)
            assert _close(t.max_abs_err, absolute, biggest, 2.0**-1074), (where, "max_abs_err", t.max_abs_err, absolute)
            # (the scale is a float64 formula: its own rounding, a few u of float64, is all the tolerance adds; a
            # scale past float64's largest value is taken as it, docs/metrics.md, so only an upper bound there)
            if max(_scales(kind, row, _exact(kind, row))) < np.finfo(np.float64).max:
                assert abs(t.max_cond_err - cond) <= 1e-9 * cond + TOL, (where, "max_cond_err", t.max_cond_err, cond)
            else:
                assert cond - TOL <= t.max_cond_err <= 2 * cond + TOL, (where, "max_cond_err", t.max_cond_err, cond)


def test_an_exact_value_just_below_a_power_of_two_takes_the_ulp_of_its_own_binade():
    """float64, r = 0.5 - 2.2e-19 rounds to 0.5: y = 0.5 - 2**-54 is almost a whole ulp of r (its binade's ulp is
    2**-54), not half of 0.5's."""
    with mpmath.workprec(PREC):
        r = _exact("softmax", [0.0, 2.0**-60])[0]  # softmax [0, d] is 1/2 - d/4 + O(d**3)
        assert 0.5 - mpmath.ldexp(1.01, -62) < r < 0.5
    t, truth = _case("softmax", [0.0, 2.0**-60], "float64", (-0.5, 0))  # y = 0.5 - 2**-54
    assert 0.99 < truth[0] < 1 and _close(t.max_ulp, truth[0]), (t.max_ulp, truth[0])


@pytest.mark.parametrize("v", ["2.2250738585072014e-308", "6.2165e-320"])
def test_float64_results_at_the_bottom_of_the_range_are_measured_from_their_exact_value(v):
    """float64, r just above 2**-1022 or the subnormal 6.2165e-320: 4 spacings above R are not 4 ulps from r (the
    float64 correction lo of such an r has lost its bits, or is 0)."""
    t, truth = _case("softmax", _softmax_row(mpmath.mpf(v) * (1 + mpmath.ldexp(1, -40))), "float64", (0, 4))
    assert abs(truth[0] - 4) > 0.1 and _close(t.max_ulp, truth[0]), (t.max_ulp, truth[0])
    assert _close(t.max_rel_err, truth[2]), (t.max_rel_err, truth[2])
