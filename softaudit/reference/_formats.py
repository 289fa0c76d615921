"""Binary floating-point formats and exact round-to-nearest-even into them.

A `Format` describes a target: its precision, its smallest normal exponent, its largest finite value and what an
overflow becomes (inf, NaN for the float8 types without inf, or the largest value for the saturating types).
Rounding here never goes through a hardware or library cast: ml_dtypes' float64 -> bfloat16 cast rounded twice
(through float32) before its 0.7, so every rounding is done on the exact value and only exactly representable
values are cast.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
from mpmath import libmp

from ._dd import pow2_pair

#: The names `format_of` accepts, in the order `softaudit` lists them.
DTYPE_NAMES = (
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "longdouble",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e4m3b11fnuz",
    "float8_e3m4",
    "float8_e4m3",
)

_UNBOUNDED = -(10**5000)  # below any exponent float inputs can produce (e**-1e4932 included)


@dataclasses.dataclass(frozen=True)
class Format:
    """A binary floating-point format with round to nearest, ties to even, and gradual underflow."""

    name: str
    precision: int  # significand bits, the leading bit included
    emin: int  # 2**emin is the smallest normal number
    max_mpf: tuple  # the largest finite value, exact (an mpmath libmp value; finf when unbounded)
    overflow: str  # what a value beyond max_finite rounds to: "inf", "nan" or "max" (saturating)
    dtype: np.dtype | None  # None for the unbounded mpmath format

    @property
    def max_float(self) -> float:
        """The largest finite value as a float64 (inf when the format is wider than float64)."""
        return libmp.to_float(self.max_mpf) if self.max_mpf != libmp.finf else math.inf

    @property
    def min_subnormal_exp(self) -> int:
        """The smallest positive value is 2**min_subnormal_exp."""
        return self.emin - self.precision + 1


#: Below this |hi| a float64 lo has lost bits (it is near 2**-53 |hi|, below the normal range): the fast tiers leave
#: such results (for float64 targets) to tier C, which keeps the correction scaled in `Result.fine`.
FINE_BELOW = 2.0**-969
FINE_SCALE = 1074  # fine = (r - hi) x 2**FINE_SCALE: at most 2**52 in magnitude where |hi| < FINE_BELOW


def mp_format(prec: int) -> Format:
    """The format of mpmath values at `prec` bits: no exponent limits, no overflow."""
    if not isinstance(prec, int) or isinstance(prec, bool) or prec < 2:
        raise ValueError(f"prec must be an integer >= 2, got {prec!r}")
    return Format(f"mpf{prec}", prec, _UNBOUNDED, libmp.finf, "inf", None)


def _lookup_dtype(dtype) -> np.dtype:
    if isinstance(dtype, str):
        found = getattr(np, dtype, None) or getattr(ml_dtypes, dtype, None)
        if dtype not in DTYPE_NAMES or found is None:
            raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_NAMES)}")
        return np.dtype(found)
    try:
        return np.dtype(dtype)
    except TypeError:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_NAMES)}") from None


def is_float_dtype(dt: np.dtype) -> bool:
    """True for numpy's binary floating types and the floating types of ml_dtypes."""
    if dt.kind == "f":
        return True
    return dt.kind == "V" and dt.type.__module__.startswith("ml_dtypes") and dt.name.startswith(("bfloat", "float"))


def format_of(dtype) -> Format:
    """The `Format` of a numpy or ml_dtypes floating dtype, given as a dtype, a type or a name."""
    dt = _lookup_dtype(dtype)
    if not is_float_dtype(dt):
        raise ValueError(f"dtype must be a floating-point type, got {dt}")
    return _format_of_dtype(dt)


_FORMATS: dict[np.dtype, Format] = {}


def _format_of_dtype(dt: np.dtype) -> Format:
    fmt = _FORMATS.get(dt)
    if fmt is None:
        info = ml_dtypes.finfo(dt)
        with np.errstate(all="ignore"):
            inf_as = np.array([np.inf]).astype(dt)[0]
        overflow = "inf" if np.isinf(float(inf_as)) else ("nan" if np.isnan(float(inf_as)) else "max")
        name = "longdouble" if dt == np.longdouble and dt != np.float64 else dt.name
        fmt = Format(name, int(info.nmant) + 1, int(info.minexp), exact_mpf(info.max), overflow, dt)
        _FORMATS[dt] = fmt
    return fmt


def exact_mpf(value) -> tuple:
    """The exact libmp value of a float of any supported dtype (NaN and infinities included)."""
    if isinstance(value, np.longdouble) and np.dtype(np.longdouble) != np.float64:
        if not np.isfinite(value):
            return libmp.from_float(float(value))
        num, den = value.as_integer_ratio()
        return libmp.from_man_exp(num, -(den.bit_length() - 1))
    return libmp.from_float(float(value))


def round_mpf(value: tuple, negative: bool, fmt: Format) -> tuple[tuple, bool]:
    """Round an exact libmp value to `fmt`; return the rounded magnitude and its sign (apart, for signed zeros).

    `negative` gives the sign to use when `value` is zero (libmp has no negative zero).
    """
    sign, man, exp, bc = value
    if not man:
        return (value, negative) if value in (libmp.fzero, libmp.fnan) else (libmp.finf, bool(sign))
    negative = bool(sign)
    qe = max(exp + bc - 1, fmt.emin) - (fmt.precision - 1)
    if qe - exp > bc:  # value < 2**(exp + bc) <= half the quantum: rounds to zero (no giant shifts)
        return libmp.fzero, negative
    if exp < qe:
        shift = qe - exp
        n = man >> shift
        rem = man - (n << shift)
        half = 1 << (shift - 1)
        if rem > half or (rem == half and n & 1):
            n += 1
        value = libmp.from_man_exp(n, qe) if n else libmp.fzero
    else:
        value = libmp.from_man_exp(man, exp)
    if libmp.mpf_cmp(value, fmt.max_mpf) > 0:
        value = {"inf": libmp.finf, "nan": libmp.fnan, "max": fmt.max_mpf}[fmt.overflow]
    return value, negative


def round_fraction(value: Fraction, fmt: Format) -> tuple[tuple, bool]:
    """Round an exact rational to `fmt` (used where the exact result is rational, e.g. 1/k or a mean)."""
    num, den = value.numerator, value.denominator
    if num == 0:
        return libmp.fzero, False
    negative = num < 0
    num = abs(num)
    # Scale so the integer part carries precision + 2 bits, then keep a sticky bit for the remainder.
    shift = fmt.precision + 2 - (num.bit_length() - den.bit_length())
    shift = max(shift, -fmt.min_subnormal_exp + 2) if fmt.emin != _UNBOUNDED else shift
    scaled, rem = divmod(num << shift if shift >= 0 else num, den if shift >= 0 else den << -shift)
    man = (scaled << 1) | (1 if rem else 0)
    rounded, _ = round_mpf(libmp.from_man_exp(man, -shift - 1), False, fmt)
    return rounded, negative


def mpf_to_numpy(values: list[tuple[tuple, bool]], fmt: Format, shape) -> np.ndarray:
    """Rounded libmp values as mpmath objects (dtype None) or a longdouble array: the formats the fast tiers do
    not serve (every other one is gathered in its own dtype directly)."""
    if fmt.dtype is None:
        out = np.empty(len(values), dtype=object)
        out[:] = [_mpf_object(v, neg) for v, neg in values]
        return out.reshape(shape)
    return np.array([_to_longdouble(v, neg) for v, neg in values], dtype=np.longdouble).reshape(shape)


def cast_exact(values: np.ndarray, fmt: Format) -> np.ndarray:
    """Cast float64 values that are exactly representable in fmt (or +-inf / NaN) to fmt's dtype."""
    with np.errstate(all="ignore"):
        return values.astype(fmt.dtype)


def _mpf_object(value: tuple, negative: bool):
    import mpmath

    # make_mpf wraps the value as it is; mpmath.mpf(value) would round it to the global precision.
    return mpmath.mp.make_mpf(libmp.mpf_neg(value) if negative else value)  # mpmath has no signed zero


def _to_longdouble(value: tuple, negative: bool) -> np.longdouble:
    _, man, exp, _ = value
    if not man:
        special = libmp.to_float(value) if value != libmp.fzero else 0.0
        return np.longdouble(math.copysign(special, -1.0 if negative else 1.0))
    hi, lo = man >> 32, man & 0xFFFFFFFF
    result = np.ldexp(np.longdouble(hi) * np.longdouble(2**32) + np.longdouble(lo), exp)
    return -result if negative else result


def decide_arrays(h, lo, err, sign, fmt: Format) -> tuple[np.ndarray, np.ndarray]:
    """Round h + lo to fmt wherever every number within err of it rounds alike.

    Returns the rounded values (float64, exactly representable in fmt, +-inf on overflow) and a mask of where the
    rounding is decided. `lo` may be None (zero). `sign` (+1, -1, or 0 for unknown) is the known sign of the exact
    result; it lets a result whose interval straddles zero round to a signed zero. Conservative: an undecided
    element may be decidable. This is the hot path of the fast tiers: float32 and float64 targets have shortcuts
    (about a third of the operations), every other format takes the general route.
    """
    with np.errstate(all="ignore"):
        if fmt.dtype == np.float32 and lo is None:  # a double-double keeps the general route: it needs lo
            rounded, ok = _decide_by_cast(h, err, sign)
        elif fmt.dtype == np.float64:
            mag = h if h.min(initial=0.0) >= 0 else np.abs(h)  # |h| is h for the softmax's results
            ok = _decide_float64(h, mag, lo, err)
            rounded = h  # copied before any change below: h is the caller's
            smallest = mag.min(initial=np.inf)  # NaN where h has one: then the masks below say it
            tiny = None if smallest >= 2.0**-968 else ~ok & (mag < 2.0**-968)
            if tiny is not None and tiny.any():  # results near or below the subnormal range: the general route
                rounded = h.copy()
                rounded[tiny], ok[tiny] = _decide_general(h[tiny], None if lo is None else lo[tiny], err[tiny], fmt)
        else:
            rounded, ok = _decide_general(h, lo, err, fmt)
    if not ok.all():  # exact zeros, and results known to round to a signed zero: rare, so only where undecided
        if rounded is h:
            rounded = h.copy()
        rest = np.flatnonzero(~ok)
        hr, er = h.flat[rest], err.flat[rest]
        lr = 0.0 if lo is None else lo.flat[rest]
        sr = np.broadcast_to(sign, h.shape).flat[rest]
        exact_zero = (hr == 0) & (lr == 0) & (er == 0)
        tiny = (sr != 0) & (np.abs(hr) + np.abs(lr) + er < math.ldexp(1.0, fmt.min_subnormal_exp - 1))
        rounded.flat[rest] = np.where(exact_zero, 0.0, np.where(tiny, np.copysign(0.0, sr), rounded.flat[rest]))
        ok.flat[rest] = exact_zero | tiny
    if fmt.min_subnormal_exp < -1022 and not (fmt.dtype == np.float64 and smallest >= FINE_BELOW):
        # float64: a float64 lo below ~2**-969 has lost bits; tier C keeps them
        ok &= ~((np.abs(h) < FINE_BELOW) & (h != 0) & (err != 0))
    if lo is None:  # a single float cannot say on which side of a power of two within err of it the result lies
        ok &= ~_straddles_power_of_two(h, err)
    return rounded, ok


def _straddles_power_of_two(h, err) -> np.ndarray:
    """Where h +- err reaches a power of two of h's binade (2**(e-1) <= |h| < 2**e): the exact result's binade,
    which sets its ulp in the error measures, is then unknown (the next tier's hi + lo says it)."""
    with np.errstate(all="ignore"):
        m, _ = np.frexp(np.abs(h))  # |h| = m 2**e, 0.5 <= m < 1
        rel = err / np.abs(h) * m  # err / 2**e
        return (h != 0) & ((m - 0.5 < rel) | (1 - m <= rel))


def _decide_by_cast(h, err, sign):
    """float32: the float64 -> float32 conversion is IEEE-correct, so round both ends of the interval and compare.

    The ends are widened by 2**-52 |h| (and 2**-50 relative) so that their own float64 rounding cannot move
    them inside the true interval; monotone rounding then makes equal ends prove the answer.
    """
    wide = np.abs(h)  # (err + |h| 2**-52) (1 + 2**-50), in place: these arrays are the largest of the audit
    wide *= 2.0**-52
    wide += err
    wide *= 1 + 2.0**-50
    low = (h - wide).astype(np.float32)
    wide += h
    high = wide.astype(np.float32)
    ok = low == high
    if np.ndim(sign) or sign == 0:  # -0.0 == 0.0: with the sign unknown, a zero must agree in sign too
        ok &= np.signbit(low) == np.signbit(high)
    return high.astype(np.float64), ok


_EXPONENT_BITS = 0x7FF0000000000000


def _decide_float64(h, mag, lo, err):
    """float64: h (rounded to nearest from h + lo) is the answer if lo +- err stays within half a spacing of h.

    Returns where it is (h itself is the rounded value); mag = |h|. Half the spacing above h is its binade's
    power of two (h's exponent bits) times 2**-53, below h that of the float before it (half as wide at a power
    of two); below 2**-969 (where it would be subnormal) nothing is decided here, and the general route takes
    those. In place where it can be: allocations cost as much as the arithmetic.
    """
    bits = mag.view(np.int64)
    power = bits & _EXPONENT_BITS
    half_above = power.view(np.float64) * 2.0**-53
    np.subtract(bits, 1, out=power)
    power &= _EXPONENT_BITS
    half_below = power.view(np.float64)
    half_below *= 2.0**-53
    lo_mag = 0.0 if lo is None else lo if mag is h else np.where(h < 0, -lo, lo)
    bound = lo_mag + err
    ok = bound < half_above
    np.subtract(err, lo_mag, out=bound)
    ok &= bound < half_below
    ok &= mag >= 2.0**-969
    ok &= mag < 2.0**1023
    return ok


def _decide_general(h, lo, err, fmt: Format):
    """Any format: the value in units of fmt's spacing at its binade, then round to an integer."""
    p = fmt.precision
    mag = np.abs(h)
    # The binade from the exponent bits; a subnormal h reads as -1023, which max() lifts to emin as it should.
    binade = ((h.view(np.int64) >> 52) & 0x7FF) - 1023
    qe = np.maximum(binade, fmt.emin) - (p - 1)
    # 2**-qe as exact power-of-two factors (two where it exceeds 2**1023, for float64-wide formats).
    factors = pow2_pair(-qe) if fmt.min_subnormal_exp < -1022 else (((1023 - qe) << 52).view(np.float64),)

    def units(a):
        for f in factors:
            a = a * f
        return a

    y = units(mag)  # below 2**p
    y_err = units(err)
    n = np.rint(y)
    d = y - n  # exact
    if lo is None:
        one_sign = err < mag
    else:
        d = d + units(np.where(h < 0, -lo, lo))
        one_sign = err < mag - np.abs(lo)
    # At the bottom of a normal binade the spacing below is half as wide: the boundary there is a quarter away.
    below = np.where((n == 2.0 ** (p - 1)) & (binade > fmt.emin), 0.25, 0.5)
    ok = one_sign & (y_err - d < below) & (d + y_err < 0.5)
    rounded = n
    for f in factors:
        rounded = rounded / f
    if mag.max(initial=0.0) >= fmt.max_float / 2:  # only then can a result overflow
        rounded = np.where(rounded > fmt.max_float, np.inf, rounded)
    return np.copysign(rounded, h), ok


def round_array(values, fmt: Format) -> np.ndarray:
    """float64 values rounded to nearest-even in fmt (NaN and infinities kept, overflow as IEEE), in fmt's dtype."""
    v = np.asarray(values, dtype=np.float64)
    if fmt.precision >= 53 or fmt.dtype == np.float32:  # exact, or the IEEE-correct float64 -> float32 cast
        return cast_exact(v, fmt)
    finite = np.isfinite(v)
    with np.errstate(all="ignore"):
        if fmt.min_subnormal_exp < -1022:  # (no such format below 53 bits; kept general all the same)
            rounded, _ = _decide_general(np.where(finite, v, 0.0), None, np.zeros(v.shape), fmt)
        else:
            rounded = _round_narrow(np.where(finite, v, 0.0), fmt)
    return cast_exact(np.where(finite, rounded, v), fmt)


def _round_narrow(v: np.ndarray, fmt: Format) -> np.ndarray:
    """Finite float64 values rounded to nearest-even on fmt's grid, as float64 (overflow: inf), for a format whose
    spacings are all normal float64 powers of two (fmt.min_subnormal_exp >= -1022): v over its spacing 2**qe (an
    exact scaling), rint (ties to even), scaled back; _decide_general's rounding without its decision, so
    faster (reading the main job's kept cases makes their inputs again, and rounds them)."""
    binade = ((v.view(np.int64) >> 52) & 0x7FF) - 1023  # (a float64 subnormal reads -1023: max() lifts it)
    qe = np.maximum(binade, fmt.emin) - (fmt.precision - 1)
    rounded = np.rint(v * ((1023 - qe) << 52).view(np.float64))
    rounded *= ((1023 + qe) << 52).view(np.float64)
    if np.abs(v).max(initial=0.0) >= fmt.max_float / 2:  # only then can a value overflow
        rounded = np.where(np.abs(rounded) > fmt.max_float, np.copysign(np.inf, v), rounded)
    return rounded
