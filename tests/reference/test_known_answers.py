"""Known answers: closed forms evaluated with mpmath at 300 bits, and published vectors (ONNX, SciPy)."""

import ml_dtypes
import mpmath
import numpy as np
import pytest

from softaudit import reference as R

from .oracle import round_to

DTYPES = ["float64", "float32", "float16", "bfloat16"]
E = mpmath.e


def closed(*terms):
    """softmax with the given exp(x_i) terms, as exact expressions at 300 bits."""
    with mpmath.workprec(300):
        values = [mpmath.mpf(1) * t() for t in terms]
        total = mpmath.fsum(values)
        return [v / total for v in values]


def exp(a, b=1):
    return lambda: mpmath.exp(mpmath.mpf(a) / b)


CASES = {
    "textbook [10, 0, -5]": ([10, 0, -5], lambda: closed(exp(10), exp(0), exp(-5))),
    "[1, 0, 1]": ([1, 0, 1], lambda: closed(lambda: E, lambda: 1, lambda: E)),
    "[2, 4, 4]": ([2, 4, 4], lambda: closed(lambda: 1, lambda: E**2, lambda: E**2)),
    "[2, 2, 3]": ([2, 2, 3], lambda: closed(lambda: 1, lambda: 1, lambda: E)),
    "[1000, 1001, 999]": ([1000, 1001, 999], lambda: closed(lambda: 1, lambda: E, lambda: 1 / E)),
    "[2, 1, 0] / 2": ([1, 0.5, 0], lambda: closed(exp(2, 2), exp(1, 2), exp(0))),
    "[2, 1, 0] / 1": ([2, 1, 0], lambda: closed(exp(2), exp(1), exp(0))),
    "[2, 1, 0] / 0.5": ([4, 2, 0], lambda: closed(exp(4), exp(2), exp(0))),
    "[0, 0, 0, 0]": ([0, 0, 0, 0], lambda: [mpmath.mpf(1) / 4] * 4),
    "[3, 1, -1] T=1": ([3, 1, -1], lambda: closed(exp(3), exp(1), exp(-1))),
    "[3, 1, -1] T=2": ([1.5, 0.5, -0.5], lambda: closed(exp(3, 2), exp(1, 2), exp(-1, 2))),
    "[1, 1, 10]": ([1, 1, 10], lambda: closed(lambda: 1, lambda: 1, lambda: E**9)),
}


def _exact_in(values, dtype):
    arr = np.asarray(values, dtype=np.float64)
    return np.array_equal(arr.astype(R.format_of(dtype).dtype).astype(np.float64), arr)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CASES))
def test_softmax_known_answers(name, dtype):
    values, expected = CASES[name]
    if not _exact_in(values, dtype):
        pytest.skip(f"{values} is not exact in {dtype}")
    x = np.asarray(values, dtype=np.float64).astype(R.format_of(dtype).dtype)
    got = R.softmax(x, dtype=dtype).astype(np.float64)
    want = np.array([round_to(v, dtype) for v in expected()])
    np.testing.assert_array_equal(got, want)


def test_log_softmax_and_logsumexp_of_1000_1001_999():
    with mpmath.workprec(300):
        log_s = mpmath.log(1 + E + 1 / E)  # log of sum e**(x - 1000)
        lse = 1000 + log_s
        lsm = [0 - log_s, 1 - log_s, -1 - log_s]
    x = np.array([1000.0, 1001.0, 999.0])
    assert float(R.logsumexp(x, dtype="float64")) == round_to(lse, "float64")
    np.testing.assert_array_equal(R.log_softmax(x, dtype="float64"), [round_to(v, "float64") for v in lsm])
    assert float(R.logsumexp(x.astype(np.float32), dtype="float32")) == round_to(lse, "float32")


def test_onnx_softmax_vectors_float32():
    """ONNX Softmax operator examples (onnx/backend/test/case/node/softmax.py), float32."""
    x = np.array([[-1, 0, 1]], dtype=np.float32)
    np.testing.assert_allclose(R.softmax(x, dtype="float32"), [[0.09003058, 0.24472848, 0.66524094]], rtol=2e-7)
    large = np.array([[0, 1, 2, 3], [10000, 10001, 10002, 10003]], dtype=np.float32)
    expected = [0.032058604, 0.08714432, 0.23688284, 0.6439143]
    got = R.softmax(large, dtype="float32")
    np.testing.assert_allclose(got, [expected, expected], rtol=2e-7)
    np.testing.assert_array_equal(got[0], got[1])  # shift invariance, exactly


# scipy/special/tests/test_logsumexp.py, test_softmax_multi_axes: "computed using mpmath (dps = 200) and then
# converted to float". Four of the eight are one ulp from the correctly rounded value.
SCIPY_X = np.array([[-25.0, 0.0, 25.0, 50.0], [1.0, 325.0, 749.0, 750.0]])
SCIPY_PUBLISHED = np.array(
    [
        [2.678636961770877e-33, 1.9287498479371314e-22, 1.3887943864771144e-11, 0.999999999986112],
        [0.0, 1.9444526359919372e-185, 0.2689414213699951, 0.7310585786300048],
    ]
)


def test_scipy_vectors_are_correctly_rounded_where_scipy_published_values_are_not():
    got = R.softmax(SCIPY_X, dtype="float64")
    with mpmath.workprec(400):
        want = np.array(
            [
                [round_to(mpmath.exp(v) / mpmath.fsum(mpmath.exp(w) for w in row), "float64") for v in row]
                for row in SCIPY_X
            ]
        )
    np.testing.assert_array_equal(got, want)
    ulps = np.abs(got.view(np.int64) - SCIPY_PUBLISHED.view(np.int64))
    assert ulps.tolist() == [[0, 0, 1, 1], [0, 1, 0, 1]]
    # The first entry of the second row is e**-749 / (...) ~ 3.8e-326, below half the smallest subnormal.
    assert got[1, 0] == 0.0 and not np.signbit(got[1, 0])


@pytest.mark.parametrize("gap", [8.36, 5.3, 4.0])  # log s = 2.3e-4 (stays on the near side), 5.0e-3 and 1.8e-2
def test_log_softmax_of_an_off_grid_t_near_a_rounding_boundary(gap):
    """t = x - m need not lie on the target's quarter-spacing grid: in float16, 3.97265625 - 90.5625 =
    -86.58984375 is 2**-8 above the boundary -86.59375 between -86.5625 and -86.625. Found by Hypothesis: tier C
    once rounded t - log s like t - spacing/8 (past the boundary) whenever log s was below spacing/8."""
    from .oracle import rounded_rows

    x = np.array([[3.97265625, 90.5625, 90.5625 - gap]], np.float16)
    expected = rounded_rows("log_softmax", x.astype(np.float64), "float16")
    assert expected[0, 0] == (-86.5625 if gap > 8 else -86.625)  # by hand: t - log s against -86.59375
    for method in ("auto", "mpmath"):
        got = R.log_softmax(x, dtype="float16", method=method).astype(np.float64)
        np.testing.assert_array_equal(got, expected, err_msg=method)


def test_a_base_near_a_boundary_with_an_astronomically_small_correction():
    """bfloat16 log-softmax of [1032, 301056]: t = -300024 is 8 above the boundary -300032 (bfloat16's spacing
    is 2048 there) and off the quarter-spacing grid, while log s = log1p(e**-300024) is astronomically small. The
    result rounds as t does, decided from exact rationals without carrying e**-300024 to full precision."""
    from .oracle import rounded_rows

    x = np.array([[1032.0, 301056.0]], ml_dtypes.bfloat16)
    expected = rounded_rows("log_softmax", x.astype(np.float64), "bfloat16")
    assert expected[0, 0] == -299008.0
    for method in ("auto", "mpmath"):
        got = R.log_softmax(x, dtype="bfloat16", method=method).astype(np.float64)
        np.testing.assert_array_equal(got, expected, err_msg=method)


def test_an_off_grid_base_with_a_correction_beyond_any_exponent_is_rounded_without_forming_it():
    """float32 log-softmax of [1.5, 1e30]: t = 1.5 - 1e30 is off the grid and log s is about e**-1e30, whose
    exact rational would need 1.4e30 bits (an earlier version built it and ran out of memory). The answer is t
    rounded: -1e30 in float32."""
    from .oracle import rounded_rows

    x = np.array([[1.5, 1e30]], np.float32)
    expected = rounded_rows("log_softmax", x.astype(np.float64), "float32")
    assert expected[0, 0] == -float(np.float32(1e30))
    for method in ("auto", "mpmath"):
        np.testing.assert_array_equal(R.log_softmax(x, dtype="float32", method=method).astype(np.float64), expected)


def test_attention_keeps_the_sign_of_zero_that_ieee_arithmetic_gives():
    """o = sum_j p_j v_j: a column whose kept values are all -0 gives -0 (p_j * -0 = -0, and -0 + -0 = -0); one
    +0 among them gives +0. Found by Hypothesis: a single key with v = -0 once came back +0."""
    q = np.array([[1.0, 0.5]])
    k = np.array([[0.25, 1.0], [2.0, -1.0], [0.0, 3.0]])
    v = np.array([[-0.0, -0.0, 1.0], [-0.0, 0.0, 2.0], [5.0, 0.0, 3.0]])
    mask = np.array([[True, True, False]])  # the third key (the only non-zero first column) may not be attended
    p = np.exp(q @ k.T / np.sqrt(2))[0, :2]
    by_hand = [p[0] * v[0, c] + p[1] * v[1, c] for c in range(2)]  # IEEE products and a sum
    assert [np.signbit(h) for h in by_hand] == [True, False]
    for dtype in ("float16", "float32", "float64"):
        got = R.attention(q, k, v, mask, dtype=dtype).astype(np.float64)[0]
        assert got[0] == 0 and np.signbit(got[0]) and got[1] == 0 and not np.signbit(got[1]), dtype
