"""The cross-entropy reference against mpmath at 400 bits, rounded by mpmath: every option, every dtype, the hard
rows (confident targets, large offsets, -inf lanes, all-equal logits), and the conventions (ignored rows, empty
means)."""

import ml_dtypes
import mpmath
import numpy as np
import pytest

from softaudit import reference

DTYPES = {np.float16: 11, ml_dtypes.bfloat16: 8, np.float32: 24, np.float64: 53}


def _rounded(value, dtype):
    """An mpmath value correctly rounded to dtype's precision (normal range), by mpmath, as a dtype scalar."""
    with mpmath.workprec(DTYPES[dtype]):
        return np.array(float(+value)).astype(dtype)


def _z(xs, cap):
    return [v if cap is None or v == -mpmath.inf else cap * mpmath.tanh(v / cap) for v in xs]


def _mp_loss(row, y, eps=0.0, zl=0.0, cap=None):
    with mpmath.workprec(400):
        z = _z([mpmath.mpf(float(v)) for v in row], cap)
        kept = [v for v in z if v != -mpmath.inf]
        lse = mpmath.log(mpmath.fsum(mpmath.exp(v) for v in kept))
        smooth = mpmath.fsum(lse - v for v in z) / len(z) if eps else 0
        return (1 - mpmath.mpf(eps)) * (lse - z[y]) + mpmath.mpf(eps) * smooth + mpmath.mpf(zl) * lse**2


def _mp_grad(row, y, w, eps=0.0, zl=0.0, cap=None):
    with mpmath.workprec(400):
        xs = [mpmath.mpf(float(v)) for v in row]
        z = _z(xs, cap)
        total = mpmath.fsum(mpmath.exp(v) for v in z if v != -mpmath.inf)
        lse = mpmath.log(total)
        out = []
        for j, v in enumerate(z):
            p = 0 if v == -mpmath.inf else mpmath.exp(v) / total
            q = (1 - mpmath.mpf(eps)) * (j == y) + mpmath.mpf(eps) / len(z)
            d = mpmath.mpf(w) * ((1 + 2 * mpmath.mpf(zl) * lse) * p - q)
            if cap is not None and xs[j] != -mpmath.inf:
                d *= mpmath.sech(xs[j] / cap) ** 2
            out.append(d)
        return out


OPTIONS = [
    {},
    {"label_smoothing": 0.1},
    {"z_loss": 1e-4},
    {"softcap": 5.0},
    {"label_smoothing": 0.25, "z_loss": 1e-3, "softcap": 3.0},
]


def _rows(dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 37)) * 3
    x[1, 5] = 40.0  # a confident row: loss about 1e-16
    x[2] += 1e3 if dtype != np.float16 else 1e2  # a large offset
    x[3, :] = x[3, 0]  # all equal: p = 1/37, a rational gradient
    return x.astype(dtype), np.array([2, 5, 7, 0])


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "plain")
@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: np.dtype(d).name)
def test_loss_is_mpmaths_correctly_rounded(dtype, options):
    x, t = _rows(dtype)
    got = reference.cross_entropy(x, t, dtype=dtype, **options)
    o = {"eps": options.get("label_smoothing", 0.0), "zl": options.get("z_loss", 0.0), "cap": options.get("softcap")}
    want = [_rounded(_mp_loss(x[i].astype(np.float64), t[i], **o), dtype) for i in range(len(x))]
    assert got.dtype == np.dtype(dtype)
    assert [v.tobytes() for v in got] == [v.tobytes() for v in want]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "plain")
@pytest.mark.parametrize(
    "dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64], ids=lambda d: np.dtype(d).name
)
def test_gradient_is_mpmaths_correctly_rounded(dtype, options):
    x, t = _rows(dtype, seed=1)
    g = np.array([1.0, -0.75, 3.0, 0.5])
    got = reference.cross_entropy_grad(x, t, g, dtype=dtype, **options)
    o = {"eps": options.get("label_smoothing", 0.0), "zl": options.get("z_loss", 0.0), "cap": options.get("softcap")}
    normal = float(ml_dtypes.finfo(dtype).smallest_normal)
    checked = 0
    for i in range(len(x)):
        exact = _mp_grad(x[i].astype(np.float64), t[i], g[i], **o)
        for j, v in enumerate(exact):
            if abs(v) >= normal:  # (mpmath rounds to a precision, not into a subnormal range)
                assert got[i, j].tobytes() == _rounded(v, dtype).tobytes(), (i, j)
                checked += 1
    assert checked > 100


def test_the_confident_rows_loss_keeps_its_digits():
    """p_y = 1 - 1e-30: the loss is about 1e-30 (lse - x_y cancels to the last of 100 digits), correctly rounded."""
    x = np.zeros((1, 4))
    x[0, 0] = np.log(3e30)
    got = reference.cross_entropy(x, np.array([0]), dtype=np.float64)
    assert got[0] == _rounded(_mp_loss(x[0], 0), np.float64)
    assert 0.9e-30 < got[0] < 1.1e-30
    dx = reference.cross_entropy_grad(x, np.array([0]), np.ones(1), dtype=np.float64)
    assert dx[0, 0] == _rounded(_mp_grad(x[0], 0, 1.0)[0], np.float64) and -1.1e-30 < dx[0, 0] < -0.9e-30


def test_all_equal_logits_give_the_rational_gradient_exactly():
    """p = 1/k: dx = g (1/k - q), exactly representable here."""
    x = np.zeros((1, 4), np.float32)
    dx = reference.cross_entropy_grad(x, np.array([1]), np.array([2.0]), dtype=np.float32)
    assert dx.tolist() == [[0.5, -1.5, 0.5, 0.5]]
    smoothed = reference.cross_entropy_grad(x, np.array([1]), np.array([1.0]), dtype=np.float64, label_smoothing=0.5)
    assert smoothed.tolist() == [[0.25 - 0.125, 0.25 - 0.625, 0.25 - 0.125, 0.25 - 0.125]]


def test_ignored_rows_and_the_reductions():
    x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
    per_row = reference.cross_entropy(x, np.array([0, 2]), dtype=np.float64)
    ignored = reference.cross_entropy(x, np.array([-100, 2]), dtype=np.float64)
    assert ignored[0] == 0.0 and ignored[1] == per_row[1]
    mean = reference.cross_entropy(x, np.array([-100, 2]), dtype=np.float64, reduction="mean")
    assert mean == per_row[1]  # the mean over the one row not ignored
    total = reference.cross_entropy(x, np.array([0, 2]), dtype=np.float64, reduction="sum")
    assert total == _rounded(_mp_loss(x[0], 0) + _mp_loss(x[1], 2), np.float64)
    none = np.array([-100, -100])
    assert np.isnan(reference.cross_entropy(x, none, dtype=np.float64, reduction="mean"))  # a mean of nothing
    assert reference.cross_entropy(x, none, dtype=np.float64, reduction="sum") == 0.0
    dx = reference.cross_entropy_grad(x, np.array([-100, 2]), np.array(1.0), dtype=np.float64, reduction="mean")
    assert (dx[0] == 0).all() and not np.signbit(dx[0]).any()
    assert (
        dx[1].tolist() == reference.cross_entropy_grad(x[1:], np.array([2]), np.ones(1), dtype=np.float64).tolist()[0]
    )


def test_minus_inf_lanes_are_outside_the_vocabulary_even_under_a_softcap():
    """A -inf logit is padding: it takes no probability (unsloth PR #10616 gave it c tanh(-inf) = -c), so padding a
    row with -inf lanes changes nothing; the loss is +inf when the target is one, or when smoothing reaches one."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 10)) * 20
    padded = np.concatenate([x, np.full((2, 6), -np.inf)], axis=1)
    t = np.array([1, 4])
    for cap in (None, 30.0):
        assert (
            reference.cross_entropy(padded, t, dtype=np.float32, softcap=cap).tolist()
            == reference.cross_entropy(x, t, dtype=np.float32, softcap=cap).tolist()
        )
        dx = reference.cross_entropy_grad(padded, t, np.ones(2), dtype=np.float32, softcap=cap)
        assert (dx[:, 10:] == 0).all()
    assert reference.cross_entropy(padded, np.array([1, 12]), dtype=np.float32)[1] == np.inf
    assert (reference.cross_entropy(padded, t, dtype=np.float32, label_smoothing=0.1) == np.inf).all()


def test_undefined_rows_are_nan_and_mistakes_are_one_line():
    x = np.array([[1.0, np.nan], [1.0, 2.0], [-np.inf, -np.inf]])
    got = reference.cross_entropy(x, np.array([0, 1, 0]), dtype=np.float32)
    assert np.isnan(got[0]) and np.isfinite(got[1]) and np.isnan(got[2])
    with pytest.raises(ValueError, match="reduction"):
        reference.cross_entropy(x, np.array([0, 1, 0]), dtype=np.float32, reduction="avg")
    with pytest.raises(ValueError, match="outside"):
        reference.cross_entropy(x, np.array([0, 2, 0]), dtype=np.float32)
    with pytest.raises(ValueError, match="integer targets"):
        reference.cross_entropy(x, np.array([0.0, 1.0, 0.0]), dtype=np.float32)


def test_logits_spanning_float64s_range_give_the_loss_without_an_exact_sum_too_long_to_hold():
    """A row whose logits span 1.7e308 (found by the hunt): 1 + e**(x_j - max) with x_j - max near -1.7e308 has an
    exact sum of about 2**1000 bits, which raised OverflowError; the losses come from mpmath at 200 bits here."""
    x = np.array([[-0.0, 709.78, 1.7e308, -1.97e36, -1.97e36, 3.0]])
    for target, eps in ((1, 0.0), (1, 0.1), (2, 0.0), (2, 0.1)):
        with mpmath.workprec(200):
            xs, e = [mpmath.mpf(v) for v in x[0]], mpmath.mpf(eps)
            lse = max(xs) + mpmath.log(mpmath.fsum(mpmath.exp(v - max(xs)) for v in xs))
            q = [e / len(xs) + ((1 - e) if j == target else 0) for j in range(len(xs))]
            want = float(mpmath.fsum(qj * (lse - v) for qj, v in zip(q, xs)))
        got = reference.cross_entropy(x, np.array([target]), dtype="float64", label_smoothing=eps)
        assert got[0] == want, (target, eps, got, want)
