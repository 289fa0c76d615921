"""cross_entropy's and cross_entropy_grad's conditioning scales against central differences of the exact functions
in mpmath at 120 digits: sum_k |d r / d x_k| |x_k| read from the scale equals the differences' (without options:
exactly the formula; with them, the formula bounds it from above and stays within 2x). The gradient's scale at the
target holds more: the standard algorithms' roundings of p_j and q_j in their working precision, taken out here."""

import mpmath
import numpy as np
import pytest

from softaudit import kinds

H = mpmath.mpf(10) ** -40


def _loss(xs, y, eps, zl):
    lse = mpmath.log(mpmath.fsum(mpmath.exp(v) for v in xs))
    return (1 - eps) * (lse - xs[y]) + eps * mpmath.fsum(lse - v for v in xs) / len(xs) + zl * lse**2


def _grad(xs, y, eps, zl, j, w):
    total = mpmath.fsum(mpmath.exp(v) for v in xs)
    lse = mpmath.log(total)
    q = (1 - eps) * (j == y) + eps / len(xs)
    return w * ((1 + 2 * zl * lse) * mpmath.exp(xs[j]) / total - q)


def _sensitivity(f, row):
    """sum_k |d f / d x_k| |x_k| by central differences at 120 digits."""
    with mpmath.workdps(120):
        xs = [mpmath.mpf(float(v)) for v in row]
        total = 0
        for k in range(len(xs)):
            up, down = list(xs), list(xs)
            up[k] += H
            down[k] -= H
            total += abs((f(up) - f(down)) / (2 * H)) * abs(xs[k])
        return float(total)


def _case(kind, x, t, g=None, **options):
    from softaudit.reference import evaluate_cross_entropy, evaluate_cross_entropy_grad

    inputs = {"logits": x, "target": t} | ({} if g is None else {"g": g})
    k = kinds.get(kind)
    if g is None:
        ref = evaluate_cross_entropy(x, t, dtype=np.float64, **options)
    else:
        ref = evaluate_cross_entropy_grad(x, t, g, dtype=np.float64, **options)
    (extra,) = k.conditioning(k, inputs, None, (ref,), **options)
    return ref, extra["scale"]


@pytest.mark.parametrize("eps, zl", [(0.0, 0.0), (0.1, 0.0), (0.0, 1e-2)])
def test_the_loss_scale_is_its_sensitivity_to_the_logits(eps, zl):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 6)) * 3
    x[1, 2] = 12.0  # a confident row
    t = np.array([0, 2, 5])
    ref, scale = _case("cross_entropy", x, t, label_smoothing=eps, z_loss=zl)
    for i in range(3):
        with mpmath.workdps(120):
            lse = float(mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(float(v))) for v in x[i])))
        inputs_part = scale[i] - abs(ref.hi[i]) - 1 - abs(2 * zl * lse)
        fd = _sensitivity(lambda xs, i=i: _loss(xs, t[i], mpmath.mpf(eps), mpmath.mpf(zl)), x[i])
        if eps == 0:
            assert inputs_part == pytest.approx(fd, rel=1e-9)
        else:  # |sum| <= sum of |terms|: the smoothing's terms of both signs
            assert fd * (1 - 1e-9) <= inputs_part <= 2 * fd + 1e-12


@pytest.mark.parametrize("eps, zl", [(0.0, 0.0), (0.1, 0.0), (0.0, 1e-2)])
def test_the_gradient_scale_bounds_its_sensitivity_to_the_logits(eps, zl):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 5)) * 2
    x[1, 3] = 10.0  # a confident row: 1 - p_y about 2e-4
    t = np.array([1, 3])
    g = np.array([1.5, -0.5])
    ref, scale = _case("cross_entropy_grad", x, t, g, label_smoothing=eps, z_loss=zl)
    for i in range(2):
        with mpmath.workdps(60):
            xs = [mpmath.mpf(float(v)) for v in x[i]]
            total = mpmath.fsum(mpmath.exp(v) for v in xs)
            p = [float(mpmath.exp(v) / total) for v in xs]
            lse = float(mpmath.log(total))
        for j in range(5):
            fd = _sensitivity(lambda xs, i=i, j=j: _grad(xs, t[i], mpmath.mpf(eps), mpmath.mpf(zl), j, g[i]), x[i])
            inputs_part = scale[i, j] - abs(ref.hi[i, j])
            # float64: the standard algorithms' roundings of p_j and q_j, u (|1 + 2 zl lse| p_j + |q_j|) |w|
            q_j = eps / 5 + (1 - eps) * (j == t[i]) if eps else 0.0
            inputs_part -= abs(g[i]) * (p[j] * abs(1 + 2 * zl * lse) + q_j)
            if zl == 0:
                assert inputs_part == pytest.approx(fd, rel=1e-9), (i, j)
            else:
                assert fd * (1 - 1e-9) <= inputs_part <= 3 * fd, (i, j)
