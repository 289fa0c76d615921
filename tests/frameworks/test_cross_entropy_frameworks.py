"""torch's and JAX's (optax's) cross-entropy and its gradient against the exact reference: no error rows, and each
fail is one checked here outside softaudit (the framework called directly, the exact value by mpmath)."""

import sys

import ml_dtypes
import mpmath
import numpy as np
import pytest

import softaudit
from softaudit.worst import case_of

# The rows that fail on the quick suite, each checked below by `test_each_fail_is_real_outside_softaudit`: on the
# CPU both frameworks form a bfloat16 row's p in bfloat16 before subtracting 1, which rounds p_y = 0.999 (and
# 1 - 1e-5) to 1: a zero gradient for the true class (Liger-Kernel PR #1329's bug). float64's exp(log p_y) - 1
# cancels too, but that is the standard algorithms' own rounding of p_y (in the scale: a warn), and optax's float32
# loss lse - x_y (1e-6 to 0 at lse's spacing) is the standard lse_minus_target's (a warn).
VERIFIED_FAILS = {
    ("torch", "cross_entropy_grad", "bfloat16", "ce_confident"),
    ("torch", "cross_entropy_grad", "bfloat16", "ce_confident_deep"),
    ("jax", "cross_entropy_grad", "bfloat16", "ce_confident"),
    ("jax", "cross_entropy_grad", "bfloat16", "ce_confident_deep"),
}


def _needs(framework):
    pytest.importorskip(framework)
    if framework == "jax":
        pytest.importorskip("optax")


def _audit(framework, kind, dtypes, families=None):
    target = f"softaudit.frameworks.{framework}:{kind}"
    return softaudit.audit(target, dtypes=dtypes, suite="quick", families=families, isolation="none", cache_dir=None)


def _judged(framework, kind, dtypes):
    table = _audit(framework, kind, dtypes).table
    assert set(table.verdict) <= {"pass", "warn", "fail"}, table[table.verdict.isin(["error", "skip"])].note.tolist()
    fails = {(framework, kind, r.dtype, r.family) for r in table.itertuples() if r.verdict == "fail"}
    assert fails <= VERIFIED_FAILS, fails - VERIFIED_FAILS


@pytest.mark.parametrize("kind", ["cross_entropy", "cross_entropy_grad"])
def test_torch_runs_every_family_and_fails_only_where_checked(kind):
    _needs("torch")
    _judged("torch", kind, ["float32", "bfloat16", "float64"])


# (one test per dtype: JAX compiles each op for each shape, about 15 s an audit on 2 cores)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", ["cross_entropy", "cross_entropy_grad"])
def test_jax_runs_every_family_and_fails_only_where_checked(kind, dtype):
    _needs("jax")
    _judged("jax", kind, [dtype])


def test_jax_without_optax_is_a_skip_row_saying_how_to_install_it(monkeypatch):
    pytest.importorskip("jax")
    monkeypatch.setitem(sys.modules, "optax", None)  # (import optax then raises ImportError)
    table = _audit("jax", "cross_entropy", ["float32"], ["ce_gaussian"]).table
    assert (table.verdict == "skip").all() and table.note.str.contains("pip install 'softaudit\\[jax\\]'").all()


# --------------------------------------------------------------------------------- checks outside softaudit


def _exact(x, y, g, j):
    """The loss (j None) or dlogits[j] of one row, by mpmath at 50 digits: lse - x_y, g p_j, or -g (1 - p_y) as
    the sum of the others."""
    with mpmath.workdps(50):
        xs = [mpmath.mpf(float(v)) for v in x]
        m = max(xs)
        e = [mpmath.exp(v - m) for v in xs]
        s = mpmath.fsum(e)
        if j is None:
            return float(m + mpmath.log(s) - xs[y])
        share = -mpmath.fsum(e[:y] + e[y + 1 :]) if j == y else e[j]
        return float(mpmath.mpf(float(g)) * share / s)


def _torch_direct(x, t, g, grad):
    import torch
    import torch.nn.functional as F

    bf16 = x.dtype == ml_dtypes.bfloat16
    tx = torch.from_numpy(x.astype(np.float32) if bf16 else x)
    tx = tx.to(torch.bfloat16) if bf16 else tx
    loss = F.cross_entropy(tx.requires_grad_(grad), torch.from_numpy(t), reduction="none")
    out = torch.autograd.grad(loss, tx, torch.from_numpy(g.astype(np.float64)).to(tx.dtype))[0] if grad else loss
    return out.detach().double().numpy()


def _jax_direct(x, t, g, grad):
    import jax
    import jax.numpy as jnp
    import optax

    x64 = jax.enable_x64(True) if hasattr(jax, "enable_x64") else jax.experimental.enable_x64()
    with x64:
        f = lambda z: optax.losses.softmax_cross_entropy_with_integer_labels(z, jnp.asarray(t))  # noqa: E731
        if not grad:
            return np.asarray(f(jnp.asarray(x))).astype(np.float64)
        _, pullback = jax.vjp(f, jnp.asarray(x))
        return np.asarray(pullback(jnp.asarray(g))[0]).astype(np.float64)


@pytest.mark.parametrize("framework, kind, dtype, family", sorted(VERIFIED_FAILS))
def test_each_fail_is_real_outside_softaudit(framework, kind, dtype, family):
    """The failing row's worst element again: the framework called directly on the case (rounded by ml_dtypes) gives
    the audit's output, and mpmath's exact value is as many ulps away as the audit says."""
    _needs(framework)
    result = _audit(framework, kind, [dtype], [family])
    (row,) = result.table.itertuples()
    assert row.verdict == "fail"
    (worst,) = result.worst_inputs.values() if isinstance(result.worst_inputs, dict) else result.worst_inputs
    record = worst.as_json()
    case = case_of(record)
    np_dtype = np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    x, t = case.arrays["logits"].astype(np_dtype), case.arrays["target"]
    grad = kind == "cross_entropy_grad"
    g = case.arrays["g"].astype(np_dtype) if grad else None
    out = (_torch_direct if framework == "torch" else _jax_direct)(x, t, g, grad)
    position = tuple(record["element"])
    i, y = position[0], int(t[position[0]])
    got = out[position]
    assert got == float.fromhex(record["output"])  # what the audit saw
    exact = _exact(x[i].astype(np.float64), y, None if g is None else g[i], position[1] if grad else None)
    ulps = abs(got - exact) / float(np.spacing(np.array(abs(exact), np_dtype)))
    assert ulps == pytest.approx(record["ulp_err"], rel=1e-3)
    assert ulps > 100
    # ... and avoidable: 1 - p_y as the sum of the others (pairwise, in float64 on the same inputs) is near exact
    xs = x[i].astype(np.float64)
    e = np.exp(xs - xs.max())
    others = np.delete(e, y).sum()
    cancel_free = -float(g[i]) * others / e.sum() if grad else xs.max() - xs[y] + np.log1p(others)
    if grad and position[1] != y:
        cancel_free = float(g[i]) * e[position[1]] / e.sum()
    assert abs(cancel_free - exact) <= 64 * np.spacing(abs(exact))


# ------------------------------------------------------------------------------------------- direct checks

ROWS, VOCAB = 6, 50
OPTIONS = [
    {},
    {"label_smoothing": 0.1},
    {"z_loss": 1e-3, "softcap": 5.0},
    {"label_smoothing": 0.1, "z_loss": 1e-3, "softcap": 5.0},
]


def _rows():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((ROWS, VOCAB)) * 3
    t = rng.integers(0, VOCAB, ROWS)
    t[[1, 4]] = -100
    return x, t


@pytest.mark.parametrize("options", OPTIONS)
def test_torch_mean_over_the_rows_not_ignored_matches_the_reference_in_float64(options):
    torch = pytest.importorskip("torch")
    from softaudit.frameworks.torch import cross_entropy, cross_entropy_grad

    x, t = _rows()
    got = cross_entropy(torch.from_numpy(x), torch.from_numpy(t), reduction="mean", **options)
    want = softaudit.reference.cross_entropy(x, t, dtype=np.float64, reduction="mean", **options)
    assert got.dtype == torch.float64 and got.shape == ()
    assert abs(float(got) - want) <= 4 * np.spacing(abs(want))
    dx = cross_entropy_grad(
        torch.from_numpy(x), torch.from_numpy(t), torch.tensor(1.0, dtype=torch.float64), reduction="mean", **options
    )
    want_dx = softaudit.reference.cross_entropy_grad(x, t, np.array(1.0), dtype=np.float64, reduction="mean", **options)
    assert dx.dtype == torch.float64 and not dx[[1, 4]].any()  # ignored rows: no gradient
    np.testing.assert_allclose(dx.numpy(), want_dx, rtol=1e-13, atol=1e-17)


@pytest.mark.parametrize("options", OPTIONS)
def test_jax_mean_over_the_rows_not_ignored_matches_the_reference_in_float64(options):
    _needs("jax")
    from softaudit.adapters import _bridge
    from softaudit.frameworks.jax import cross_entropy, cross_entropy_grad

    x, t = _rows()
    with _bridge.context("jax"):
        logits, target = _bridge.to_jax(x, None), _bridge.to_jax(t, None)
        got = np.asarray(cross_entropy(logits, target, reduction="mean", **options))
        dx = np.asarray(
            cross_entropy_grad(logits, target, _bridge.to_jax(np.array(1.0), None), reduction="mean", **options)
        )
    want = softaudit.reference.cross_entropy(x, t, dtype=np.float64, reduction="mean", **options)
    assert got.dtype == np.float64 and got.shape == ()
    assert abs(float(got) - want) <= 4 * np.spacing(abs(want))
    want_dx = softaudit.reference.cross_entropy_grad(x, t, np.array(1.0), dtype=np.float64, reduction="mean", **options)
    assert not dx[[1, 4]].any()
    np.testing.assert_allclose(dx, want_dx, rtol=1e-13, atol=1e-17)


def test_a_padded_lane_at_minus_inf_stays_out_under_a_softcap():
    """Gemma 2's tanh(x / c) * c would make a -inf lane -c and give it probability; the candidates cap the finite
    logits only, as the kind says."""
    torch = pytest.importorskip("torch")
    from softaudit.frameworks.torch import cross_entropy

    x, t = _rows()
    padded = np.concatenate([x, np.full((ROWS, 14), -np.inf)], axis=1)
    got = cross_entropy(torch.from_numpy(padded), torch.from_numpy(t), softcap=5.0).numpy()
    want = softaudit.reference.cross_entropy(x, t, dtype=np.float64, softcap=5.0)
    np.testing.assert_allclose(got, want, rtol=1e-14)
