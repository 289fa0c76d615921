"""The FP8 conversions and the quantize step against independent computations: every FP8 value enumerated from its
bits, exact rationals, ml_dtypes' and torch's casts bit for bit on the hard inputs (ties, subnormals, max,
overflow)."""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from softaudit.reference import fp8 as _fp8

FORMATS = _fp8.FORMATS


def _all_values(fmt):
    """Every finite FP8 value of the format, from its 256 bit patterns, as (value, bits) sorted by value."""
    dt = np.dtype(getattr(ml_dtypes, fmt))
    vals = np.arange(256, dtype=np.uint8).view(dt).astype(np.float64)
    ok = np.isfinite(vals)
    return vals[ok], np.arange(256)[ok]


def _hard_inputs(fmt):
    """Each FP8 value, the midpoints between neighbours (ties), a float32 ulp either side of them, the overflow
    thresholds, infinities and NaN: float32 values, so every cast sees one exact input."""
    vals, _ = _all_values(fmt)
    pos = np.unique(vals[vals >= 0])
    mids = (pos[:-1] + pos[1:]) / 2
    top = pos[-1]
    ulp_top = pos[-1] - pos[-2]
    beyond = np.array([top + ulp_top / 2, top + ulp_top, 2 * top, 1e30, np.inf])
    below_sub = np.array([pos[1] / 2, pos[1] / 4, pos[1] * 0.75])
    x = np.concatenate([pos, mids, beyond, below_sub]).astype(np.float32)
    x = np.concatenate([x, np.nextafter(x, np.float32(0)), np.nextafter(x, np.float32(np.inf))])
    return np.concatenate([x, -x, [np.float32(np.nan)]]).astype(np.float32)


def _nearest(value, fmt, saturate):
    """Round to nearest, ties to the even bit pattern, by search over every FP8 value (exact rationals)."""
    vals, bits = _all_values(fmt)
    if np.isnan(value):
        return np.nan
    top = vals.max()
    if saturate:
        value = float(np.clip(value, -top, top))
    if np.isinf(value):
        return np.nan if fmt == "float8_e4m3fn" else value
    exact = Fraction(float(value))
    # past fmt_max by half an ulp of the next binade or more: overflow (IEEE's rule for the unbounded exponent)
    ulp_top = Fraction(float(np.sort(np.unique(vals))[-1] - np.sort(np.unique(vals))[-2]))
    if abs(exact) >= Fraction(float(top)) + ulp_top / 2 and not (
        abs(exact) == Fraction(float(top)) + ulp_top / 2 and (int(bits[vals == top][0]) & 1) == 0
    ):
        return np.nan if fmt == "float8_e4m3fn" else np.copysign(np.inf, value)
    # (the nearest values' differences from a float32 input are exact in float64; far ones cannot tie with them)
    dist = np.abs(vals - float(value))
    ties = sorted((int(b) & 1, v) for v, b in zip(vals[dist == dist.min()], bits[dist == dist.min()]))
    out = ties[0][1]
    return np.copysign(out, value) if out == 0 else out


@pytest.mark.parametrize("fmt", FORMATS)
def test_to_fp8_matches_the_search_ml_dtypes_and_torch_bit_for_bit(fmt):
    torch = pytest.importorskip("torch")
    x = _hard_inputs(fmt)
    ours = _fp8.to_fp8(x, fmt, saturate=False)
    expected = np.array([_nearest(v, fmt, False) for v in x.astype(np.float64)])
    got = ours.astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(expected))
    assert np.array_equal(got[~np.isnan(got)], expected[~np.isnan(expected)])
    assert np.array_equal(np.signbit(got[got == 0]), np.signbit(expected[expected == 0]))
    theirs = x.astype(getattr(ml_dtypes, fmt))
    finite = ~np.isnan(ours.astype(np.float64))
    assert np.array_equal(ours.view(np.uint8)[finite], theirs.view(np.uint8)[finite])
    assert np.array_equal(np.isnan(theirs.astype(np.float64)), ~finite)
    t = torch.from_numpy(x).to(getattr(torch, fmt)).view(torch.uint8).numpy()
    assert np.array_equal(ours.view(np.uint8)[finite], t[finite])


@pytest.mark.parametrize("fmt", FORMATS)
def test_saturation_clamps_overflow_and_infinity_to_fmt_max(fmt):
    x = _hard_inputs(fmt).astype(np.float64)
    got = _fp8.to_fp8(x, fmt, saturate=True).astype(np.float64)
    expected = np.array([_nearest(v, fmt, True) for v in x])
    assert np.array_equal(np.isnan(got), np.isnan(x))
    keep = ~np.isnan(x)
    assert np.array_equal(got[keep], expected[keep])


def test_the_overflow_edges_by_hand():
    # e4m3fn: 448 = 1.75 x 2**8, the next step 480 would be 1.875 x 2**8; 464 is the tie and goes to even 448
    e4 = _fp8.to_fp8(np.array([464.0, 465.0, np.inf]), "float8_e4m3fn", saturate=False).astype(np.float64)
    assert e4[0] == 448 and np.isnan(e4[1]) and np.isnan(e4[2])
    # e5m2: 57344 = 1.75 x 2**15 is odd, so the tie 61440 rounds up to 2**16: an overflow
    e5 = _fp8.to_fp8(np.array([61439.0, 61440.0]), "float8_e5m2", saturate=False).astype(np.float64)
    assert e5[0] == 57344 and e5[1] == np.inf
    sat = _fp8.to_fp8(np.array([61440.0, -1e9, 465.0]), "float8_e5m2").astype(np.float64)
    assert list(sat) == [57344.0, -57344.0, 448.0]  # (465: between 448 and 512, nearer 448)
    assert _fp8.fmt_max("float8_e4m3fn") == 448 and _fp8.fmt_max("float8_e5m2") == 57344


def _round32(value: Fraction) -> float:
    """Round a rational to float32 by comparing the float32 neighbours of a nearby float exactly (ties to even)."""
    guess = np.float32(float(value))
    near = [np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf))]
    dist = [abs(Fraction(float(c)) - value) for c in near]
    best = min(dist)
    picks = [c for c, d in zip(near, dist) if d == best]
    return float(min(picks, key=lambda c: int(np.float32(c).view(np.uint32)) & 1))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("granularity", ["tensor", "head", "block"])
def test_quantize_is_one_rounding_of_x_times_the_correctly_rounded_scale(fmt, granularity):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((2, 3, 200, 4)) * np.array([1.0, 30.0, 1e-3])[None, :, None, None]).astype(np.float32)
    x8, descale = _fp8.quantize(x, fmt, granularity)
    top = Fraction(_fp8.fmt_max(fmt))
    x64 = x.astype(np.float64)
    if granularity == "tensor":
        groups = [(Ellipsis,)]
    elif granularity == "head":
        groups = [(b, h) for b in range(2) for h in range(3)]
    else:
        groups = [(b, h, slice(i * 128, (i + 1) * 128)) for b in range(2) for h in range(3) for i in range(2)]
    for where in groups:
        amax = np.abs(x64[where]).max()
        scale = _round32(top / Fraction(amax))
        at = where if granularity != "block" else (where[0], where[1], where[2].start // 128)
        assert descale[() if granularity == "tensor" else at] == np.float32(_round32(1 / Fraction(scale)))
        block = x64[where].ravel()[:50]
        want = np.array([_nearest(v * scale, fmt, True) for v in block])
        assert np.array_equal(x8[where].astype(np.float64).ravel()[:50], want)


def test_power_of_two_scales_zero_amax_and_the_float32_limit():
    scale, descale = _fp8.scales(np.array([448.0, 449.0, 1.0, 0.0, 1e-40, np.inf]), "float8_e4m3fn", True)
    # 448/449 < 1: 2**-1; 448/1: 256; zero amax: 1 and 1; 448/1e-40 past 2**127: capped there
    assert list(scale[:5]) == [1.0, 0.5, 256.0, 1.0, 2.0**127]
    assert list(descale[:5]) == [1.0, 2.0, 1 / 256, 1.0, 2.0**-127]
    assert np.isnan(scale[5]) and np.isnan(descale[5])
    s, d = _fp8.scales(np.array([0.0, 1e-40]), "float8_e5m2")
    assert s[0] == d[0] == 1 and s[1] == np.finfo(np.float32).max
    x8, d = _fp8.quantize(np.zeros((1, 1, 4, 4)), "float8_e4m3fn", "head")
    assert not x8.astype(np.float64).any() and d.shape == (1, 1) and d[0, 0] == 1


def test_dequantize_repeats_kv_descales_over_query_heads():
    x8 = np.ones((1, 4, 2, 2)).astype(ml_dtypes.float8_e4m3fn)
    d = np.array([[0.5, 4.0]], np.float32)
    got = _fp8.dequantize(x8, d, heads_axis_groups=2)
    assert list(got[0, :, 0, 0]) == [0.5, 0.5, 4.0, 4.0]
    with pytest.raises(ValueError, match="does not fit"):
        _fp8.dequantize(x8, d)
