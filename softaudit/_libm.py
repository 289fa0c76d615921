"""Portable exp, exp2, log and log1p: the same bits on every CPU, for the built-in candidates.

numpy's own transcendental ufuncs depend on the CPU they run on: float32 exp and log are SIMD-dispatched, exp2 and
log1p use SVML on AVX-512 (where float32 exp2 even flushes subnormal results to zero), and float16 has AVX512_SPR
paths. A built-in whose bits change with the machine cannot serve as a reference point in a baseline, so these are
computed in float64 with IEEE basic operations only (+ - * /, comparisons, rint, frexp, ldexp), which every x86-64
CPU rounds identically, and rounded once to the input's dtype: float16, bfloat16, the float8 types, float32 and
float64 alike. longdouble (wider than float64) falls back to numpy's own functions.

Algorithms: range reduction carried in two float64 words, a Taylor polynomial, and one final rounding; specials
(inf, NaN, zeros and their signs, overflow, gradual underflow) as IEEE 754 / C99 specify.

Accuracy of the float64 results, measured against mpmath at 200 bits (tests/candidates/test_portable.py asserts
0.52 ulp on random inputs over each function's whole range and on hard inputs: the overflow and underflow thresholds,
subnormal results, tiny arguments, log near 1, log1p near -1 and near 0, exp2 of integers and of large arguments):
over 4 million random inputs per function the largest errors were exp 0.5002, exp2 0.5002, log 0.5003 and log1p
0.5003 ulp (an ulp of a subnormal result is 2**-1074). So a float64 result is the correctly rounded one except where
the exact value lies within about 0.0003 ulp of a rounding boundary, and a narrower dtype's result is float64's rounded
once more. Float32 exp, which needs less of float64 before its own rounding, takes a shorter table-driven route
(`_exp_float32_block`), and its results are the correctly rounded ones all the same (tested against mpmath, and on a
million inputs against the 0.5003-ulp route rounded); what each route costs against numpy's own functions is
benchmarks/bench_portable.py's (docs/benchmarks.md). A 16- or 8-bit dtype
(float16, bfloat16, the float8 types) is looked up in a table of its every value, computed once by the same code:
the same bits, at the cost of an index.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

# ln 2 in two parts: _LN2_HI has 32 significant bits, so k * _LN2_HI is exact for |k| < 2**21.
_LN2_HI = float.fromhex("0x1.62e42fee00000p-1")
_LN2_LO = float.fromhex("0x1.a39ef35793c76p-33")
# ln 2 rounded to float64 and the rest, for exp2's exact product f * ln 2.
_LN2 = float.fromhex("0x1.62e42fefa39efp-1")
_LN2_TAIL = float.fromhex("0x1.abc9e3b39803fp-56")
_INV_LN2 = float.fromhex("0x1.71547652b82fep+0")
_SQRT_HALF = float.fromhex("0x1.6a09e667f3bcdp-1")
_VELTKAMP = 2.0**27 + 1  # splits a float64 into two halves of 26 bits whose products are exact

# (exp(r) - 1 - r - r**2 / 2) / r**3 = sum r**j / (j + 3)!, j = 0..11: the first term left out, r**15 / 15!, is
# below 1e-19 for |r| <= ln(2) / 2.
_EXP_TAYLOR = tuple(float(Fraction(1, math.factorial(j + 3))) for j in range(12))
# (2 atanh(s) - 2 s) / s**3 = sum 2 s**(2j) / (2j + 3), j = 0..9: the first term left out is below 1e-18 relative to
# log(m) for |s| <= 3 - 2 sqrt(2), the range of s = (m - 1) / (m + 1) for m in [sqrt(1/2), sqrt(2)].
_LOG_TAYLOR = tuple(float(Fraction(2, 2 * j + 3)) for j in range(10))

_BLOCK = 16384  # elements per block: the temporaries of a block stay in the CPU's cache


def exp(x) -> np.ndarray:
    """e**x, the same bits on every CPU: computed in float64 within 0.5003 ulp (within 1.6 ulp for float32 x, whose
    result is then as good and faster: `_exp_float32_block`), rounded once to x's dtype."""
    return _elementwise(x, _exp_block, np.exp, float32=_exp_float32_block)


def exp2(x) -> np.ndarray:
    """2**x, the same bits on every CPU: computed in float64 within 0.5003 ulp (exact at integers), rounded once to
    x's dtype."""
    return _elementwise(x, _exp2_block, np.exp2)


def log(x) -> np.ndarray:
    """The natural logarithm, the same bits on every CPU: computed in float64 within 0.5003 ulp, rounded once to x's
    dtype."""
    return _elementwise(x, _log_block, np.log)


def log1p(x) -> np.ndarray:
    """log(1 + x) accurate for tiny x, the same bits on every CPU: computed in float64 within 0.5003 ulp, rounded once
    to x's dtype."""
    return _elementwise(x, _log1p_block, np.log1p)


def _elementwise(x, block_fn, numpy_fn, float32=None) -> np.ndarray:
    """Apply a float64 block function over x in cache-sized blocks and round once to x's dtype (float32 x: with the
    `float32` block function where there is one).

    longdouble wider than float64 goes to numpy's own function (its extra bits would be lost otherwise); integer
    and boolean inputs give float64, as numpy's ufuncs do.
    """
    x = np.asarray(x)
    if x.dtype.kind == "c":
        raise TypeError(f"complex input ({x.dtype}) is not supported")
    if x.dtype.kind == "f" and x.dtype.itemsize > 8:
        return numpy_fn(x)
    dtype = x.dtype if x.dtype.kind in "fV" else np.dtype(np.float64)  # "V": ml_dtypes' bfloat16 and float8 types
    if dtype.itemsize <= 2 and x.dtype == dtype:
        bits = np.ascontiguousarray(x).view(f"u{dtype.itemsize}").reshape(x.shape)  # (0-d stays 0-d)
        return np.asarray(_table(block_fn, dtype)[bits])  # (a 0-d index gives a scalar)
    if dtype == np.float32 and float32 is not None:
        block_fn = float32
    return _computed(x, block_fn, dtype)


def _computed(x: np.ndarray, block_fn, dtype) -> np.ndarray:
    """block_fn over x in float64, in cache-sized blocks, rounded once to dtype."""
    with np.errstate(all="ignore"):
        flat = np.ascontiguousarray(x, dtype=np.float64).reshape(-1)
        out = np.empty_like(flat)
        for start in range(0, flat.size, _BLOCK):
            out[start : start + _BLOCK] = block_fn(flat[start : start + _BLOCK])
        return out.reshape(x.shape).astype(dtype, copy=False)


@functools.cache
def _table(block_fn, dtype: np.dtype) -> np.ndarray:
    """block_fn's result in dtype for every value of a 16- or 8-bit dtype, indexed by its bits: the same bits as
    computing them (each element is computed alone), at the cost of one lookup (computing the 16-bit exp of the main
    job element by element was a visible part of its time)."""
    every = np.arange(2 ** (8 * dtype.itemsize), dtype=f"u{dtype.itemsize}").view(dtype)
    table = _computed(every, block_fn, dtype)
    table.flags.writeable = False
    return table


def _horner(z: np.ndarray, coefficients) -> np.ndarray:
    """c0 + z (c1 + z (c2 + ...)), each operation rounded to float64."""
    p = np.full_like(z, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        p *= z
        p += c
    return p


def _exp_block(x: np.ndarray) -> np.ndarray:
    """exp of a float64 block: x = k ln2 + r with |r| <= ln2 / 2 carried in two words, e**r, scaled by 2**k."""
    nan = np.isnan(x)
    # Past +-800 the result is inf or 0 anyway; clipping keeps k a small integer (and turns +-inf into +-800).
    xc = np.clip(np.where(nan, 0.0, x), -800.0, 800.0)
    k = np.rint(xc * _INV_LN2)
    hi = xc - k * _LN2_HI  # exact: k * _LN2_HI is exact and within a factor 2 of xc (Sterbenz)
    lo = k * -_LN2_LO
    y = _scale(*_exp_reduced(hi, lo), k)
    y[nan] = np.nan
    return y


# ln2 / 64 in two parts: _LN2_64_HI has 36 significant bits, so k * _LN2_64_HI is exact for |k| < 2**17.
_LN2_64_HI = float.fromhex("0x1.62e42fefa0000p-7")
_LN2_64_LO = float.fromhex("0x1.cf79abc9e3b3ap-46")  # ln2 / 64 - _LN2_64_HI, rounded
_64_INV_LN2 = 64 / math.log(2)  # (any float near it: k need only be the nearest integer, or next to it)


@functools.cache
def _two_to_j64() -> np.ndarray:
    """2**(j / 64) for j = 0..63, each within 0.5003 ulp (`_exp2_block`, exact at j = 0)."""
    table = _exp2_block(np.arange(64) / 64)
    table.flags.writeable = False
    return table


def _exp_float32_block(x: np.ndarray) -> np.ndarray:
    """exp of a float64 block of float32 values, within 1.6 ulp of float64, for rounding to float32 (whose spacing
    is 2**29 float64 ulps: a float32 result then differs from the correctly rounded one only where e**x lies within
    about 2**-28 of a float32 spacing of a rounding boundary, as the 0.5003-ulp result's does within 2**-30).

    x = (64 m + j) ln2 / 64 + r with |r| <= ln2 / 128: e**x = 2**m 2**(j / 64) e**r, e**r - 1 by its Taylor
    polynomial to r**5 (the first term left out, r**6 / 6!, is below 2**-54), one table entry (0.5003 ulp), and
    the sum 2**(j / 64) (1 + p) rounded once (0.5 ulp; the product's rounding is below 0.006 ulp). Past |x| = 200
    the float32 result is 0 or inf, as it is at 200; r is exact but for k * _LN2_64_LO's rounding (2**-61 or less).
    """
    nan = np.isnan(x)
    xc = np.clip(np.where(nan, 0.0, x), -200.0, 200.0)
    k = np.rint(xc * _64_INV_LN2)
    r = xc - k * _LN2_64_HI  # exact: on 2**-42's grid (x's, where k != 0, is coarser) and below 2**-7
    r -= k * _LN2_64_LO
    m = np.floor(k * (1 / 64))
    t = _two_to_j64()[(k - 64 * m).astype(np.intp)]
    p = _horner(r, _EXP_FLOAT32)
    p *= r
    y = np.ldexp(t + t * p, m.astype(np.int32))  # a normal float64 (e**-200 is about 1e-87): ldexp is exact
    y[nan] = np.nan
    return y


# e**r - 1 = r (1 + r / 2 + r**2 / 3! + r**3 / 4! + r**4 / 5!), for |r| <= ln2 / 128.
_EXP_FLOAT32 = tuple(float(Fraction(1, math.factorial(j + 1))) for j in range(5))


def _exp2_block(t: np.ndarray) -> np.ndarray:
    """exp2 of a float64 block: t = k + f with k = rint(t) and f exact, 2**f = e**(f ln2) with f ln2 in two words."""
    nan = np.isnan(t)
    tc = np.clip(np.where(nan, 0.0, t), -1200.0, 1200.0)
    k = np.rint(tc)
    f = tc - k  # exact, |f| <= 1/2
    hi, lo = _two_product(f, _LN2)
    lo += f * _LN2_TAIL
    y = _scale(*_exp_reduced(hi, lo), k)
    y[nan] = np.nan
    return y


def _split(a):
    """a = hi + lo exactly with hi and lo of 26 bits each (Veltkamp), so products of halves are exact."""
    c = a * _VELTKAMP
    hi = c - (c - a)
    return hi, a - hi


def _two_product(a, b) -> tuple[np.ndarray, np.ndarray]:
    """a * b = p + e exactly (Dekker's product; no fused multiply-add needed)."""
    p = a * b
    a_hi, a_lo = _split(a)
    b_hi, b_lo = _split(b)
    e = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    return p, e


def _two_square(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """a * a = p + e exactly (Dekker's product of a with itself)."""
    p = a * a
    a_hi, a_lo = _split(a)
    e = ((a_hi * a_hi - p) + 2.0 * (a_hi * a_lo)) + a_lo * a_lo
    return p, e


def _exp_reduced(hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """e**(hi + lo) for |hi + lo| <= about ln2 / 2, as an unevaluated sum s + t with |t| <= 2**-52 |s|.

    e**r = 1 + r + r**2 / 2 + r**3 (1/3! + r/4! + ...): the first three terms are added exactly in two words, so the
    rounding of s + t by the caller is almost the whole error; the cubic rest is below 0.007 and its own rounding
    errors stay near 2**-60.
    """
    r = hi + lo
    rr = (hi - r) + lo  # what r lost of hi + lo
    s = 1.0 + hi
    t = (1.0 - s) + hi  # exact (Fast2Sum, |hi| < 1): 1 + hi = s + t
    sq, sq_lo = _two_square(r)
    half = 0.5 * sq
    big = s + half
    t += (s - big) + half  # exact (Fast2Sum, s > 0.7 > half): s + half = big + ...
    rest = _horner(r, _EXP_TAYLOR)
    rest *= (sq + sq_lo) * r  # r**3 / 3! + r**4 / 4! + ...
    # e**(r + rr) = e**r + rr (1 + r + r**2 / 2 + ...): past the 1 (in lo), rr's terms touch only t's last bits.
    t += lo + rr * (r + half) + 0.5 * sq_lo + rest
    return big, t


def _scale(s: np.ndarray, t: np.ndarray, k: np.ndarray) -> np.ndarray:
    """2**k (s + t) with one rounding, gradual underflow included; s + t in about [0.7, 1.42]."""
    k = k.astype(np.int32)
    y = np.ldexp(s + t, k)  # exact scaling unless the result overflows (to inf, as it should) or is subnormal
    sub = (k < -1022) | ((k == -1022) & (s + t < 1.0))
    if sub.any():
        y[sub] = _scale_subnormal(s[sub], t[sub], k[sub])
    return y


def _scale_subnormal(s: np.ndarray, t: np.ndarray, k: np.ndarray) -> np.ndarray:
    """2**k (s + t) for a result below 2**-1022, rounded once to the subnormal grid (2**-1074).

    ldexp(s + t, k) would round twice (to 53 bits, then to the grid). Measured in units of 2**-1022 the result z is
    below 1, and 1 + z rounds exactly to the grid's resolution (2**-52), so one rounding of 1 + z does it.
    """
    z = np.ldexp(s, k + 1022)  # exact: still a normal float64
    zt = np.ldexp(t, k + 1022)
    w = 1.0 + z
    e = (1.0 - w) + z  # exact: 1 + z = w + e
    w = w + (e + zt)
    return np.ldexp(w - 1.0, -1022)  # w - 1 is exact (Sterbenz) and a multiple of 2**-52


def _reduce(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """u = m 2**e with m in [sqrt(1/2), sqrt(2)) and e integral (as float64), for finite u > 0, subnormal included."""
    m, e = np.frexp(u)
    low = m < _SQRT_HALF
    return np.where(low, m + m, m), (e - low).astype(np.float64)


def _log_parts(f: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log(1 + f) + e ln2 for f in about [sqrt(1/2) - 1, sqrt(2) - 1], as an unevaluated sum h + t with
    |t| < 2**-52 |h|, to be rounded once by the caller.

    s = f / (2 + f) in two words (|s| < 0.172), log(1 + f) = 2 s + 2 s**3 / 3 + 2 s**5 / 5 + ...: e ln2 + 2 s is
    added exactly in two words, so the rest (below 0.004 |log(1 + f)|) and the final rounding carry the error.
    """
    d = 2.0 + f
    d_lo = (2.0 - d) + f  # exact (Fast2Sum): 2 + f = d + d_lo
    s = f / d
    p, p_lo = _two_product(s, d)
    s_lo = ((f - p) - p_lo - s * d_lo) / d  # f - p is exact: s + s_lo = f / (2 + f) to about 2**-105 relative
    z = s * s
    rest = _horner(z, _LOG_TAYLOR)
    rest *= z * s  # 2 s**3 / 3 + 2 s**5 / 5 + ...
    a = e * _LN2_HI  # exact
    two_s = s + s
    h = a + two_s
    t = (a - h) + two_s  # exact (Fast2Sum): |a| >= ln2 > |2 s| unless e == 0, where a == 0 and h == 2 s
    # 2 atanh(s + s_lo) = 2 s + rest + 2 s_lo (1 + s**2 + ...): s_lo's second term is 3 ulps of the rest
    t += e * _LN2_LO + (2.0 * s_lo * (1.0 + z) + rest)
    return h, t


def _log_block(x: np.ndarray) -> np.ndarray:
    """log of a float64 block: log(m) + e ln2 with f = m - 1 exact; 0 -> -inf, below 0 and NaN -> NaN, inf -> inf."""
    usual = (x > 0) & (x < np.inf)
    m, e = _reduce(np.where(usual, x, 1.0))
    h, t = _log_parts(m - 1.0, e)  # m - 1 is exact (Sterbenz)
    y = h + t
    if not usual.all():
        y[~usual] = _log_special(x[~usual])
    return y


def _log_special(x: np.ndarray) -> np.ndarray:
    """log where it is not a finite number: -inf at +-0, NaN below 0 and at NaN, inf at inf."""
    return np.select([x == 0, x == np.inf], [-np.inf, np.inf], np.nan)


def _log1p_block(x: np.ndarray) -> np.ndarray:
    """log1p of a float64 block.

    Where 1 + x lies in [sqrt(1/2), sqrt(2)) the reduced argument is x itself, exact: log1p(x) = log(1 + f), f = x.
    Elsewhere |log1p(x)| > 0.34 and u = 1 + x rounded will do: with c = 1 + x - u exactly,
    log1p(x) = log(u) + c / u, the neglected (c / u)**2 / 2 below 2**-106 of the result.
    Below |x| = 2**-54 the result is x itself, rounded (its sign kept at +-0, subnormals exact);
    -1 gives -inf, below -1 and NaN give NaN, +inf gives +inf.
    """
    u = 1.0 + x
    back = u - 1.0
    c = (1.0 - (u - back)) + (x - back)  # exact (Knuth's TwoSum): 1 + x = u + c
    usual = (u > 0) & (u < np.inf) & (np.abs(x) >= 2.0**-54)
    u = np.where(usual, u, 1.0)
    m, e = _reduce(u)
    near = e == 0
    h, t = _log_parts(np.where(near, x, m - 1.0), e)
    t += np.where(near | ~usual, 0.0, c) / u
    y = h + t
    if not usual.all():
        y[~usual] = _log1p_special(x[~usual])
    return y


def _log1p_special(x: np.ndarray) -> np.ndarray:
    """log1p where it is not a finite number, or is x itself: |x| < 2**-54 -> x, -1 -> -inf, +inf -> inf, else NaN."""
    return np.select([np.abs(x) < 2.0**-54, x == -1, x == np.inf], [x, -np.inf, np.inf], np.nan)
