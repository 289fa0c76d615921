"""The backward built-ins against float64 VJPs computed here (tests/gradients/oracle.py) and mpmath, their documented
weaknesses, and their bits under other CPU code paths."""

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from softaudit.adapters._candidate import marking
from softaudit.adapters._targets import load_target
from softaudit.candidates import attention_grad, log_softmax_grad, logsumexp_grad, masked_softmax_grad, softmax_grad
from softaudit.kinds import KINDS

from . import oracle as O

MODULES = (softmax_grad, log_softmax_grad, logsumexp_grad, masked_softmax_grad, attention_grad)
DTYPES = {"float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
#: Unit roundoff per dtype.
U = {name: float(ml_dtypes.finfo(dtype).eps) / 2 for name, dtype in DTYPES.items()}
ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(20250612)


def builtins():
    return [c for module in MODULES for c in load_target(module.__name__)]


def named(name):
    return next(c for c in builtins() if c.name == name).call


def test_each_module_names_its_plain_standard_and_best_builtins_and_marks_them_with_its_kind():
    for module in MODULES:
        kind = module.__name__.rsplit(".", 1)[1]
        found = {c.name: c for c in load_target(module.__name__)}
        assert {c.kind for c in found.values()} == {kind}
        entry = KINDS[kind]  # the registry names the comparisons
        assert entry.plain == entry.standard[0]
        assert set(entry.standard) | {entry.best} <= set(found)
        for c in found.values():  # "what it does. Weakness: the mechanism"
            assert marking(c.call).kind == kind and c.name.startswith(kind + ".")
            assert c.summary and "Weakness:" in c.call.__doc__


# --- accuracy against float64 VJPs ---------------------------------------------------------------------------


def _rows_case(kind, dtype):
    x = (RNG.standard_normal((16, 128)) * 3).astype(dtype)
    g = RNG.standard_normal((16, 128)).astype(dtype)
    if kind == "logsumexp_grad":
        g = g[:, 0]
    mask = RNG.random((16, 128)) < 0.6
    mask[:, 0] = True
    mask[5] = False
    return x, mask, g


def _exact(kind, x, mask, g):
    return {
        "softmax_grad": lambda: O.softmax_vjp(x, g),
        "log_softmax_grad": lambda: O.log_softmax_vjp(x, g),
        "logsumexp_grad": lambda: O.logsumexp_vjp(x, g),
        "masked_softmax_grad": lambda: O.softmax_vjp(x, g, mask),
    }[kind]()


def _call(c, x, mask, g, axis=-1):
    return c.call(x, mask, g, axis=axis) if c.kind == "masked_softmax_grad" else c.call(x, g, axis=axis)


def _allowed(best, dtype, few=8):
    """Normwise error allowed: the best practice rounds a 16-bit result once (about u/2 per entry); everything else
    rounds a few times in the dtype; in float64 the oracle's own rounding counts as much."""
    if best and dtype in ("float16", "bfloat16"):
        return U[dtype]
    return (2 * few if dtype == "float64" else few) * U[dtype]


ROW_BUILTINS = [c for c in builtins() if c.kind != "attention_grad"]
BEST = {KINDS[m.__name__.rsplit(".", 1)[1]].best for m in MODULES}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "c", [c for c in ROW_BUILTINS if c.name != "masked_softmax_grad.fill_neginf"], ids=lambda c: c.name
)
def test_row_builtins_match_the_float64_vjp_within_a_few_units_of_the_dtype(c, dtype):
    x, mask, g = _rows_case(c.kind, DTYPES[dtype])
    got = _call(c, x, mask, g)
    assert got.dtype == x.dtype and got.shape == x.shape
    error = O.normwise(got, _exact(c.kind, x, mask, g))
    assert error <= _allowed(c.name in BEST, dtype), f"{error:.3g} = {error / U[dtype]:.2f} u"
    if c.kind == "masked_softmax_grad":  # exactly 0 where masked, and on the fully masked row
        assert (got[~mask] == 0).all()


@pytest.mark.parametrize("c", ROW_BUILTINS, ids=lambda c: c.name)
def test_row_builtins_take_the_axis_argument(c):
    x, mask, g = _rows_case(c.kind, np.float32)
    mask[5] = True  # (fill_neginf's NaN row aside)
    along_rows = _call(c, x, mask, g)
    if c.kind == "logsumexp_grad":
        assert np.array_equal(c.call(x.T, g, axis=0), along_rows.T)
        assert np.array_equal(c.call(x[None], g[None], axis=2), along_rows[None])
    else:
        assert np.array_equal(_call(c, x.T, mask.T, g.T, axis=0), along_rows.T)


@pytest.mark.parametrize("c", [c for c in ROW_BUILTINS if c.kind != "masked_softmax_grad"], ids=lambda c: c.name)
def test_float64_row_builtins_agree_with_mpmath_within_their_componentwise_bounds(c):
    x = np.array([[10.0, 0.0, -5.0, 1.0], [1000.0, 1001.0, 999.0, 1000.5], [-3.0, -2.5, -40.0, 0.25]])
    g = np.array([[1.0, -2.0, 0.5, 3.0], [0.1, 0.2, -0.3, 0.4], [-1.0, 2.0, 7.0, 0.0]])
    p = np.array([_mp_softmax(row) for row in x])
    # p carries a relative error of a few u times (1 + |x - max|) (from_logp: exp of a rounded logp), and
    # (1 + |x|) where it is exp(x - lse) of a rounded lse (exp_minus_lse)
    spread = 1 + np.abs(x - x.max(-1, keepdims=True)) + (np.abs(x) if c.name.endswith("exp_minus_lse") else 0)
    if c.kind == "softmax_grad":
        exact = np.array([O.mp_softmax_vjp(row, grad) for row, grad in zip(x, g)])
        got = c.call(x, g)
        bound = p * spread * (np.abs(g) + (np.abs(g) * p).sum(-1, keepdims=True))
    elif c.kind == "log_softmax_grad":
        exact = np.array([_mp_log_softmax_vjp(row, grad) for row, grad in zip(x, g)])
        got = c.call(x, g)
        bound = np.abs(g) + p * spread * np.abs(g).sum(-1, keepdims=True)
    else:
        exact = p * g[:, :1]
        got = c.call(x, g[:, 0])
        bound = p * spread * np.abs(g[:, :1])
    assert (np.abs(got - exact) <= 8 * U["float64"] * bound).all()


def _mp_softmax(row):
    import mpmath

    with mpmath.workdps(50):
        e = [mpmath.exp(mpmath.mpf(float(t)) - max(row)) for t in row]
        total = mpmath.fsum(e)
        return np.array([float(t / total) for t in e])


def _mp_log_softmax_vjp(row, grad):
    import mpmath

    with mpmath.workdps(50):
        e = [mpmath.exp(mpmath.mpf(float(t)) - max(row)) for t in row]
        total = mpmath.fsum(e)
        s = mpmath.fsum(mpmath.mpf(float(t)) for t in grad)
        return np.array([float(mpmath.mpf(float(gi)) - ei / total * s) for gi, ei in zip(grad, e)])


def test_the_float64_oracle_agrees_with_central_differences_of_the_forwards():
    x, g = RNG.standard_normal((2, 6)) * 2, RNG.standard_normal((2, 6))
    mask = np.array([[True, False, True, True, False, True]] * 2)
    assert np.allclose(O.softmax_vjp(x, g), O.central_difference(O.softmax, x, g), atol=1e-8)
    assert np.allclose(O.softmax_vjp(x, g, mask), O.central_difference(lambda t: O.softmax(t, mask), x, g), atol=1e-8)

    def log_softmax(t):
        return t - t.max(-1, keepdims=True) - np.log(np.exp(t - t.max(-1, keepdims=True)).sum(-1, keepdims=True))

    assert np.allclose(O.log_softmax_vjp(x, g), O.central_difference(log_softmax, x, g), atol=1e-8)

    def lse(t):
        return np.log(np.exp(t).sum(-1))

    assert np.allclose(O.logsumexp_vjp(x, g[:, 0]), O.central_difference(lse, x, g[:, 0]), atol=1e-8)
    q, k, v, do = (
        RNG.standard_normal((3, 4)),
        RNG.standard_normal((5, 4)),
        RNG.standard_normal((5, 2)),
        RNG.standard_normal((3, 2)),
    )
    amask = RNG.random((3, 5)) < 0.6
    amask[:, 0], amask[2] = True, False
    dq, dk, dv = O.attention_vjp(q, k, v, do, amask)

    def out(q_, k_, v_):
        return O.attention(q_, k_, v_, amask)[0]

    assert np.allclose(dq, O.central_difference(lambda t: out(t, k, v), q, do), atol=1e-8)
    assert np.allclose(dk, O.central_difference(lambda t: out(q, t, v), k, do), atol=1e-8)
    assert np.allclose(dv, O.central_difference(lambda t: out(q, k, t), v, do), atol=1e-8)
    assert (dq[2] == 0).all()


def _attention_case(dtype, lk=200, d=64, batch=(2,), masked=True):
    q, k, v = (RNG.standard_normal(batch + (n, d)) for n in (16, lk, lk))
    g = RNG.standard_normal(batch + (16, d))
    mask = None
    if masked:
        mask = RNG.random((16, lk)) < 0.7
        mask[:, 0], mask[3] = True, False
    return [a.astype(dtype) for a in (q, k, v, g)], mask


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["attention_grad.upcast", "attention_grad.flash2_b64", "attention_grad.naive"])
def test_attention_builtins_match_the_float64_vjp(name, dtype):
    for masked in (False, True):
        if masked and name == "attention_grad.naive":
            continue  # its fully masked row is NaN: test_naive_attention_backward_...
        inputs, mask = _attention_case(DTYPES[dtype], masked=masked)
        got = named(name)(*inputs, mask=mask)
        exact = O.attention_vjp(*inputs, mask=mask)
        for grad, ref, a in zip(got, exact, inputs[:3]):
            assert grad.dtype == a.dtype and grad.shape == a.shape
            error = O.normwise(grad, ref)
            assert error <= _allowed(name == "attention_grad.upcast", dtype)
        if masked:
            assert (got[0][..., 3, :] == 0).all()  # no key to attend: no gradient


def test_attention_builtins_sum_gradients_over_broadcast_batch_axes():
    q = RNG.standard_normal((2, 3, 5, 8))
    k, v = RNG.standard_normal((1, 7, 8)), RNG.standard_normal((3, 7, 4))
    g = RNG.standard_normal((2, 3, 5, 4))
    kb, vb = np.broadcast_to(k, (2, 3, 7, 8)), np.broadcast_to(v, (2, 3, 7, 4))
    dq, dk, dv = O.attention_vjp(q, kb, vb, g)
    for name in ("attention_grad.naive", "attention_grad.upcast", "attention_grad.flash2_b64"):
        got = named(name)(q, k, v, g)
        assert [a.shape for a in got] == [q.shape, k.shape, v.shape]
        assert np.allclose(got[1], dk.sum(axis=(0, 1))[None], atol=1e-12)
        assert np.allclose(got[2], dv.sum(axis=0), atol=1e-12)
        assert np.allclose(got[0], dq, atol=1e-12)


def _family_cases(family, dtype):
    """A family's attention_grad cases as the audit runs them: inputs rounded to the dtype, the reference's shapes."""
    from softaudit.cases import FAMILIES
    from softaudit.reference import format_of
    from softaudit.runner import Prepared

    fmt = format_of(dtype)
    return [Prepared(case, fmt, i) for i, case in enumerate(FAMILIES[family].cases("attention_grad", fmt, "default"))]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_attention_builtins_sum_shared_kv_heads_in_their_own_precision(dtype):
    """On attn_broadcast_kv (one K/V head for 4 query heads; 2 K/V heads of 3, causal), through the audit's call
    path: dk and dv have k's and v's shapes, the reference's; a shared head's gradient is what each built-in says:
    naive adds the heads' dtype gradients pairwise in the dtype, flash2_b64 adds them in float32 from their dtype
    values (FA2's dk_expanded and at::sum_out), upcast adds float32 gradients and rounds once (within an ulp of
    the correctly rounded sum)."""
    from softaudit.adapters._call import call_all
    from softaudit.candidates._ops import dtype_sum

    found = {c.name: c for c in builtins()}
    for pc in _family_cases("attn_broadcast_kv", dtype):
        q, k, v, g = (pc.inputs[n] for n in "qkv" + "g")
        heads = [i for i, n in enumerate(k.shape[:-2]) if n == 1 and q.shape[i] != 1]
        assert heads, "the family's K and V are shared"
        ek, ev = (np.broadcast_to(a, q.shape[:-2] + a.shape[-2:]).copy() for a in (k, v))
        refs = [r.value.astype(np.float64) for r in pc.references]
        for name in ("attention_grad.naive", "attention_grad.flash2_b64", "attention_grad.upcast"):
            got, _ = call_all(found[name], pc.inputs, pc.mask, pc.output_shapes, q.dtype, timeout=None)
            assert [a.shape for a in got] == [q.shape, k.shape, v.shape] == list(pc.output_shapes)
            per_head = found[name].call(q, ek, ev, g, mask=pc.mask)
            np.testing.assert_array_equal(got[0], per_head[0])  # dq: each query head's own
            for dgot, head_grads, ref in zip(got[1:], per_head[1:], refs[1:]):
                moved = np.moveaxis(head_grads, heads, [-1])  # (one shared axis in this family)
                if name == "attention_grad.naive":
                    want = dtype_sum(moved)
                elif name == "attention_grad.flash2_b64":
                    want = dtype_sum(moved.astype(np.float32)).astype(q.dtype)
                else:
                    ulp = np.spacing(np.abs(ref).astype(q.dtype)).astype(np.float64)
                    assert (np.abs(dgot.astype(np.float64) - ref) <= ulp).all()
                    continue
                np.testing.assert_array_equal(dgot, np.moveaxis(want, -1, heads[0]).reshape(dgot.shape))


# --- the documented weaknesses ---------------------------------------------------------------------------------


def test_fill_neginf_gives_nan_on_a_fully_masked_row_where_gives_exact_zeros():
    x, mask, g = _rows_case("masked_softmax_grad", np.float32)
    assert np.isnan(masked_softmax_grad.fill_neginf(x, mask, g)[5]).all()
    others = np.arange(16) != 5
    assert np.isfinite(masked_softmax_grad.fill_neginf(x, mask, g)[others]).all()
    for fn in (masked_softmax_grad.where, masked_softmax_grad.where_in_dtype):
        got = fn(x, mask, g)
        assert (got[5] == 0).all() and (got[~mask] == 0).all()


def test_where_ignores_junk_in_masked_entries_of_x_and_g():
    x, mask, g = _rows_case("masked_softmax_grad", np.float32)
    junk_x, junk_g = x.copy(), g.copy()
    junk_x[~mask], junk_g[~mask] = np.nan, np.inf
    for fn in (masked_softmax_grad.where, masked_softmax_grad.where_in_dtype):
        assert np.array_equal(fn(junk_x, mask, junk_g), fn(x, mask, g))


@pytest.mark.parametrize("kind", ["softmax_grad", "log_softmax_grad", "masked_softmax_grad"])
def test_plain_float16_backward_is_worse_than_float32_accumulation_on_long_rows(kind):
    # 1024 near-uniform logits (p about 1/1024, dx well above float16's subnormals), g near its mean: the float16
    # dot <g, p> (or sum(g)) is off by ulps of |g|, and g - <g, p> is ten times smaller than g
    x = (RNG.standard_normal((4, 1024)) * 0.1).astype(np.float16)
    g = (1 + 0.1 * RNG.standard_normal((4, 1024))).astype(np.float16)
    mask = np.ones(x.shape, bool)
    plain, best = named(KINDS[kind].plain), named(KINDS[kind].best)
    args = (lambda f: f(x, mask, g)) if kind == "masked_softmax_grad" else (lambda f: f(x, g))
    exact = _exact(kind, x, mask, g)
    plain_error, best_error = O.normwise(args(plain), exact), O.normwise(args(best), exact)
    assert best_error <= U["float16"]
    assert plain_error > 8 * best_error, (plain_error, best_error)


def test_softmax_backward_from_saved_logp_loses_the_small_probabilities():
    # float32 rows with logits spread over 80: the smallest p are e^-80, and exp(rounded logp) carries 80 u there
    x = np.linspace(0, -80, 64)[None].repeat(4, 0).astype(np.float32)
    tail = np.s_[:, 48:]  # logp below -60
    g = np.zeros(x.shape, np.float32)
    g[tail] = 1  # dx = p (1 - <g, p>) there, no cancellation: the error of dx is that of p
    exact = O.softmax_vjp(x, g)

    def worst_relative(fn):
        return float(np.max(np.abs(fn(x, g)[tail] - exact[tail]) / np.abs(exact[tail])))

    assert worst_relative(softmax_grad.from_logp) > 8 * worst_relative(softmax_grad.in_dtype)
    assert worst_relative(softmax_grad.from_logp) > 16 * U["float32"]


def test_logsumexp_backward_from_the_saved_lse_loses_every_digit_at_large_logits_in_float16():
    x = (RNG.standard_normal((4, 32)) + 2000).astype(np.float16)  # u |lse| = 2000 / 2048: p off by a factor e
    g = np.ones(4, np.float16)
    exact = O.logsumexp_vjp(x, g)
    assert O.normwise(logsumexp_grad.exp_minus_lse(x, g), exact) > 0.1
    assert O.normwise(logsumexp_grad.f32acc(x, g), exact) <= U["float16"]
    assert O.normwise(logsumexp_grad.softmax_in_dtype(x, g), exact) <= 8 * U["float16"]


def test_naive_attention_backward_turns_one_fully_masked_query_into_nan_in_all_of_dk_and_dv():
    inputs, mask = _attention_case(np.float32)
    dq, dk, dv = attention_grad.naive(*inputs, mask=mask)
    assert np.isnan(dq[..., 3, :]).all() and np.isfinite(np.delete(dq, 3, axis=-2)).all()
    assert np.isnan(dk).all() and np.isnan(dv).all()
    for fn in (attention_grad.upcast, attention_grad.flash2_b64):
        assert all(np.isfinite(grad).all() for grad in fn(*inputs, mask=mask))


def test_naive_attention_backward_in_bfloat16_is_worse_than_the_upcast_one():
    inputs, _ = _attention_case(ml_dtypes.bfloat16, lk=1024, masked=False)
    exact = O.attention_vjp(*inputs)
    naive = [O.normwise(a, b) for a, b in zip(attention_grad.naive(*inputs), exact)]
    upcast = [O.normwise(a, b) for a, b in zip(attention_grad.upcast(*inputs), exact)]
    assert all(n > 2 * u for n, u in zip(naive, upcast)), (naive, upcast)


def test_flash2_delta_is_rowsum_of_do_times_the_rounded_output():
    inputs, mask = _attention_case(ml_dtypes.bfloat16)
    q, k, v, g = inputs
    from softaudit.candidates.attention import tiled_b64

    o = tiled_b64(q, k, v, mask).astype(np.float64)
    d = attention_grad.flash2_delta(q, k, v, g, mask)
    assert d.dtype == np.float32 and d.shape == g.shape[:-1] + (1,)
    assert np.allclose(d, (g.astype(np.float64) * o).sum(-1, keepdims=True), rtol=1e-5, atol=1e-5)


# --- the same bits on every CPU ------------------------------------------------------------------------------

PROBE = r"""
import hashlib, json
import ml_dtypes, numpy as np
from softaudit.adapters._targets import load_target

MODULES = ["softmax_grad", "log_softmax_grad", "logsumexp_grad", "masked_softmax_grad", "attention_grad"]
rng = np.random.default_rng(7)
x, g = rng.standard_normal((4, 300)) * 4, rng.standard_normal((4, 300))
x[0, :4] = [30.0, -30.0, 11.5, -90.0]
mask = rng.random((4, 300)) < 0.6
mask[2] = False
q, k = rng.standard_normal((2, 7, 16)), rng.standard_normal((2, 150, 16))
v, do = rng.standard_normal((2, 150, 8)), rng.standard_normal((2, 7, 8))
attend = rng.random((7, 150)) < 0.7
attend[3] = False
hashes = {}
for dtype in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64):
    cast = lambda *arrays: [a.astype(dtype) for a in arrays]
    for module in MODULES:
        for c in load_target("softaudit.candidates." + module):
            if c.kind == "attention_grad":
                out = [*c.call(*cast(q, k, v, do), mask=attend), *c.call(*cast(q, k, v, do))]
            elif c.kind == "masked_softmax_grad":
                out = [c.call(*cast(x), mask, *cast(g))]
            elif c.kind == "logsumexp_grad":
                out = [c.call(*cast(x, g[:, 0]))]
            else:
                out = [c.call(*cast(x, g))]
            h = hashlib.sha256()
            for a in out:
                h.update(np.ascontiguousarray(a).tobytes())
            hashes[f"{c.name}/{np.dtype(dtype).name}"] = h.hexdigest()[:16]
print(json.dumps(hashes))
"""


def test_backward_builtins_give_the_same_bits_with_numpys_cpu_dispatch_restricted():
    from tests.candidates.test_portable import _cpu_features

    dispatched, _ = _cpu_features()
    envs = [{}] + ([{"NPY_DISABLE_CPU_FEATURES": " ".join(dispatched)}] if dispatched else [])
    base = {
        key: value
        for key, value in os.environ.items()
        if key not in ("NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES")
    }
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    results = []
    for env in envs:
        run = subprocess.run(
            [sys.executable, "-c", PROBE], cwd=ROOT, env={**base, **env}, text=True, capture_output=True, timeout=300
        )
        assert run.returncode == 0, run.stderr
        results.append(json.loads(run.stdout))
    assert len(results[0]) == sum(len(load_target(m.__name__)) for m in MODULES) * 4
    for env, result in zip(envs[1:], results[1:]):
        assert result == results[0], f"under {env}: {sorted(k for k in result if result[k] != results[0][k])}"
