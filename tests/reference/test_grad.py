"""The gradient reference (vector-Jacobian products) against plain mpmath, finite differences and hard inputs."""

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from softaudit import reference as R
from softaudit.reference._exact import PrecisionExhausted

from .oracle import attention_grad_exact, grad_row, near_boundary, round_to, rounded, rounded_grad_rows

DTYPES = ["float16", "bfloat16", "float32", "float64"]
ROW_KINDS = ["softmax_grad", "log_softmax_grad", "logsumexp_grad"]


def dtype_of(name):
    return R.format_of(name).dtype


def bits(a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return np.where(np.isnan(a), np.nan, a).view(np.int64)


def call(kind, x, g, dtype, mask=None, method="auto"):
    if mask is not None:
        return R.masked_softmax_grad(x, mask, g, dtype=dtype, method=method)
    return getattr(R, kind)(x, g, dtype=dtype, method=method)


@st.composite
def grad_rows(draw, max_len=300):
    """Rows x at a scale from 1e-3 to 1e4 (some near overflow, some with ties) and upstream gradients g of several
    kinds: Gaussian, constant, cross-entropy's p - onehot, a wide dynamic range, with zeros."""
    dtype = draw(st.sampled_from(DTYPES))
    kind = draw(st.sampled_from(ROW_KINDS))
    n = draw(st.one_of(st.integers(1, 8), st.integers(9, max_len)))
    count = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = 10.0 ** draw(st.floats(-3, 4))
    x = rng.standard_normal((count, n)) * scale
    shape_of_x = draw(st.sampled_from(["plain", "ties", "near overflow"]))
    if shape_of_x == "ties":
        x = np.round(x / scale * 2) * scale
    elif shape_of_x == "near overflow":
        x = x + float(R.format_of(dtype).max_float) * 0.9
    dt = dtype_of(dtype)
    with np.errstate(over="ignore"):
        x = x.astype(dt)
    gshape = (count,) if kind == "logsumexp_grad" else (count, n)
    gkind = draw(st.sampled_from(["gauss", "constant", "cross entropy", "wide", "sparse"]))
    if gkind == "gauss":
        g = rng.standard_normal(gshape)
    elif gkind == "constant":
        g = np.full(gshape, rng.standard_normal())
    elif gkind == "cross entropy" and kind != "logsumexp_grad":
        p = R.softmax(x, dtype=dtype).astype(np.float64)
        g = p - np.eye(n)[rng.integers(0, n, count)]
    elif gkind == "wide":
        g = rng.standard_normal(gshape) * 10.0 ** rng.uniform(-20, 20, gshape)
    else:
        g = rng.standard_normal(gshape) * (rng.random(gshape) < 0.3)
    with np.errstate(over="ignore", under="ignore"):
        g = g.astype(dt)
    return dtype, kind, x, np.where(np.isfinite(g.astype(np.float64)), g, 0).astype(dt)


@settings(max_examples=60, deadline=None)
@given(case=grad_rows())
def test_row_grads_match_plain_mpmath_at_twice_the_precision(case):
    dtype, kind, x, g = case
    got = call(kind, x, g, dtype)
    want = rounded_grad_rows(kind, x, g, dtype)
    np.testing.assert_array_equal(bits(got), bits(want))


@settings(max_examples=25, deadline=None)
@given(case=grad_rows(max_len=40), seed=st.integers(0, 2**32 - 1))
def test_masked_softmax_grad_matches_plain_mpmath(case, seed):
    dtype, _, x, g = case
    if g.shape != x.shape:
        g = np.broadcast_to(g[:, None], x.shape).copy()
    mask = np.random.default_rng(seed).random(x.shape) < 0.6
    got = R.masked_softmax_grad(x, mask, g, dtype=dtype)
    want = rounded_grad_rows("softmax_grad", x, g, dtype, mask)
    np.testing.assert_array_equal(bits(got), bits(want))
    assert not np.signbit(got.astype(np.float64)[~mask]).any() and not got.astype(np.float64)[~mask].any()


@settings(max_examples=20, deadline=None)
@given(case=grad_rows(max_len=60))
def test_fast_tiers_and_pure_mpmath_agree_bit_for_bit(case):
    dtype, kind, x, g = case
    np.testing.assert_array_equal(bits(call(kind, x, g, dtype)), bits(call(kind, x, g, dtype, method="mpmath")))


def _finite_difference(kind, row, g, prec=400, step=2.0**-120):
    """d/dt <g, f(x + t e_i)> at t = 0 by central differences of the exact forward, for every i."""
    with mpmath.workprec(prec):
        xs = [mpmath.mpf(float(v)) for v in row]
        gs = [mpmath.mpf(float(v)) for v in np.atleast_1d(g)]

        def f(values):
            m = max(values)
            es = [mpmath.exp(v - m) for v in values]
            total = mpmath.fsum(es)
            if kind == "logsumexp_grad":
                return gs[0] * (m + mpmath.log(total))
            if kind == "log_softmax_grad":
                return mpmath.fsum(gj * (v - m - mpmath.log(total)) for gj, v in zip(gs, values))
            return mpmath.fsum(gj * e / total for gj, e in zip(gs, es))

        h = mpmath.mpf(step)
        out = []
        for i in range(len(xs)):
            plus, minus = list(xs), list(xs)
            plus[i] += h
            minus[i] -= h
            out.append((f(plus) - f(minus)) / (2 * h))
        return out


@settings(max_examples=25, deadline=None)
@given(
    kind=st.sampled_from(ROW_KINDS),
    dtype=st.sampled_from(DTYPES),
    n=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_row_grads_match_finite_differences_of_the_exact_forward(kind, dtype, n, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 3).astype(dtype_of(dtype))
    g = rng.standard_normal(() if kind == "logsumexp_grad" else n).astype(dtype_of(dtype))
    got = getattr(R, kind)(x, g, dtype=dtype).astype(np.float64)
    for value, want in zip(got, _finite_difference(kind, x, g)):
        if near_boundary(want, dtype, 200) or abs(want) < 2.0**-100:  # the difference quotient's error is 2**-200
            continue
        assert value == round_to(want, dtype)


def test_a_constant_upstream_gradient_gives_exactly_zero():
    rng = np.random.default_rng(0)
    for dtype in DTYPES:
        x = (rng.standard_normal((4, 1000)) * 5).astype(dtype_of(dtype))
        g = np.full(x.shape, 0.3).astype(dtype_of(dtype))
        for method, cols in (("auto", 1000), ("mpmath", 60)):
            out = R.softmax_grad(x[:, :cols], g[:, :cols], dtype=dtype, method=method).astype(np.float64)
            assert (out == 0).all() and not np.signbit(out).any()
        assert (R.evaluate_grad("softmax_grad", x, g, dtype=dtype).tier < 3).all()  # decided without tier C


def test_cross_entropy_gradient_through_log_softmax_matches_the_oracle():
    """g = p - onehot: the gradient of cross-entropy; sum g is about 0, so dx is about g."""
    rng = np.random.default_rng(1)
    for dtype in DTYPES:
        x = (rng.standard_normal((3, 50)) * 4).astype(dtype_of(dtype))
        p = R.softmax(x, dtype=dtype).astype(np.float64)
        g = (p - np.eye(50)[[0, 7, 49]]).astype(dtype_of(dtype))
        for kind in ("softmax_grad", "log_softmax_grad"):
            np.testing.assert_array_equal(
                bits(getattr(R, kind)(x, g, dtype=dtype)), bits(rounded_grad_rows(kind, x, g, dtype))
            )


def test_exact_zeros_by_groups_of_equal_logits():
    """x = [1, 1, 0], g = [a, b, b] with ... : softmax_grad of entry 2 is p_2 (p_0 (b - a) + p_1 (b - b)) != 0, but with
    g = [1, 3, 2] entry 2 is p_2 p_0 (2 - 1) + p_2 p_1 (2 - 3) = 0 exactly (p_0 = p_1): tier C must find it."""
    x = np.array([1.0, 1.0, 0.0])
    g = np.array([1.0, 3.0, 2.0])
    for dtype in DTYPES:
        for method in ("auto", "mpmath"):
            out = R.softmax_grad(x, g, dtype=dtype, method=method).astype(np.float64)
            assert out[2] == 0 and not np.signbit(out[2])
            assert out[0] == -out[1] != 0


def test_a_value_a_tiny_correction_away_from_a_rational_on_a_boundary():
    """x = [0, 0, -1e6], g = [1, 0, 0]: dx_0 = p_0 (1 - p_0) = 1/4 - (about e**-2000000), decided by its sign;
    g = [1, 0, 1] with x = [0, 0, -1e6] makes dx_0 = p_0 (1 - p_0 - p_2) exactly 1/4 - ... as well."""
    x = np.array([0.0, 0.0, -1e6])
    for g, want in (([1.0, 0.0, 0.0], 0.25), ([0.0, 1.0, 0.0], -0.25)):
        for dtype in DTYPES:
            out = R.softmax_grad(x, np.array(g), dtype=dtype, method="mpmath").astype(np.float64)
            assert out[0] == want and out[1] == -want
            assert out[2] == 0 and np.signbit(out[2])  # p_2 (0 - <g, p>) < 0: nonzero, rounds to -0
    # log_softmax_grad: g - p sum g with g = [3/2, -1/2, 0]: dx_0 = 3/2 - p_0, base exactly 1 (a binade's bottom)
    out = R.log_softmax_grad(x, np.array([1.5, -0.5, 0.0]), dtype="float16", method="mpmath").astype(np.float64)
    assert out[0] == 1.0 and out[1] == -1.0


def test_subnormal_probabilities_and_logits_near_overflow():
    for dtype in DTYPES:
        fmax = float(R.format_of(dtype).max_float)
        x = np.array([fmax, fmax * 0.5, fmax * 0.99, -fmax]).astype(dtype_of(dtype))
        g = np.array([1.0, -2.0, 3.0, 4.0]).astype(dtype_of(dtype))
        for kind in ("softmax_grad", "log_softmax_grad"):
            np.testing.assert_array_equal(
                bits(getattr(R, kind)(x, g, dtype=dtype)), bits(rounded_grad_rows(kind, x[None], g[None], dtype)[0])
            )
        x = np.array([0.0, -100.0, -110.0]).astype(dtype_of(dtype))  # e**-100: subnormal or zero in the narrow types
        np.testing.assert_array_equal(
            bits(R.softmax_grad(x, g[:3], dtype=dtype)),
            bits(rounded_grad_rows("softmax_grad", x[None], g[None, :3], dtype)[0]),
        )


def test_undefined_rows_removed_entries_and_fully_masked_rows():
    x = np.array([[1.0, np.nan, 2.0], [1.0, 2.0, 3.0], [-np.inf, -np.inf, -np.inf], [0.0, -np.inf, 1.0]])
    g = np.array([[1.0, 2.0, 3.0], [1.0, np.inf, 3.0], [1.0, 2.0, 3.0], [1.0, np.nan, 3.0]])
    res = R.evaluate_grad("softmax_grad", x, g, dtype="float32")
    assert res.undefined.tolist() == [True, True, False, False]  # a NaN g on a -inf entry is never read
    assert np.isnan(res.value[:2]).all()
    assert (res.value[2] == 0).all() and not np.signbit(res.value[2]).any()
    assert res.value[3, 1] == 0 and not np.signbit(res.value[3, 1])
    mask = np.array([[False, False, False], [True, False, True], [True, True, True], [True, True, True]])
    out = R.masked_softmax_grad(np.ones((4, 3)), mask, np.arange(12.0).reshape(4, 3), dtype="float32")
    assert (out[0] == 0).all() and not np.signbit(out[0]).any()  # fully masked: no output depends on x
    assert out[1, 1] == 0


def test_axis_shapes_and_dtype_none():
    rng = np.random.default_rng(3)
    x, g = rng.standard_normal((3, 4, 5)), rng.standard_normal((3, 4, 5))
    np.testing.assert_array_equal(
        R.softmax_grad(x, g, axis=1, dtype="float32"),
        np.moveaxis(R.softmax_grad(np.moveaxis(x, 1, -1), np.moveaxis(g, 1, -1), dtype="float32"), -1, 1),
    )
    assert R.logsumexp_grad(x, g[..., 0], dtype="float32").shape == x.shape
    with pytest.raises(ValueError, match="g must have"):
        R.softmax_grad(x, g[..., 0], dtype="float32")
    got = R.softmax_grad(x[0, 0], g[0, 0], prec=80)
    want = grad_row("softmax_grad", x[0, 0], g[0, 0], None, 300)
    with mpmath.workprec(80):
        assert all(o == +w for o, w in zip(got, want))


def test_correctly_rounded_results_are_within_half_an_ulp_of_the_oracle():
    rng = np.random.default_rng(5)
    for dtype in DTYPES:
        x = (rng.standard_normal((2, 64)) * 4).astype(dtype_of(dtype))
        g = rng.standard_normal((2, 64)).astype(dtype_of(dtype))
        got = R.softmax_grad(x, g, dtype=dtype).astype(np.float64)
        p = R.format_of(dtype).precision
        for i in range(2):
            exact = grad_row("softmax_grad", x[i], g[i], None, 300)
            for v, e in zip(got[i], exact):
                if e == 0:
                    assert v == 0
                    continue
                ulp = mpmath.ldexp(1, max(int(mpmath.floor(mpmath.log(abs(e), 2))), R.format_of(dtype).emin) - p + 1)
                assert abs(mpmath.mpf(v) - e) <= ulp / 2
    assert math.isfinite(rounded(lambda prec: [mpmath.mpf(1)], "float16")[0])


def _rounded_attention_grad(q, k, v, g, keep, scale, dtype):
    """The oracle's (dq, dk, dv) rounded to dtype: twice the precision; where twice cannot tell or a sum came out
    0, ten times that plus the bits of the scores' spread (mpmath's fsum drops a term far below the others: in
    -10 p + 10 p - 5 e**-150 at 42 bits the last term is lost, and weights can be e**(-2 max|score|))."""
    prec = 2 * R.format_of(dtype).precision + 20
    exact = attention_grad_exact(q, k, v, g, keep, scale, prec)
    if any(x == 0 or near_boundary(x, dtype, prec) for part in exact for row in part for x in row):
        c = 1 / math.sqrt(q.shape[1]) if scale is None else abs(scale)
        spread = 2 * c * (np.abs(np.asarray(q, np.float64)) @ np.abs(np.asarray(k, np.float64)).T).max(initial=0)
        exact = attention_grad_exact(q, k, v, g, keep, scale, 10 * prec + math.ceil(1.45 * spread))
    return [np.array([[round_to(x, dtype) for x in row] for row in part]) for part in exact]


@settings(max_examples=40, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    d=st.integers(1, 6),
    lq=st.integers(1, 4),
    lk=st.integers(1, 5),
    dv=st.integers(1, 3),
    magnitude=st.floats(-2, 1.5),
    masked=st.booleans(),
    scale=st.sampled_from([None, None, 0.5, -0.25, 0.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_attention_grad_matches_plain_mpmath(dtype, d, lq, lk, dv, magnitude, masked, scale, seed):
    rng = np.random.default_rng(seed)
    q, k, v, g = (
        (rng.standard_normal(s) * 10.0**magnitude).astype(dtype_of(dtype))
        for s in ((lq, d), (lk, d), (lk, dv), (lq, dv))
    )
    keep = rng.random((lq, lk)) < 0.6 if masked else np.ones((lq, lk), bool)
    got = R.attention_grad(q, k, v, g, keep, scale=scale, dtype=dtype)
    for part, want in zip(got, _rounded_attention_grad(q, k, v, g, keep, scale, dtype)):
        np.testing.assert_array_equal(bits(part), bits(want))
    if lq * lk <= 8:
        slow = R.attention_grad(q, k, v, g, keep, scale=scale, dtype=dtype, method="mpmath")
        for a, b in zip(got, slow):
            np.testing.assert_array_equal(bits(a), bits(b))


def test_attention_grad_matches_finite_differences_of_the_exact_forward():
    rng = np.random.default_rng(11)
    q, k, v, g = (rng.standard_normal(s) for s in ((2, 3), (3, 3), (3, 2), (2, 2)))
    got = R.attention_grad(q, k, v, g, dtype="float32")
    step = mpmath.mpf(2) ** -120

    def loss(Q, K, V):
        with mpmath.workprec(400):
            total = mpmath.mpf(0)
            for i in range(2):
                s = [mpmath.fsum(Q[i][a] * K[j][a] for a in range(3)) / mpmath.sqrt(3) for j in range(3)]
                m = max(s)
                e = [mpmath.exp(x - m) for x in s]
                out = [mpmath.fsum(e[j] * V[j][c] for j in range(3)) / mpmath.fsum(e) for c in range(2)]
                total += mpmath.fsum(mpmath.mpf(float(g[i][c])) * out[c] for c in range(2))
            return total

    with mpmath.workprec(400):
        base = [[[mpmath.mpf(float(x)) for x in row] for row in a] for a in (q, k, v)]
        for which, part in enumerate(got):
            for i, j in np.ndindex(part.shape):
                plus = [[list(r) for r in a] for a in base]
                minus = [[list(r) for r in a] for a in base]
                plus[which][i][j] += step
                minus[which][i][j] -= step
                fd = (loss(*plus) - loss(*minus)) / (2 * step)
                if not near_boundary(fd, "float32", 200):
                    assert part[i, j] == round_to(fd, "float32"), (which, i, j)


def test_keys_nobody_attends_and_queries_that_attend_nothing_give_exact_zeros():
    rng = np.random.default_rng(2)
    q, k, v, g = (rng.standard_normal(s) for s in ((3, 4), (4, 4), (4, 2), (3, 2)))
    keep = np.ones((3, 4), bool)
    keep[:, 1] = False  # key 1: nobody attends
    keep[2] = False  # query 2: attends nothing
    for dtype in DTYPES:
        for method in ("auto", "mpmath"):
            dq, dk, dv = (a.astype(np.float64) for a in R.attention_grad(q, k, v, g, keep, dtype=dtype, method=method))
            for zero in (dq[2], dk[1], dv[1]):
                assert (zero == 0).all() and not np.signbit(zero).any()
            assert (dq[:2] != 0).all() and (dv[[0, 2, 3]] != 0).all()


def test_attention_grad_of_equal_values_is_exactly_zero_for_q_and_k():
    """Every value row equal: dP is constant along each row, so dS = 0 and dq = dk = 0 exactly; dv is P^T g."""
    rng = np.random.default_rng(4)
    q, k, g = (rng.standard_normal(s) for s in ((3, 4), (5, 4), (3, 2)))
    v = np.tile(rng.standard_normal((1, 2)), (5, 1))
    for dtype in ("float16", "float32", "float64"):
        dq, dk, dv = (a.astype(np.float64) for a in R.attention_grad(q, k, v, g, dtype=dtype))
        assert (dq == 0).all() and (dk == 0).all() and not np.signbit(dq).any() and not np.signbit(dk).any()
        want = _rounded_attention_grad(q, k, v, g, np.ones((3, 5), bool), None, dtype)[2]
        np.testing.assert_array_equal(bits(dv), bits(want))


def test_attention_grad_undefined_queries_and_bad_arguments():
    q, k, v, g = np.ones((2, 2)), np.ones((3, 2)), np.ones((3, 2)), np.ones((2, 2))
    g[1, 0] = np.nan
    dq, dk, dv = R.attention_grad(q, k, v, g, dtype="float32")
    assert np.isnan(dq[1]).all() and not np.isnan(dq[0]).any() and np.isnan(dk).all() and np.isnan(dv).all()
    with pytest.raises(ValueError, match="g must have"):
        R.attention_grad(q, k, v, g[:1], dtype="float32")


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_entries_far_below_the_smallest_subnormal_round_to_zeros_of_their_sign(dtype):
    """Logits 800 to 3000 below the row's top: p (and dx) far below any subnormal, which the fast tiers decide as
    signed zeros (the sign of g_i - <g, p>, or of g for log-sum-exp) once a bound proves it; the bits, sign of zero
    included, are the plain oracle's."""
    x = np.array([[0.0, -800.0, -1500.0, -3000.0, -2.5, -760.0], [3.0, -900.0, -1200.0, 1.0, -2000.0, -744.0]])
    g = np.array([[1.0, -2.0, 3.0, 0.5, -1.0, 4.0], [-3.0, 2.0, -1.0, 0.25, 5.0, -6.0]])
    x, g = x.astype(dtype_of(dtype)), g.astype(dtype_of(dtype))
    np.testing.assert_array_equal(
        bits(R.softmax_grad(x, g, dtype=dtype)), bits(rounded_grad_rows("softmax_grad", x, g, dtype))
    )
    lse = R.logsumexp_grad(x, g[:, 0], dtype=dtype)
    np.testing.assert_array_equal(bits(lse), bits(rounded_grad_rows("logsumexp_grad", x, g[:, 0], dtype)))
    assert np.signbit(lse[1, 1:3]).all() and (lse[1, 1:3] == 0).all()  # g = -3: zeros of its sign
    assert (R.evaluate_grad("softmax_grad", x, g, dtype=dtype).tier[:, 1:4] <= 2).all()  # decided without mpmath


def test_dense_forms_refine_before_expanding(monkeypatch):
    """Large cov forms (dq over many keys) are evaluated unexpanded first; forcing that route must not change a bit."""
    from softaudit.reference import _grad_exact

    rng = np.random.default_rng(8)
    q, k, v, g = (rng.standard_normal(s) for s in ((2, 3), (6, 3), (6, 2), (2, 2)))
    want = R.attention_grad(q, k, v, g, dtype="float64", method="mpmath")
    monkeypatch.setattr(_grad_exact, "_CHEAP", 0)
    for a, b in zip(R.attention_grad(q, k, v, g, dtype="float64", method="mpmath"), want):
        np.testing.assert_array_equal(bits(a), bits(b))
    monkeypatch.setattr(_grad_exact, "_EXPAND_AT", 0)  # and expanding at once
    for a, b in zip(R.attention_grad(q, k, v, g, dtype="float64", method="mpmath"), want):
        np.testing.assert_array_equal(bits(a), bits(b))


def test_a_bound_that_underflows_does_not_claim_an_exact_zero():
    """Found by Hypothesis: p_1 = e**-3000 is 0 in float64 and its bound times a small d_err underflowed to 0, so
    tier A called dx_1 an exact +0; it is -p_1 <g, p> != 0, which rounds to -0."""
    x = np.array([[0, -0.0, 1e3, 0, -1e3, 1e3, 3e3, 2e3, -1e3]], dtype=np.float16)
    g = np.array([[-1.266, -0.0, 0.04132, -2.324, -0.0, -0.0, -0.0, -0.0, -0.0]], dtype=np.float16)
    for dtype in ("float16", "float64"):
        fast = R.softmax_grad(x, g, dtype=dtype)
        np.testing.assert_array_equal(bits(fast), bits(R.softmax_grad(x, g, dtype=dtype, method="mpmath")))
        assert np.signbit(fast[0, 1].astype(np.float64))


def test_log_softmax_grad_far_below_the_subnormals_keeps_the_sign_of_minus_p_sum_g():
    """Found by Hypothesis: where g_i = 0, dx_i = -p_i sum g; with p_i = e**-1178 (0 in float64) the fast tiers
    called it an exact +0. sum g = 9.8e-156 + 6.5e-289 (the -1 and 1 cancel exactly) is positive, so each such dx_i
    is negative and rounds to -0; the other entries are g_i less a term far below their last bit."""
    x = np.array([[125.73022109, -132.10486329, 640.42265044, 104.90011715, -535.66937316, 361.59505491]])
    x = np.concatenate([x, [[1304.00004513, 947.08096313, -703.73523581]]], axis=1)
    g = np.array([[0.0, 0.0, 6.48633197e-289, 0.0, 0.0, -1.0, 1.0, 9.81775525e-156, 0.0]])
    got = R.log_softmax_grad(x, g, dtype="float64")
    zero = g[0] == 0
    assert (got[0, zero] == 0).all() and np.signbit(got[0, zero]).all()
    np.testing.assert_array_equal(got[0, ~zero], g[0, ~zero])
    np.testing.assert_array_equal(bits(got), bits(R.log_softmax_grad(x, g, dtype="float64", method="mpmath")))


def test_log_softmax_grad_where_p_is_one_within_its_precision():
    """Found by Hypothesis: p_0 = 1 - 9.4e-14 for logits (40, -50, 10), so dx_0 = g_0 (1 - p_0) = -7.7e-15 for
    g_0 = -0.08246: below float16's smallest subnormal, a -0 (the oracle at 42 bits had p_0 = 1 and said +0)."""
    x = np.array([[40.0, -50.0, 10.0]], dtype=np.float16)
    g = np.array([[-0.08246, -0.0, 0.0]], dtype=np.float16)
    got = R.log_softmax_grad(x, g, dtype="float16").astype(np.float64)
    assert got[0, 0] == 0 and np.signbit(got[0, 0])
    np.testing.assert_array_equal(bits(got), bits(rounded_grad_rows("log_softmax_grad", x, g, "float16")))


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    d=st.integers(1, 6),
    lq=st.integers(1, 4),
    lk=st.integers(1, 5),
    dv=st.integers(1, 3),
    magnitude=st.floats(-2, 2),
    values=st.sampled_from(["gaussian", "few", "constant"]),
    masked=st.booleans(),
    scale=st.sampled_from([None, None, 0.5, -0.25, 0.0]),
    nan_query=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_attention_grad_tier_b_alone_matches_plain_mpmath(
    dtype, d, lq, lk, dv, magnitude, values, masked, scale, nan_query, seed
):
    """Tier A switched off, so tier B (Ozaki products, double-double steps) decides what it can and tier C the
    rest. Values from a few integers make ties, exact zeros and rational results; "constant" is every input one
    value (as attn_constant_1000); a NaN in one query's g makes that query undefined, the rest must not change."""
    from unittest import mock

    from softaudit.reference import _grad_attention

    rng = np.random.default_rng(seed)
    shapes = ((lq, d), (lk, d), (lk, dv), (lq, dv))
    draw = {
        "gaussian": lambda s: rng.standard_normal(s),
        "few": lambda s: rng.integers(-2, 3, s) / 2.0,
        "constant": lambda s: np.full(s, 1.0),
    }[values]
    q, k, v, g = ((draw(s) * 10.0**magnitude).astype(dtype_of(dtype)) for s in shapes)
    keep = rng.random((lq, lk)) < 0.6 if masked else np.ones((lq, lk), bool)
    if nan_query:
        g[0, 0] = np.nan
    try:
        with mock.patch.object(_grad_attention, "tier_a_target", lambda fmt: False):
            got = R.evaluate_attention_grad(q, k, v, g, keep, scale=scale, dtype=dtype)
    except PrecisionExhausted:
        got = None
    q, k, v, g = (a.astype(np.float64) for a in (q, k, v, g))
    if nan_query:
        g[0] = 0.0  # what the other outputs see: row 0 contributes nothing to the defined ones
    want = _rounded_attention_grad(
        q, k, v, g, keep & (np.arange(lq) != 0)[:, None] if nan_query else keep, scale, dtype
    )
    if got is None:  # the documented limit: dk or dv exactly 0 by cancellation between queries of unequal weights
        assert any((part == 0).any() for part in want[1:])
        return
    for part, expect, undefined in zip(got, want, _undefined_outputs(keep, nan_query, d, dv)):
        expect = np.where(undefined, np.nan, expect)
        # Zeros compare without their sign: plain mpmath cannot tell an exact 0 from rounding noise of either sign
        # (1/3 a + 1/2 b = 0 is not exact in binary); the signs of zeros are tested by name above.
        np.testing.assert_array_equal(bits(part.value + 0.0), bits(expect + 0.0))


def _undefined_outputs(keep, nan_query, d, dv):
    """Masks of dq, dk, dv that are NaN when query 0's g holds a NaN: its dq, and the keys it attends."""
    lq, _ = keep.shape
    rows = np.zeros(lq, bool)
    rows[0] = nan_query and keep[0].any()
    keys = (keep & rows[:, None]).any(axis=0)
    return (np.repeat(rows[:, None], d, 1), np.repeat(keys[:, None], d, 1), np.repeat(keys[:, None], dv, 1))


def test_tier_b_decides_exact_zeros_and_leaves_gaussian_heads_to_no_mpmath():
    """Equal value rows (dq = dk = 0 exactly) and constant inputs of 1000 are decided by tier B's exact products;
    a Gaussian head of 128 queries and keys needs no tier C at all (tier A left 1 to 15 per 16,000 outputs)."""
    rng = np.random.default_rng(4)
    q, k, g = (rng.standard_normal(s).astype(np.float32) for s in ((16, 8), (24, 8), (16, 4)))
    v = np.tile(rng.standard_normal((1, 4)), (24, 1)).astype(np.float32)
    dq, dk, _ = R.evaluate_attention_grad(q, k, v, g, dtype="float32")
    for part in (dq, dk):
        assert (part.value == 0).all() and not np.signbit(part.value).any() and (part.tier == 2).all()
    ones = np.full((12, 8), 1000.0, np.float32)
    for part in R.evaluate_attention_grad(ones, ones, ones, ones[:, :8], dtype="bfloat16"):
        assert (part.tier <= 2).all()
    q, k, v, g = (rng.standard_normal((128, 32)).astype(np.float32) for _ in range(4))
    assert all((part.tier <= 2).all() for part in R.evaluate_attention_grad(q, k, v, g, dtype="float32"))


def test_log_softmax_grad_at_minus_infinity_follows_the_calculus():
    """y_i = x_i - lse(x): at x_i = -inf, p_i = 0 so dx_i = g_i, and g_i enters every other entry's sum (as
    autograd computes). [0, -inf] with g = [1, 2]: p = [1, 0], dx = [1 - 3, 2] = [-2, 2]. A row of -inf only has
    no forward (NaN), so no gradient."""
    x = np.array([[0.0, -np.inf], [-np.inf, -np.inf]])
    g = np.array([[1.0, 2.0], [1.0, 2.0]])
    for dtype in DTYPES:
        for method in ("auto", "mpmath"):
            dx = R.log_softmax_grad(x, g, dtype=dtype, method=method).astype(np.float64)
            np.testing.assert_array_equal(dx[0], [-2.0, 2.0])
            assert np.isnan(dx[1]).all()


def test_a_midpoint_moved_by_e_to_the_minus_1000_rounds_away_from_it():
    """softmax_grad in float16 of x = [0, 0, -1000], g = [0.7666, -0.607, 0.8257]: the second output is the float16
    midpoint -0.3433837890625 moved by about -0.0148 e**-1000 (d r_1 / d eps for p_3 = eps), so it rounds away
    from zero, to -0.34350586; an oracle at too few bits sees the tie and rounds to even (found by Hypothesis)."""
    x = np.array([[0.0, 0.0, -1000.0]], np.float16)
    g = np.array([[0.7666, -0.607, 0.8257]], np.float16)
    got = call("softmax_grad", x, g, "float16")
    assert got.astype(np.float64)[0, 1] == -0.343505859375  # (the midpoint less half a float16 spacing, 2**-13)
    np.testing.assert_array_equal(bits(got), bits(rounded_grad_rows("softmax_grad", x, g, "float16")))


def test_an_undefined_row_keeps_zeros_where_it_is_masked():
    """Hypothesis found it: float16 x = [inf, 3.34e4] with the second entry masked gave NaN at both; nothing depends
    on a masked entry, so its gradient is +0 in every row (the plain oracle's answer), NaN only where kept."""
    x = np.array([[np.inf, 3.34e4], [np.inf, -np.inf]], np.float16)
    g = np.array([[0.4182, -0.568], [1.0, 2.0]], np.float16)
    mask = np.array([[True, False], [True, True]])
    got = R.masked_softmax_grad(x, mask, g, dtype=np.float16)
    np.testing.assert_array_equal(bits(got), bits(rounded_grad_rows("softmax_grad", x, g, np.float16, mask)))
    assert np.isnan(got[:, 0].astype(np.float64)).all() and not np.signbit(got[:, 1].astype(np.float64)).any()
    assert (got[:, 1] == 0).all()
