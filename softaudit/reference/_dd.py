"""Vectorised double-double arithmetic: a value is a pair of float64 arrays (hi, lo) with hi = fl(hi + lo).

Only IEEE add, subtract, multiply, divide and rint are used (no libm), so every bound below follows from the
standard model fl(a op b) = (a op b)(1 + d), |d| <= u = 2**-53. The bounds are derived in docs/reference.md.

(Longer than the house's 400 lines: double-double arithmetic is one set of primitives whose error bounds build on one
another in the order docs/reference.md derives them.)
"""

from __future__ import annotations

import math

import numpy as np
from mpmath import libmp

U = 2.0**-53
#: Relative error bound of exp_dd, derived in docs/reference.md (the derivation gives 2**-90.8).
EXP_DD_REL = 2.0**-88
#: Relative error bound of log1p_dd (docs/reference.md): the Newton branch has absolute error about
#: EXP_DD_REL, and its results are above 2**-20.01, which gives 2**-67.8.
LOG1P_DD_REL = 2.0**-66
#: Relative error bound of one accurate double-double add, multiply or divide (Joldes, Muller, Popescu 2017
#: give 3u**2, 5u**2 and 15u**2 + 56u**3; this is the largest, rounded up).
DD_OP_REL = 2.0**-100
TINY = 2.0**-1074
_SPLITTER = 134217729.0  # 2**27 + 1


def gamma(n) -> np.ndarray | float:
    """Higham's gamma_n = n u / (1 - n u): the bound of n successive roundings."""
    return n * U / (1 - n * U)


_RADIX = 8  # terms summed per level by pairwise_sum in float64


def depth(n: int, radix: int = _RADIX) -> int:
    """The most additions one term goes through in pairwise_sum of n terms (radix 2 for double-doubles)."""
    total = 0
    while n > 1:
        group = min(radix, n)
        total += group - 1
        n = n // group + n % group
    return total


def pow2_pair(k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two float64 arrays whose product is 2**k, each a normal power of two, for int64 |k| <= 2044.

    Built from exponent bits: numpy's ldexp is an order of magnitude slower than a multiply.
    """
    half = k >> 1
    return ((half + 1023) << 52).view(np.float64), ((k - half + 1023) << 52).view(np.float64)


# On arrays the error-free transformations below reuse their temporaries (the same operations in the same order,
# so the same bits): an allocation costs as much as the arithmetic on arrays of a fast tier's block.


def _array(a) -> bool:
    return isinstance(a, np.ndarray) and a.ndim > 0


def two_sum(a, b):
    s = a + b
    bb = s - a
    if not _array(s):
        return s, (a - (s - bb)) + (b - bb)
    e = s - bb
    np.subtract(a, e, out=e)
    np.subtract(b, bb, out=bb)
    e += bb
    return s, e


def fast_two_sum(a, b):
    """Exact a + b as (s, e) when |a| >= |b| or a == 0."""
    s = a + b
    if not _array(s):
        return s, b - (s - a)
    e = s - a
    np.subtract(b, e, out=e)
    return s, e


def _split(a):
    c = _SPLITTER * a
    if not _array(c):
        hi = c - (c - a)
        return hi, a - hi
    lo = c - a
    c -= lo
    np.subtract(a, c, out=lo)
    return c, lo


def two_square(a):
    """Exact a * a as (p, e)."""
    p = a * a
    ah, al = _split(a)
    return p, ((ah * ah - p) + 2 * (ah * al)) + al * al


def two_prod(a, b):
    """Exact a * b as (p, e) (Dekker), when no product or partial product over- or underflows."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    if not _array(p):
        return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl
    e = ah * bh
    e -= p
    t = ah * bl
    e += t
    np.multiply(al, bh, out=t)
    e += t
    np.multiply(al, bl, out=t)
    e += t
    return p, e


def add(ah, al, bh, bl):
    s, e = two_sum(ah, bh)
    t, f = two_sum(al, bl)
    s, e = fast_two_sum(s, e + t)
    return fast_two_sum(s, e + f)


def add_same_sign(ah, al, bh, bl):
    """a + b for operands of one sign: relative error at most 3u**2 (the "sloppy" algorithm; Joldes, Muller &
    Popescu 2017; Yang et al. 2024 prove it exceeds 3u**2 only for operands meeting Sterbenz's condition)."""
    s, e = two_sum(ah, bh)
    return fast_two_sum(s, e + (al + bl))


def add_d(ah, al, b):
    s, e = two_sum(ah, b)
    return fast_two_sum(s, e + al)


def mul(ah, al, bh, bl):
    p, e = two_prod(ah, bh)
    if not _array(e):
        return fast_two_sum(p, e + (ah * bl + al * bh))
    cross = ah * bl
    cross += al * bh
    if cross.shape != e.shape:
        return fast_two_sum(p, e + cross)
    e += cross
    return fast_two_sum(p, e)


#: Relative error bound of mul_short (docs/reference.md derives 2**-76.4).
MUL_SHORT_REL = 2.0**-75


def short_factor(bh, bl):
    """A double-double b as b26 + delta, the form mul_short takes: b26 = bh's leading 26 bits (Dekker's split),
    delta = fl((bh - b26) + bl), |delta| <= 2**-26 |b|, within 2**-79 |b|."""
    b26, rest = _split(bh)
    return b26, rest + bl


def mul_short(ah, al, b26, delta, out=None):
    """(ah + al) (b26 + delta) as a double-double, within MUL_SHORT_REL relative (plus 3 * 2**-1074 where
    products underflow): a 26-bit b26 makes both halves of Dekker's split of ah exact products with it, so
    only ah delta (below 2**-26 of the product) is rounded. About 12 operations per element against mul's 20;
    `out` (two arrays) takes the result."""
    a1, a2 = _split(ah)
    a1 *= b26  # exact
    a2 *= b26  # exact
    small = ah * delta
    small += al * b26
    a2 += small
    hi, lo = (np.empty_like(a1), np.empty_like(a1)) if out is None else out
    np.add(a1, a2, out=hi)  # fast_two_sum(a1, a2)
    np.subtract(hi, a1, out=a1)
    np.subtract(a2, a1, out=lo)
    return hi, lo


def mul_d(ah, al, b):
    p, e = two_prod(ah, b)
    return fast_two_sum(p, e + al * b)


def div(ah, al, bh, bl):
    q1 = ah / bh
    ph, pl = mul_d(bh, bl, q1)
    rh, _ = add(ah, al, -ph, -pl)
    return fast_two_sum(q1, rh / bh)


def pairwise_sum(h, lo=None, *, one_sign=False):
    """Sum along the last axis in levels; each term goes through at most depth(n) additions (radix 2 with lo).

    A float64 sum (lo None) adds groups of 8 per level with numpy's sum over a short axis: whatever order numpy
    uses, 8 terms take at most 7 additions, so the error is at most gamma(depth(n)) * sum(|terms|). A
    double-double sum halves per level; its error is at most depth(n, 2) * DD_OP_REL * sum(|terms|).
    With one_sign (every term of one sign) the double-double sum uses the cheaper add_same_sign. Always returns
    new arrays, never views of the terms.
    """
    while h.shape[-1] > 1:
        n = h.shape[-1]
        if lo is None:
            group = min(_RADIX, n)
            m = n // group
            s = h[..., : m * group].reshape(h.shape[:-1] + (group, m)).sum(axis=-2)
        else:
            m = n // 2
            plus = add_same_sign if one_sign else add
            s, sl = plus(h[..., :m], lo[..., :m], h[..., m : 2 * m], lo[..., m : 2 * m])
            lo = np.concatenate([sl, lo[..., 2 * m :]], axis=-1) if n % 2 else sl
            group = 2
        h = np.concatenate([s, h[..., m * group :]], axis=-1) if n % group else s
    if h.shape[-1] == 0:
        h = np.zeros(h.shape[:-1] + (1,))
        lo = None if lo is None else np.zeros_like(h)
    return h[..., 0].copy(), None if lo is None else lo[..., 0].copy()


def extract_sum(h, lo):
    """Sums along the last axis of double-doubles h + lo with 0 <= h <= 1 and |lo| <= 2**-53 h + 2**-1074:
    (hi, lo, err) per row, hi + lo within err of the exact sum (about 2**-94 of it for rows of 4096).

    Error-free extraction (Rump, Ogita & Oishi, *Accurate floating-point summation*, SIAM J. Sci. Comput.
    31(1), 2008): with 2**e1 >= n, fl(fl(h + 1.5 2**e1) - 1.5 2**e1) rounds each h to the grid 2**(e1 - 52)
    exactly; every partial sum of n such values is a multiple of that grid below 2**(e1 + 1), so numpy sums them
    exactly in whatever order it adds. The remainders (|r| <= 2**(e1 - 53), exact) are split once more on the
    grid 2**(e2 - 52), e2 = 2 e1 - 52, likewise exact; what is left (|r| <= 2**(e2 - 53)) and the low parts are
    summed plainly, within gamma_(n-1) of their sums of magnitudes whatever the order. Four sums of n terms,
    against about eleven operations per term for a double-double sum.
    """
    n = h.shape[-1]
    e1 = max(1, (n - 1).bit_length())
    e2 = 2 * e1 - 52
    sigma1, sigma2 = 1.5 * 2.0**e1, 1.5 * 2.0**e2
    q = h + sigma1
    q -= sigma1
    r = h - q
    s1 = q.sum(axis=-1)
    np.add(r, sigma2, out=q)
    q -= sigma2
    r -= q
    s2 = q.sum(axis=-1)
    s3 = r.sum(axis=-1)
    s4 = lo.sum(axis=-1)
    hi, e = two_sum(s1, s2)
    hi, low = two_sum(hi, e + (s3 + s4))
    left = n * 2.0 ** (e2 - 53)  # bounds the sum of |r| left after the second split
    magnitude = left + 2.0**-53 * (s1 + np.abs(s2) + left) + n * TINY  # ... plus the sum of |lo|
    return hi, low, (gamma(max(n - 1, 1)) + 3 * U) * magnitude + 2 * U * U * np.abs(hi)


def scale_dd(scale, d) -> tuple[float, float, float]:
    """Attention's score scale as a double-double and its relative error: `scale`, or the real 1/sqrt(d)."""
    if scale is not None:
        return scale, 0.0, 0.0
    exact = libmp.mpf_div(libmp.fone, libmp.mpf_sqrt(libmp.from_int(d), 200), 200)
    hi = libmp.to_float(exact)
    return hi, libmp.to_float(libmp.mpf_sub(exact, libmp.from_float(hi), 120)), 2.0**-104


def _constant(value: tuple) -> tuple[float, float]:
    """A libmp value as an unevaluated sum of two doubles, correct to about 2**-107 relative."""
    hi = libmp.to_float(value)
    lo = libmp.to_float(libmp.mpf_sub(value, libmp.from_float(hi), 120))
    return hi, lo


_LN2 = libmp.mpf_ln2(200)


def _leading(value: tuple, bits: int) -> float:
    """The leading `bits` bits of a libmp value, as a float (so an integer below 2**12 times it is exact)."""
    exp = value[2] + value[3] - bits
    return libmp.to_float(libmp.from_man_exp(libmp.to_int(libmp.mpf_shift(value, -exp)), exp))


# ln2 in three parts: k * _LN2_1 and k * _LN2_2 are exact for |k| < 2**12, the rest is below 2**-80.
_LN2_1 = _leading(_LN2, 40)
_LN2_2 = _leading(libmp.mpf_sub(_LN2, libmp.from_float(_LN2_1), 200), 40)
_LN2_3 = libmp.to_float(
    libmp.mpf_sub(libmp.mpf_sub(_LN2, libmp.from_float(_LN2_1), 200), libmp.from_float(_LN2_2), 200)
)
_INV_LN2 = 1.0 / math.log(2.0)
_STEPS = 4096
_REACH = 1421  # |r| <= ln2/2 + 2**-40 gives |j| <= 1420
_TABLE: tuple[np.ndarray, np.ndarray] | None = None
#: Arguments below this give exp() < 2**-2885, far under any subnormal, and are clamped so k stays an int.
EXP_ARG_MIN = -2000.0


def _table() -> tuple[np.ndarray, np.ndarray]:
    """e**(j/4096) for |j| <= 1421 as double-doubles, computed once with mpmath at 200 bits, on first use."""
    global _TABLE
    if _TABLE is None:
        pairs = [_constant(libmp.mpf_exp(libmp.from_rational(j, _STEPS, 220), 200)) for j in range(-_REACH, _REACH + 1)]
        _TABLE = (np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]))
    return _TABLE


def exp_dd(th, tl):
    """e**(th + tl) as a double-double, relative error at most EXP_DD_REL for th in [EXP_ARG_MIN, 709].

    t = k ln2 + j/4096 + r with |r| <= 2**-13, e**t = 2**k e**(j/4096) e**r, and
    e**r = 1 + r + r**2/2 + (r**3/6 + ... + r**6/720) with the part from r**3 on (below 2**-41.6) in double.
    Below 2**-969 the low part is subnormal: the absolute error may then be 2 * 2**-1074 more.
    """
    clamped = ~(th >= EXP_ARG_MIN)  # NaN too: its result is meaningless, but the table index stays in range
    th = np.where(clamped, EXP_ARG_MIN, th)
    tl = np.where(clamped, 0.0, tl)
    k = np.rint(th * _INV_LN2)
    # t - k ln2: th - k * _LN2_1 is exact (Sterbenz), k * _LN2_2 is exact, k * _LN2_3 is off by 2**-121.
    rh, rl = two_sum(th - k * _LN2_1, -(k * _LN2_2))
    eh, el = _exp_reduced(rh, rl + (tl - k * _LN2_3))
    return times_pow2(k.astype(np.int64), eh, el)


def times_pow2(k, *arrays) -> tuple[np.ndarray, ...]:
    """Each array times 2**k (int64, at most 2044), by two normal powers of two (k may be below -1022): exact
    unless the result is subnormal, where it is rounded once; k below -2044 acts as -2044 (0 below 2**1000)."""
    scale1, scale2 = pow2_pair(np.maximum(k, -2044))
    with np.errstate(under="ignore"):
        return tuple(a * scale1 * scale2 for a in arrays)


def _parts(value: tuple, bits, count: int) -> list[float]:
    """value as count floats: the first count - 1 of `bits` bits each (or of bits[i] bits), then the rest
    rounded."""
    out = []
    for i in range(count - 1):
        out.append(_leading(value, bits if isinstance(bits, int) else bits[i]))
        value = libmp.mpf_sub(value, libmp.from_float(out[-1]), 200)
    return out + [libmp.to_float(value)]


# ln2 in five parts for exp_dd_wide: k times each of the first four (30 bits) is exact for |k| < 2**23, and the
# fifth is below 2**-120, so k times it is off by less than 2**-150.
_LN2_WIDE = _parts(_LN2, 30, 5)
WIDE_ARG_MIN = -(2.0**22)


def exp_dd_wide(th, tl):
    """e**(th + tl) = (eh + el) 2**k for th in [WIDE_ARG_MIN, 709]: the mantissa eh + el (in [2**-0.51, 2**0.51])
    within EXP_DD_REL relative and the integer exponent k (int64) apart, so that results far below float64's range
    keep their digits (attention's gradient on scores spread over thousands).

    As exp_dd, with t - k ln2 reduced against five parts of ln2 (the first two exact, the other three and tl added
    as double-doubles: about 2**-99 absolute in r, on top of exp_dd's 2**-90.8)."""
    p1, p2, p3, p4, p5 = _LN2_WIDE
    k = np.rint(th * _INV_LN2)
    rh, rl = two_sum(th - k * p1, -(k * p2))  # exact: Sterbenz, and a product of at most 53 bits
    rh, rl = add_d(rh, rl, -(k * p3))
    rh, rl = add_d(rh, rl, -(k * p4))
    rh, rl = add_d(rh, rl, tl)  # tl may be 2**-31 here (th up to 2**22): too large to add in double
    eh, el = _exp_reduced(rh, rl - k * p5)
    return eh, el, k.astype(np.int64)


def _exp_reduced(rh, rest):
    """e**(rh + rest) for |rh| <= ln2/2 + 2**-30, as exp_dd computes it: e**(j/4096) from the table times the
    polynomial in r = rh - j/4096 + rest."""
    j = np.rint(rh * _STEPS)
    rh, rl = fast_two_sum(rh - j / _STEPS, rest)  # rh - j/4096 is exact (Sterbenz)
    square, square_err = two_square(rh)
    square_err = square_err + 2 * rh * rl  # r**2 = square + square_err within 2**-131
    tail = square * rh * (1 / 6 + rh * (1 / 24 + rh * (1 / 120 + rh / 720)))
    ph, pl = two_sum(1.0, rh)
    ph, e = two_sum(ph, 0.5 * square)
    ph, pl = fast_two_sum(ph, (pl + e) + ((0.5 * square_err + rl) + tail))
    table_h, table_l = _table()
    index = j.astype(np.int64) + _REACH
    return mul(table_h[index], table_l[index], ph, pl)


#: Relative error bound of exp_fast (docs/reference.md derives 2**-76.6; measured 2**-78).
EXP_FAST_REL = 2.0**-75
#: exp_fast clamps arguments below this (e**-1000 < 2**-1442 is 0 after scaling, as it should be) so that n
#: below stays within 2**23.
FAST_ARG_MIN = -1000.0
_FAST_STEPS = 4096  # 2**(j/4096) per table entry: |r| <= ln2/8192 < 2**-13.5
_FAST_K = _FAST_STEPS / math.log(2.0)
# ln2/4096 in three parts: 30 bits (a multiple of 2**-42), 20 bits (a multiple of 2**-62) and the rest (below
# 2**-62): n times each of the first two is exact for |n| < 2**23, and so is th - n * _STEP_1 - n * _STEP_2.
_STEP_1, _STEP_2, _STEP_3 = _parts(libmp.mpf_div(_LN2, libmp.from_int(_FAST_STEPS), 200), (30, 20), 3)
_SIGMA = 1.5 * 2.0**13  # fl(fl(r + _SIGMA) - _SIGMA) rounds |r| < 2**-13 to a multiple of 2**-39: 26 bits
_FAST_TABLE: tuple[np.ndarray, np.ndarray] | None = None


def _fast_table() -> tuple[np.ndarray, np.ndarray]:
    """2**(j/4096) for 0 <= j < 4096 as high + low: high rounded to 27 bits (so high times a 26-bit number is
    exact), low the rest rounded to a double (|low| <= 2**-27, within 2**-81). Computed once at 200 bits."""
    global _FAST_TABLE
    if _FAST_TABLE is None:
        step = libmp.mpf_div(_LN2, libmp.from_int(_FAST_STEPS), 220)
        high, low = np.empty(_FAST_STEPS), np.empty(_FAST_STEPS)
        for j in range(_FAST_STEPS):
            value = libmp.mpf_exp(libmp.mpf_mul(step, libmp.from_int(j), 220), 200)
            high[j] = libmp.to_float(libmp.mpf_pos(value, 27, libmp.round_nearest))
            low[j] = libmp.to_float(libmp.mpf_sub(value, libmp.from_float(high[j]), 200))
        _FAST_TABLE = (high, low)
    return _FAST_TABLE


def exp_fast(th, tl):
    """e**(th + tl) as a double-double (hi = fl(hi + lo)) within EXP_FAST_REL relative for th in
    [FAST_ARG_MIN, 709] and |tl| <= 2**-53 |th|; below 2**-969 the absolute error may be 2 * 2**-1074 more.

    A third of exp_dd's operations, for a bound 2**13 times as wide (the softmax tier's first pass; what it
    cannot decide goes to exp_dd). t = n ln2/4096 + r, |r| < 2**-13.5, e**t = 2**k T_j e**r (n = 4096 k + j,
    T_j = 2**(j/4096)). r = rh + rl with rh exact and |rl| < 2**-39.6; rh = r1 + (rh - r1) with r1 on a grid of
    2**-39 (26 bits), so that with the table's 27-bit high part, high * r1 is exact; e**r - 1 - r1 = rho + r**2
    (1/2 + r/6 + r**2/24 + r**3/120), rho = r - r1, is below 2**-27.9 and is evaluated in double. Written with
    in-place operations: an allocation costs as much as the arithmetic here. docs/reference.md has the bound.
    """
    smallest = th.min(initial=0.0)
    if smallest < FAST_ARG_MIN:  # -inf too (an overflowed x - m): e**t is 0 to any precision there
        low = th < FAST_ARG_MIN
        th, tl = np.where(low, FAST_ARG_MIN, th), np.where(low, 0.0, tl)
    n = th * _FAST_K
    np.rint(n, out=n)
    index = n.astype(np.int64)
    rh = n * _STEP_1
    np.subtract(th, rh, out=rh)  # exact (Sterbenz)
    t = n * _STEP_2
    rh -= t  # exact: a multiple of 2**-66 below 2**-13
    np.multiply(n, _STEP_3, out=n)
    rl = np.subtract(tl, n, out=n)
    r1 = rh + _SIGMA
    r1 -= _SIGMA
    rho = np.subtract(rh, r1, out=t)  # exact
    rho += rl
    r = np.add(r1, rho, out=rh)
    big = np.multiply(r, 1 / 120, out=rl)
    big += 1 / 24
    big *= r
    big += 1 / 6
    big *= r
    big += 0.5
    big *= r
    big *= r
    big += rho  # e**r - 1 - r1
    k = index >> 12
    np.bitwise_and(index, _FAST_STEPS - 1, out=index)
    table_h, table_l = _fast_table()
    high, low = table_h[index], table_l[index]
    # T e**r = high + high r1 (exactly s + e) + high big + low (1 + r1 + big).
    product = np.multiply(high, r1, out=rho)  # exact
    s = high + product
    e = np.subtract(s, high, out=r)
    np.subtract(product, e, out=e)
    r1 += big
    r1 *= low
    r1 += low
    big *= high
    big += r1
    big += e
    hi = np.add(s, big, out=r1)  # fast_two_sum(s, big)
    np.subtract(hi, s, out=s)
    lo = np.subtract(big, s, out=big)
    if not smallest >= -708.0:  # n >= -708 * 4096 / ln2 gives k >= -1022: 2**k is a normal float
        return times_pow2(k, hi, lo)
    k += 1023
    k <<= 52
    scale = k.view(np.float64)
    hi *= scale
    lo *= scale  # underflows (to within 2**-1075) only for results below 2**-969
    return hi, lo


def log1p_dd(sh, sl):
    """log(1 + s) for s >= 0 as a double-double, relative error at most LOG1P_DD_REL."""
    small = sh < 2.0**-20
    # Series for small s: s * (1 - s/2 + s**2/3 - s**3/4 + s**4/5); the terms after -s/2 are below 2**-41.
    rest = sh * sh * (1 / 3 - sh * (1 / 4 - sh / 5))
    ih, il = add_d(1.0, 0.0, -0.5 * sh)
    ih, il = add_d(ih, il - 0.5 * sl, rest)
    series = mul(sh, sl, ih, il)
    # Newton step for larger s: L0 = log1p(s) in double, then L0 + log((1 + s) e**-L0), the log taken as y - y**2/2.
    l0 = np.log1p(np.where(small, 0.0, sh))
    zh, zl = mul(*add_d(sh, sl, 1.0), *exp_dd(-l0, np.zeros_like(l0)))
    yh, yl = add_d(zh, zl, -1.0)
    newton = add_d(*add_d(yh, yl, -0.5 * yh * yh), l0)
    return np.where(small, series[0], newton[0]), np.where(small, series[1], newton[1])
