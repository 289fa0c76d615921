"""attention_sinks_grad (issue 25, part 3: the sink's own gradient): dz = -sum_i P_iz D_i over the queries of every
batch entry that shares the sink, correctly rounded, against a plain mpmath oracle; its conditioning scale against
finite differences; the built-ins and the frameworks' autograd against it, and a sign error caught."""

import mpmath
import numpy as np
import pytest

import softaudit
from softaudit import kinds, reference

from . import oracle as O


def _case(d, seed=1, batch=2, lq=3, lk=5):
    rng = np.random.default_rng(seed)
    q, k, v, g = (rng.standard_normal(s) for s in ((batch, lq, d), (batch, lk, d), (batch, lk, d), (batch, lq, d)))
    return q, k, v, g, rng.standard_normal(batch) * 2, rng.standard_normal((batch, lq, lk)), rng.random((batch, lq, lk))


@pytest.mark.parametrize("d", [16, 8], ids=["c rational", "c irrational"])
@pytest.mark.parametrize("method", ["auto", "mpmath"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_sinks_gradient_is_correctly_rounded(d, method, dtype):
    """Each entry's own sink, a bias and a mask (a query may keep no key: it still attends its sink): the fast tiers
    and the exact one equal the oracle (60 digits), rounded to the dtype."""
    for seed in range(3):
        q, k, v, g, sinks, bias, draw = _case(d, seed)
        keep = draw < 0.7
        keep[0, 0] = False
        got = reference.sinks_grad(q, k, v, g, sinks, keep, bias=bias, dtype=dtype, method=method)
        want = [O.mp_sinks_vjp(q[b], k[b], v[b], g[b], sinks[b], keep[b], bias[b]) for b in range(2)]
        assert np.array_equal(got, np.array(want).astype(dtype))


def test_a_sink_shared_over_the_batch_sums_its_entries_and_a_kv_head_may_be_shared():
    """sinks (2,) over a batch (3, 2): each sink's gradient sums the three entries of its head; k and v shared by
    both heads (broadcast) change nothing of that."""
    rng = np.random.default_rng(2)
    q, g = rng.standard_normal((3, 2, 4, 8)), rng.standard_normal((3, 2, 4, 8))
    k, v = rng.standard_normal((3, 1, 6, 8)), rng.standard_normal((3, 1, 6, 8))
    sinks = rng.standard_normal(2)
    got = reference.sinks_grad(q, k, v, g, sinks, dtype=np.float64)
    with mpmath.workdps(60):
        want = [
            mpmath.fsum(
                mpmath.mpf(O.mp_sinks_vjp(q[b, h], k[b, 0], v[b, 0], g[b, h], sinks[h], dps=60)) for b in range(3)
            )
            for h in range(2)
        ]
    assert got.shape == (2,) and np.allclose(got, [float(w) for w in want], rtol=1e-15, atol=0)


@pytest.mark.parametrize("method", ["auto", "mpmath"])
def test_values_of_zero_give_an_exact_zero(method):
    """v = 0 makes every dP, so every D_i, 0: dz is +0 exactly, decided rather than refined forever."""
    q, k, _, g, sinks, bias, _ = _case(8)
    got = reference.sinks_grad(q, k, np.zeros_like(k), g, sinks, bias=bias, dtype=np.float16, method=method)
    assert np.array_equal(got, np.zeros(2)) and not np.signbit(got).any()


def test_an_undefined_query_makes_its_sink_undefined():
    q, k, v, g, sinks, _, _ = _case(8)
    q[1, 2, 0] = np.nan
    got = reference.sinks_grad(q, k, v, g, sinks, dtype=np.float32)
    assert np.isfinite(got[0]) and np.isnan(got[1])


def _scaled_dz(flat, shapes, c):
    """dz of one entry from flattened q, k, v, g, bias and [z], in mpmath."""
    q, k, v, g, b = ([flat[a][i * n : (i + 1) * n] for i in range(m)] for a, (m, n) in enumerate(shapes))
    z = flat[-1][0]
    total = mpmath.mpf(0)
    for qi, gi, bi in zip(q, g, b):
        s = [c * mpmath.fsum(x * y for x, y in zip(qi, kj)) + bij for kj, bij in zip(k, bi)]
        e = [mpmath.exp(x) for x in s]
        den = mpmath.fsum(e) + mpmath.exp(z)
        mean = mpmath.fsum(ej / den * mpmath.fsum(x * y for x, y in zip(gi, vj)) for ej, vj in zip(e, v))
        total -= mpmath.exp(z) / den * mean
    return [total]


@pytest.mark.parametrize("seed", range(6))
def test_the_sinks_scale_bounds_finite_differences(seed):
    """|dz| + sum |d dz / d x| |x| over q, k, v, g, the bias and z (central differences at 120 digits): the scale is
    at least that, and within 16x of it on these unpeaked inputs."""
    from tests.test_conditioning import _grad_scale_by_differences

    rng = np.random.default_rng(seed)
    lq, lk, d = 3, 4, 2
    q, k, v, g = (rng.standard_normal(s) for s in ((lq, d), (lk, d), (lk, d), (lq, d)))
    bias, z = rng.standard_normal((lq, lk)), rng.standard_normal()
    shapes = ((lq, d), (lk, d), (lk, d), (lq, d), (lq, lk))
    with mpmath.workdps(120):
        c = 1 / mpmath.sqrt(d)
        flat = [a.ravel() for a in (q, k, v, g, bias)] + [[z]]
        expected, r = _grad_scale_by_differences(lambda *f: _scaled_dz(f, shapes, c), flat)
    from softaudit import conditioning

    inputs = {"q": q, "k": k, "v": v, "g": g, "bias": bias, "sinks": np.asarray(z)}
    q1, k1, v1, g1, keep, b1, extra, _ = kinds.attention_problem(inputs, None, {})
    zeros = (np.zeros((lq, d)), np.zeros((lk, d)), np.zeros((lk, d)))
    *_, got = conditioning.attention_grad(q1, k1, v1, g1, keep, (*zeros, np.asarray(r[0])), 1 / np.sqrt(d), b1, extra)
    assert expected[0] <= got * (1 + 1e-9) and got <= 16 * expected[0], (got, expected)


def _audit(target, families=None, dtypes=("float32", "bfloat16")):
    return softaudit.audit(
        target,
        kind="attention_sinks_grad",
        families=families,
        dtypes=list(dtypes),
        suite="quick",
        isolation="none",
        cache_dir="off",
    ).table


def test_the_built_ins_pass_or_warn_and_best_practice_passes():
    table = _audit(["softaudit.candidates.attention_sinks_grad"])
    assert len(table) == 3 * 2 * 3 * 4 and set(table.verdict) <= {"pass", "warn"}, table[["candidate", "verdict"]]
    assert set(table[table.candidate.str.endswith("upcast")].verdict) == {"pass"}
    assert set(table[table.output == "dsinks"].verdict) == {"pass"}


@softaudit.candidate(kind="attention_sinks_grad", name="sink_sign_flipped")
def sink_sign_flipped(q, k, v, g, sinks, mask=None, *, causal=False):
    """dz with its sign flipped (sum_i P_iz D_i), dq, dk, dv right."""
    from softaudit.candidates import attention_sinks_grad as builtin

    *grads, dz = builtin.upcast(q, k, v, g, sinks, mask, causal=causal)
    return (*grads, -dz)


def test_a_sinks_gradient_with_the_wrong_sign_fails_on_dsinks_alone():
    table = _audit(sink_sign_flipped, dtypes=("float32",))
    assert set(table[table.output == "dsinks"].verdict) == {"fail"}
    assert set(table[table.output != "dsinks"].verdict) == {"pass"}


@pytest.mark.parametrize("target", ["torch:sdpa_sinks_learned_grad", "jax:dot_product_attention_sinks_learned_grad"])
def test_the_frameworks_sink_gradients_pass(target):
    """Autograd through the sink as a key of value 0 (PyTorch's SDPA; JAX's attention, whose float64 is float32
    accurate, so not run here): dsinks passes in float32 and bfloat16."""
    pytest.importorskip(target.split(":")[0])
    table = _audit(f"softaudit.frameworks.{target}")
    ran = table[table.verdict != "skip"]
    assert len(ran) >= 8 and set(ran[ran.output == "dsinks"].verdict) == {"pass"}, ran[["family", "output", "verdict"]]
    assert "fail" not in set(ran.verdict)
