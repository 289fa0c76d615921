"""The built-ins' arithmetic gives the same bits on every CPU, and the portable exp, exp2, log, log1p and matmul are
accurate: expected values come from mpmath at 200 bits or from exact rational arithmetic, never from the code under
test."""

import io
import json
import math
import os
import platform
import subprocess
import sys
import tokenize
import tracemalloc
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import mpmath
import numpy as np
import pytest

import softaudit._libm
from softaudit.candidates._ops import exp, exp2, log, log1p, matmul

#: The largest error of the float64 results in ulps, as measured (0.532 over 4 million random inputs per function)
#: and stated in softaudit/_libm.py; an ulp of a subnormal result is 2**-1074.
MAX_ULP = 0.54
FUNCTIONS = {
    "exp": (exp, mpmath.exp),
    "exp2": (exp2, lambda t: mpmath.mpf(2) ** t),
    "log": (log, mpmath.log),
    "log1p": (log1p, mpmath.log1p),
}
NARROW = [np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, np.float32]
ROOT = Path(__file__).resolve().parents[2]


def _ulp_errors(name, xs):
    """|f(x) - exact| / ulp(exact) per input, exact from mpmath at 200 bits; inf where the result should be or is
    infinite or NaN and the other is not."""
    fn, exact = FUNCTIONS[name]
    xs = np.asarray(xs, np.float64)
    ys = fn(xs)
    errors = []
    with mpmath.workprec(200):
        for x, y in zip(xs.tolist(), ys.tolist()):
            ref = exact(mpmath.mpf(x))
            errors.append(_ulp_error(y, ref))
    return np.array(errors)


def _ulp_error(y: float, ref) -> float:
    if mpmath.isnan(ref):
        return 0.0 if math.isnan(y) else math.inf
    overflow = mpmath.ldexp(2 - mpmath.ldexp(1, -53), 1023)  # the magnitude where rounding to nearest gives inf
    if mpmath.isinf(ref) or abs(ref) >= overflow:
        return 0.0 if y == ref or (math.isinf(y) and (y > 0) == (ref > 0)) else math.inf
    if not math.isfinite(y):
        return math.inf
    if ref == 0:
        return 0.0 if y == 0 else math.inf
    _, e = mpmath.frexp(ref)
    ulp = mpmath.ldexp(1, max(e - 1, -1022) - 52)
    return float(abs(mpmath.mpf(y) - ref) / ulp)


def _assert_accurate(name, xs):
    errors = _ulp_errors(name, xs)
    worst = int(np.argmax(errors))
    assert errors[worst] <= MAX_ULP, f"{name}({np.asarray(xs)[worst]!r}) is {errors[worst]:.4f} ulp off"


RNG = np.random.default_rng(20240611)
N = 1500


def test_exp_within_its_stated_ulps_over_the_whole_range_and_at_the_hard_inputs():
    hard = [
        709.782712893384,
        709.7827128933841,
        709.78,
        700.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        0.34657359027997264,
        1e-300,
        -1e-300,
        5e-324,
        -5e-324,
        1e-8,
        -708.3964185322641,
        -708.39641853226,
        -708.4,
        -720.0,
        -744.44007192138,
        -745.1332191019411,
        -745.1332191019412,
        -745.13,
        -740.5,
    ]
    _assert_accurate(
        "exp",
        np.concatenate(
            [
                RNG.uniform(-745.2, 709.8, N),
                RNG.uniform(-1, 1, N) * 10.0 ** RNG.uniform(-20, 0, N),
                RNG.uniform(-745.2, -708.3, N // 3),  # subnormal results
                hard,
            ]
        ),
    )


def test_exp2_within_its_stated_ulps_and_exact_at_integers():
    hard = [
        1023.9999999999999,
        1024.0,
        -1022.0,
        -1022.5,
        -1074.0,
        -1074.4,
        -1074.6,
        -1075.0,
        -1075.5,
        0.5,
        -0.5,
        1e-300,
        5e-324,
        1e10,
        -1e10,
        1e300,
        -1e300,
        2.0**52 + 1,
        -(2.0**52) - 1,
    ]
    _assert_accurate(
        "exp2",
        np.concatenate(
            [
                RNG.uniform(-1075, 1024, N),
                RNG.uniform(-1, 1, N),
                RNG.uniform(-1075, -1022, N // 3),  # subnormal results
                hard,
            ]
        ),
    )
    k = np.arange(-1074, 1024)
    assert np.array_equal(exp2(k.astype(np.float64)), np.ldexp(1.0, k))


def test_log_within_its_stated_ulps_over_the_whole_range_and_near_1():
    steps = np.arange(1, 33)
    near_one = np.concatenate([1 + steps * 2.0**-52, 1 - steps * 2.0**-53])
    hard = [
        5e-324,
        1e-320,
        2.2250738585072014e-308,
        2.225073858507201e-308,
        1.7976931348623157e308,
        2.0,
        0.5,
        math.sqrt(2),
        math.sqrt(0.5),
        np.nextafter(math.sqrt(0.5), 0),
        np.nextafter(math.sqrt(2), 2),
        math.e,
    ]
    _assert_accurate(
        "log",
        np.concatenate(
            [
                np.ldexp(RNG.uniform(1, 2, N), RNG.integers(-1074, 1024, N)),
                RNG.uniform(0.5, 2, N),
                near_one,
                hard,
            ]
        ),
    )


def test_log1p_within_its_stated_ulps_for_tiny_arguments_and_near_minus_1():
    tiny = [1e-300, -1e-300, 5e-324, -5e-324, 2.0**-54, -(2.0**-54), 2.0**-53, -(2.0**-53), 1e-17, 1.5e-16, -1.7e-16]
    near_minus_one = -1 + 2.0 ** -np.arange(1, 53, dtype=np.float64)
    hard = [
        math.sqrt(2) - 1,
        math.sqrt(0.5) - 1,
        0.41421356237309515,
        -0.2928932188134524,
        1.0,
        -0.5,
        1e300,
        1.7976931348623157e308,
        -0.9999999999999999,
    ]
    _assert_accurate(
        "log1p",
        np.concatenate(
            [
                RNG.uniform(-1, 1, N),
                10.0 ** RNG.uniform(-300, 300, N // 2),
                -(10.0 ** RNG.uniform(-300, 0, N // 2)),
                near_minus_one,
                tiny,
                hard,
            ]
        ),
    )


SPECIALS = [
    (exp, -np.inf, 0.0),
    (exp, np.inf, np.inf),
    (exp, np.nan, np.nan),
    (exp, 0.0, 1.0),
    (exp, -0.0, 1.0),
    (exp, 1e-300, 1.0),
    (exp, -1e-300, 1.0),
    (exp, 5e-324, 1.0),
    (exp, 710.0, np.inf),
    (exp, -746.0, 0.0),
    (exp2, -np.inf, 0.0),
    (exp2, np.inf, np.inf),
    (exp2, np.nan, np.nan),
    (exp2, 0.0, 1.0),
    (exp2, -0.0, 1.0),
    (exp2, 1024.0, np.inf),
    (exp2, -1075.0, 0.0),
    (exp2, -1074.0, 5e-324),
    (exp2, 1e300, np.inf),
    (exp2, -1e300, 0.0),
    (log, 0.0, -np.inf),
    (log, -0.0, -np.inf),
    (log, -1.0, np.nan),
    (log, -np.inf, np.nan),
    (log, np.inf, np.inf),
    (log, np.nan, np.nan),
    (log, 1.0, 0.0),
    (log, -5e-324, np.nan),
    (log1p, -1.0, -np.inf),
    (log1p, -2.0, np.nan),
    (log1p, -np.inf, np.nan),
    (log1p, np.inf, np.inf),
    (log1p, np.nan, np.nan),
    (log1p, 0.0, 0.0),
    (log1p, -0.0, -0.0),
    (log1p, 5e-324, 5e-324),
    (log1p, -5e-324, -5e-324),
    (log1p, 1e-300, 1e-300),
    (log1p, -1.0000000000000002, np.nan),
]


@pytest.mark.parametrize("fn, x, expected", SPECIALS, ids=lambda v: getattr(v, "__name__", repr(v)))
def test_specials_follow_c99_signed_zeros_included(fn, x, expected):
    with np.errstate(all="raise"):  # and no floating-point warning escapes
        got = fn(np.array([x]))[0]
    if np.isnan(expected):
        assert np.isnan(got)
    else:
        assert got == expected and np.signbit(got) == np.signbit(expected)


@pytest.mark.parametrize(
    ("name", "dtype"),
    # (float32 exp has a faster float64 route of its own: test_float32_exp_is_the_correctly_rounded_value)
    [(name, dtype) for name in FUNCTIONS for dtype in NARROW if (name, dtype) != ("exp", np.float32)],
    ids=lambda v: v if isinstance(v, str) else np.dtype(v).name,
)
def test_narrower_dtypes_get_the_float64_result_rounded_once(name, dtype):
    """16- and 8-bit dtypes: every value (they are looked up in a table of them), in a non-contiguous 2-D view."""
    fn = FUNCTIONS[name][0]
    size = np.dtype(dtype).itemsize
    if size <= 2:
        x = np.arange(2 ** (8 * size), dtype=f"u{size}").view(dtype).reshape(2, -1)[:, ::-1]
    else:
        values = np.concatenate([RNG.standard_normal(2000) * 8, RNG.uniform(-1, 1, 200), [0.0, -0.0, 1.0, -1.0, 80.0]])
        x = values.astype(dtype)
    got = fn(x)
    assert got.dtype == np.dtype(dtype) and got.shape == x.shape
    with np.errstate(over="ignore", invalid="ignore"):  # float64 results past the dtype's range: inf (or NaN)
        expected = fn(x.astype(np.float64)).astype(dtype)
    bits = f"u{np.dtype(dtype).itemsize}"
    assert np.array_equal(got.view(bits), expected.view(bits))


def test_float32_exp_is_the_correctly_rounded_value():
    """float32 exp (computed within 1.6 ulp of float64 by its own table route, then rounded once) is e**x correctly
    rounded to float32, by mpmath at 200 bits: over the whole range, for small and tiny x, for subnormal and zero
    results, next to the overflow and underflow thresholds, at the specials; in a non-contiguous 2-D view."""
    f32 = np.float32
    over = np.nextafter(f32(88.72284), f32(0))  # the largest x whose e**x rounds below float32's largest value
    tiny = [np.finfo(f32).smallest_subnormal, -np.finfo(f32).smallest_subnormal, 1e-30, -1e-30, 2**-24, -(2**-24)]
    hard = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        over,
        np.nextafter(over, f32(np.inf)),
        88.8,
        -87.33655,
        -103.27893,
        -103.97208,
        -103.972084,
        -104.0,
        -105.0,
        100.0,
        -150.0,
        0.010830425,
        -0.0054152124,
        0.0054152124,
        *tiny,
    ]
    x = np.concatenate(
        [
            RNG.uniform(-104, 89, 12000),
            RNG.standard_normal(6000) * 3,
            RNG.uniform(-1, 1, 2000) * 10.0 ** RNG.uniform(-30, 0, 2000),
            RNG.uniform(-104, -87.3, 2000),  # subnormal results
            hard,
        ]
    ).astype(f32)
    got = exp(np.stack([x, x])[:, ::-1])[0, ::-1]
    assert got.dtype == f32
    with mpmath.workprec(200):
        want = np.array([_round_to_float32(mpmath.exp(mpmath.mpf(float(v)))) for v in x], f32)
    bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert bad.size == 0, [(float(x[i]), float(got[i]), float(want[i])) for i in bad[:5]]
    # A million more against the 0.5003-ulp float64 route rounded once (tested above against mpmath): they may differ
    # only where e**x is within about 2**-28 of a spacing of a rounding boundary (about 1 in 10**8); a polynomial
    # two terms shorter moves about 1 in 10,000.
    many = RNG.uniform(-104, 89, 1_000_000).astype(f32)
    accurate = softaudit._libm._computed(many, softaudit._libm._exp_block, f32)
    assert np.array_equal(exp(many).view(np.uint32), accurate.view(np.uint32))
    specials = exp(np.array([np.inf, -np.inf, np.nan, 89.0, -200.0, 1e30, -1e30], f32))
    assert list(specials[:2]) == [np.inf, 0.0] and np.isnan(specials[2]) and specials[3] == np.inf
    assert list(specials[4:]) == [0.0, np.inf, 0.0] and not np.signbit(specials[4])


def _round_to_float32(value) -> float:
    """An mpmath value rounded to nearest-even in float32 (subnormals and overflow included), by exact arithmetic."""
    if value == 0:
        return 0.0
    _, e = mpmath.frexp(value)  # value = m 2**e, 0.5 <= m < 1
    q = max(e - 24, -149)  # the float32 spacing at value
    n = value / mpmath.ldexp(1, q)
    k = int(mpmath.nint(n))  # (mpmath's nint rounds half to even)
    result = math.ldexp(k, q)
    return math.inf if result > float(np.finfo(np.float32).max) else result


def test_shapes_are_kept_and_longdouble_falls_back_to_numpy():
    x = RNG.standard_normal((3, 4, 5))
    assert exp(x).shape == (3, 4, 5) and exp(np.float32(1.0)).dtype == np.float32
    zero_d = exp(np.asarray(np.float16(1.5)))
    assert isinstance(zero_d, np.ndarray) and zero_d.shape == () and zero_d.dtype == np.float16
    assert exp(np.arange(3)).dtype == np.float64  # integers give float64, as numpy's ufuncs do
    wide = np.linspace(0.5, 3, 7, dtype=np.longdouble)
    for name, (fn, _) in FUNCTIONS.items():
        assert np.array_equal(fn(wide), getattr(np, name)(wide))


# --- matmul ------------------------------------------------------------------------------------------------------


def _exact_matmul(a, b):
    """a @ b in exact rational arithmetic (2-D)."""
    return [
        [sum((Fraction(x) * Fraction(y) for x, y in zip(row, col)), Fraction(0)) for col in b.T.tolist()]
        for row in a.tolist()
    ]


def test_matmul_is_exact_where_every_product_and_sum_is_representable():
    a = RNG.integers(-1024, 1025, (5, 23)).astype(np.float64)
    b = RNG.integers(-1024, 1025, (23, 4)).astype(np.float64)
    exact = np.array(_exact_matmul(a, b), dtype=np.float64)  # |sum| < 2**25: exact in float64, fits float32's bound
    assert np.array_equal(matmul(a, b, np.float64), exact)
    small = (a / 64).astype(np.float16), (b / 64).astype(np.float16)  # float16 products are exact in float32
    assert np.array_equal(matmul(*small, np.float32), np.array(_exact_matmul(*small), dtype=np.float32))


def test_matmul_error_stays_within_the_pairwise_bound():
    """|computed - exact| <= (ceil(log2 K) + 1) u sum |a_k b_k|: one rounding per product and per level of the tree."""
    k = 37
    a, b = RNG.standard_normal((6, k)), RNG.standard_normal((k, 5))
    got = matmul(a, b, np.float64)
    exact = _exact_matmul(a, b)
    bound = (math.ceil(math.log2(k)) + 1) * 2.0**-53 * (np.abs(a) @ np.abs(b))
    error = np.array([[abs(Fraction(float(got[i, j])) - exact[i][j]) for j in range(5)] for i in range(6)], dtype=float)
    assert (error <= bound).all()
    assert error.max() > 0  # not vacuous: some sums did round


def _pairwise(values):
    """The sum in dtype_sum's order (entry i plus entry i + n // 2, the odd last entry carried), as numpy scalars."""
    while len(values) > 1:
        half = len(values) // 2
        values = [values[i] + values[i + half] for i in range(half)] + values[2 * half :]
    return values[0]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32], ids=lambda d: np.dtype(d).name)
def test_matmul_forms_products_in_float32_adds_them_pairwise_and_rounds_once(dtype):
    a = RNG.standard_normal((3, 29)).astype(dtype)
    b = RNG.standard_normal((29, 4)).astype(dtype)
    expected = np.array(
        [
            [_pairwise([np.float32(x) * np.float32(y) for x, y in zip(row, col)]) for col in b.T.astype(np.float32)]
            for row in a.astype(np.float32)
        ]
    ).astype(dtype)
    got = matmul(a, b, dtype)
    assert got.dtype == np.dtype(dtype)
    assert np.array_equal(got.astype(np.float32), expected.astype(np.float32))


@pytest.mark.parametrize("chunk", [2**18, 64, 1])  # (several batch entries a step; rows of one; a column of K)
def test_matmul_forms_each_batch_entry_as_its_own_product(chunk):
    """Broadcast batch axes: each entry's product is its two matrices' product in the same order, products in float32
    and added pairwise, whatever the step the chunk allows."""
    a = RNG.standard_normal((2, 1, 3, 21)).astype(np.float16)
    b = RNG.standard_normal((3, 21, 5)).astype(np.float16)
    got = matmul(a, b, np.float16, chunk=chunk)
    assert got.shape == (2, 3, 3, 5)
    for i, j in np.ndindex(2, 3):
        expected = [
            [_pairwise([np.float32(x) * np.float32(y) for x, y in zip(row, col)]) for col in b[j].T.astype(np.float32)]
            for row in a[i, 0].astype(np.float32)
        ]
        assert np.array_equal(got[i, j].astype(np.float32), np.array(expected, np.float32).astype(np.float16)), (i, j)


SHAPES = [
    ((3, 4), (4, 5)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 1, 3, 4), (5, 4, 6)),
    ((2, 3, 6, 16), (2, 3, 16, 50)),
    ((7, 0), (0, 3)),
    ((0, 3), (3, 2)),
    ((2, 3, 5), (5, 2)),
    ((3, 5), (1, 5, 2)),
]


@pytest.mark.parametrize("shape_a, shape_b", SHAPES)
def test_matmul_broadcasts_like_the_at_operator(shape_a, shape_b):
    a, b = RNG.standard_normal(shape_a), RNG.standard_normal(shape_b)
    got = matmul(a, b, np.float64)
    assert got.shape == np.shape(a @ b)
    assert np.allclose(got, a @ b, rtol=1e-13, atol=1e-13)


def test_matmul_rejects_what_the_at_operator_rejects():
    with pytest.raises(ValueError, match="contraction"):
        matmul(np.ones((2, 3)), np.ones((4, 2)), np.float32)
    with pytest.raises(ValueError, match="dimension"):
        matmul(np.float32(2), np.ones(3), np.float32)


@pytest.mark.parametrize(
    "dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64], ids=lambda d: np.dtype(d).name
)
def test_matmul_chunks_give_the_same_bits(dtype):
    a = RNG.standard_normal((2, 3, 9, 40)).astype(dtype)
    b = RNG.standard_normal((3, 40, 11)).astype(dtype)
    whole = matmul(a, b, dtype)
    for chunk in (1, 7, 40, 333, 4000):
        assert np.array_equal(
            matmul(a, b, dtype, chunk=chunk).view(f"u{whole.itemsize}"), whole.view(f"u{whole.itemsize}")
        )


def test_matmul_holds_at_most_a_chunk_of_products_at_a_time():
    a, b = RNG.standard_normal((64, 256)).astype(np.float32), RNG.standard_normal((256, 128)).astype(np.float32)
    tracemalloc.start()
    try:
        matmul(a, b, np.float32, chunk=2**12)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**18  # the whole product tensor would take 64 * 256 * 128 * 4 bytes = 8 MiB


# --- what the built-ins may call ----------------------------------------------------------------------------------

#: numpy functions whose bits depend on the CPU (SIMD dispatch, SVML, BLAS), or sums in numpy's own order.
CPU_DEPENDENT = {
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "power",
    "float_power",
    "logaddexp",
    "logaddexp2",
    "tanh",
    "sinh",
    "cosh",
    "matmul",
    "dot",
    "vdot",
    "inner",
    "einsum",
    "tensordot",
}
SUMS = {"sum", "mean", "nansum", "cumsum", "dot", "matmul"}


def _forbidden_calls(path: Path) -> list[str]:
    """np.<CPU-dependent function>, <anything>.sum / .mean / .dot, and the @ operator in a module's code (not in its
    strings or comments)."""
    layout = (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT, tokenize.ENCODING)
    tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
    found = []
    for before, dot, name in zip(tokens, tokens[1:], tokens[2:]):
        if not (dot.string == "." and name.type == tokenize.NAME):
            continue
        if (before.string in ("np", "numpy") and name.string in CPU_DEPENDENT) or name.string in SUMS:
            found.append(f"{path.name}:{name.start[0]}: {before.string}.{name.string}")
    code = [t for t in tokens if t.type not in layout]
    for before, t in zip([None] + code, code):
        starts_line = before is None or before.start[0] != t.start[0]  # a decorator's @ starts its line
        if t.string in ("@", "@=") and not starts_line:
            found.append(f"{path.name}:{t.start[0]}: @")
    return found


def test_builtins_use_only_portable_arithmetic():
    folder = ROOT / "softaudit" / "candidates"
    libm = ROOT / "softaudit" / "_libm.py"
    found = [hit for path in [*sorted(folder.glob("*.py")), libm] for hit in _forbidden_calls(path)]
    # _libm hands longdouble (wider than float64) to numpy's own functions, and only that
    lines = libm.read_text().splitlines()
    fallback = [
        hit for hit in found if hit.startswith("_libm.py:") and "_elementwise(" in lines[int(hit.split(":")[1]) - 1]
    ]
    unexpected = sorted(set(found) - set(fallback))
    assert not unexpected


def test_the_case_families_use_no_cpu_dependent_function():
    # A family's inputs are the audit's inputs: numpy's exp differs on AVX-512, and a gradient family's g made with
    # it gave other cases there, so a table and a cache written on one CPU differed from another's (issue 24).
    # (Sums in float64 and float32 are numpy's pairwise sum in a fixed order: the same bits on every CPU.)
    folder = ROOT / "softaudit" / "cases"
    found = [
        hit for path in sorted(folder.glob("*.py")) for hit in _forbidden_calls(path) if hit.split(".")[-1] not in SUMS
    ]
    assert not found


# --- the same bits on every CPU ---------------------------------------------------------------------------------

PROBE = r"""
import hashlib, json
import ml_dtypes, numpy as np
from softaudit.candidates import builtins
from softaudit.kinds.merge_attention import _partials

def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]

rng = np.random.default_rng(20240611)
rows = rng.standard_normal((6, 300)) * 4
rows[0, :6] = [30.0, -30.0, 11.5, -90.0, 0.0, 88.0]  # overflows and underflows in the narrow dtypes
rows[1] *= 40
long = rng.standard_normal((2, 2048)) * 3
mask = rng.random((6, 300)) < 0.6
mask[2] = False
q, k, v = rng.standard_normal((2, 3, 7, 16)), rng.standard_normal((2, 3, 50, 16)), rng.standard_normal((2, 3, 50, 8))
attend = rng.random((7, 50)) < 0.7
attend[3] = False
q2, k2, v2 = rng.standard_normal((9, 32)) * 3, rng.standard_normal((70, 32)) * 3, rng.standard_normal((70, 16))
g_rows, g_long = rng.standard_normal((6, 300)), rng.standard_normal((2, 2048))
g_attn = rng.standard_normal((2, 3, 7, 8))
labels = np.array([5, -100, 17, 2, 250, 9])
splits = _partials(rng, (3, 0, 40, 7), lq=5, dv=8, center=30.0)
sinks, bias = rng.standard_normal(3) * 2, rng.standard_normal((7, 50))
xh, wv, bv = rng.standard_normal((6, 64)), rng.standard_normal((300, 64)) * 0.3, rng.standard_normal(300)

hashes = {}
dtypes = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
          "float32": np.float32, "float64": np.float64}
for name, dtype in dtypes.items():
    cast = lambda *arrays: [a.astype(dtype) for a in arrays]
    for c in builtins():
        if c.kind == "masked_softmax":
            out = [c.call(x, mask) for x in cast(rows)] + [c.call(x, np.ones(x.shape, bool)) for x in cast(long)]
        elif c.kind == "attention":
            out = [c.call(*cast(q, k, v), mask=attend), c.call(*cast(q, k, v)), c.call(*cast(q2, k2, v2))]
        elif c.kind == "attention_grad":
            out = [*c.call(*cast(q, k, v, g_attn), mask=attend), *c.call(*cast(q, k, v, g_attn))]
            out += [*c.call(*cast(q, k, v, g_attn), mask=attend, **dict(zip(("bias", "sinks"), cast(bias, sinks))))]
            out += [*c.call(*cast(q, k, v, g_attn), mask=attend, softcap=1.5)]  # (its tanh: the portable one)
        elif c.kind == "attention_sinks_grad":
            out = [*c.call(*cast(q, k, v, g_attn, sinks), mask=attend), *c.call(*cast(q, k, v, g_attn, sinks))]
            out += [*c.call(*cast(q, k, v, g_attn, sinks), softcap=1.5)]
        elif c.kind == "masked_softmax_grad":
            out = [c.call(x, mask, g) for x, g in zip(cast(rows), cast(g_rows))]
        elif c.kind == "cross_entropy":
            options = dict(label_smoothing=0.1, z_loss=1e-4, softcap=30.0)
            out = [c.call(x, labels[: len(x)]) for x in cast(rows * 4, long)] + [c.call(*cast(rows), labels, **options)]
        elif c.kind == "cross_entropy_grad":
            grads = [c.call(*cast(rows * 4), labels, *cast(g_rows[:, 0]))]
            out = grads + [c.call(*cast(long), labels[:2], *cast(g_long[0, 0]), reduction="mean", softcap=30.0)]
        elif c.kind == "attention_lse":
            out = [*c.call(*cast(q, k, v), mask=attend), *c.call(*cast(q2, k2, v2), softcap=5.0, window=(20, 3))]
        elif c.kind == "merge_attention":
            out = [*c.call(*cast(splits["outputs"], splits["lses"]))]
        elif c.kind == "linear_cross_entropy":
            out = [c.call(*cast(xh, wv), labels)]
            out += [c.call(*cast(xh, wv), labels, bias=cast(bv)[0], label_smoothing=0.1, reduction="mean")]
        elif c.kind == "linear_cross_entropy_grad":
            out = [*c.call(*cast(xh, wv), labels, *cast(g_rows[:, 0]))]
            out += [*c.call(*cast(xh, wv), labels, *cast(g_rows[0, 0]), bias=cast(bv)[0], reduction="mean")]
        elif c.kind == "logsumexp_grad":
            out = [c.call(x, g) for x, g in zip(cast(rows, long), cast(g_rows[:, 0], g_long[:, 0]))]
        elif c.kind.endswith("_grad"):
            out = [c.call(x, g) for x, g in zip(cast(rows, long), cast(g_rows, g_long))]
        else:
            out = [c.call(x) for x in cast(rows, long)]
        hashes[f"{c.name}/{name}"] = digest(*out)

x32 = (rng.standard_normal(4096) * 20).astype(np.float32)
a, b = rng.standard_normal((96, 96)), rng.standard_normal((96, 96))
with np.errstate(all="ignore"):
    control = {"np.exp float32": digest(np.exp(x32)), "np.log float32": digest(np.log(np.abs(x32))),
               "@ float32": digest(a.astype(np.float32) @ b.astype(np.float32)), "@ float64": digest(a @ b)}
print(json.dumps({"builtins": hashes, "control": control}))
"""


def _cpu_features():
    """numpy's dispatch targets this CPU has (beyond the baseline), and every feature numpy found on it."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # numpy 1.x
        from numpy.core import _multiarray_umath as umath
    found = {name for name, present in umath.__cpu_features__.items() if present}
    dispatched = [name for name in umath.__cpu_dispatch__ if name in found and name not in umath.__cpu_baseline__]
    return dispatched, found


def _environments():
    """Ways to make numpy and OpenBLAS pick other code paths on this very CPU, each valid on any x86-64 CPU: only
    dispatch targets numpy found may be disabled (a baseline feature is an error), and OpenBLAS is only told to use
    kernels whose instructions the CPU has."""
    dispatched, found = _cpu_features()
    wide = [name for name in dispatched if "512" in name or name == "X86_V4"]  # AVX-512 and beyond
    envs = [{}, {}, {}]
    if wide:
        envs[1]["NPY_DISABLE_CPU_FEATURES"] = " ".join(wide)
    if dispatched:
        envs[2]["NPY_DISABLE_CPU_FEATURES"] = " ".join(dispatched)
    if {"AVX2", "FMA3"} <= found:
        envs[1]["OPENBLAS_CORETYPE"] = "Haswell"
    if "AVX" in found:
        envs[2]["OPENBLAS_CORETYPE"] = "Sandybridge"
    return envs, dispatched


def _probe_all(envs):
    base = {
        key: value
        for key, value in os.environ.items()
        if key not in ("NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES", "OPENBLAS_CORETYPE")
    }
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", PROBE],
            cwd=ROOT,
            env={**base, **env},
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for env in envs
    ]
    results = []
    for env, run in zip(envs, runs):
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, f"probe under {env} failed:\n{err}"
        results.append(json.loads(out))
    return results


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="the environments are x86-64's")
def test_every_builtin_gives_the_same_bits_whichever_code_paths_numpy_and_openblas_take():
    envs, dispatched = _environments()
    results = _probe_all(envs)
    default = results[0]
    for env, result in zip(envs[1:], results[1:]):
        differ = sorted(key for key, value in result["builtins"].items() if default["builtins"].get(key) != value)
        assert result["builtins"].keys() == default["builtins"].keys()
        assert not differ, f"under {env} these built-ins changed bits: {differ}"
    if dispatched:  # a SIMD level beyond the baseline to turn off: numpy's own exp (or BLAS) must notice
        changed = [result["control"] != default["control"] for result in results[1:]]
        assert any(changed), f"the environments {envs[1:]} did not change numpy's own results: the test is vacuous"
