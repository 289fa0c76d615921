"""The conditioning scale against mpmath: sum_k |d r_i / d x_k| |x_k| from central differences of the exact function.

Nothing here uses the scale's formulas: the Jacobian comes from differencing softmax, log-softmax, log-sum-exp
and attention computed in mpmath at 120 digits (x_top - lse near 100 must keep 1e-66 of a result near 1e-43), with
steps of 1e-25 (the truncation error is about 1e-50).
"""

import mpmath
import numpy as np
import pytest

from softaudit import conditioning
from softaudit.kinds import KINDS

DPS, STEP = 120, mpmath.mpf("1e-25")


def _softmax(x):
    top = max(x)
    e = [mpmath.exp(v - top) for v in x]
    s = mpmath.fsum(e)
    return [v / s for v in e]


def _lse(x):
    top = max(x)
    return top + mpmath.log(mpmath.fsum(mpmath.exp(v - top) for v in x))


def _exact(kind, x):
    if kind == "softmax":
        return _softmax(x)
    if kind == "log_softmax":
        lse = _lse(x)
        return [v - lse for v in x]
    return [_lse(x)]


def _scale_by_differences(kind, row):
    """|r_i| + sum_k |J_ik| |x_k| for one row, J from central differences in mpmath."""
    with mpmath.workdps(DPS):
        x = [mpmath.mpf(float(v)) for v in row]
        r = _exact(kind, x)
        scale = [abs(v) for v in r]
        for k in range(len(x)):
            up, down = list(x), list(x)
            up[k] += STEP
            down[k] -= STEP
            column = [(a - b) / (2 * STEP) for a, b in zip(_exact(kind, up), _exact(kind, down))]
            for i, d in enumerate(column):
                scale[i] += abs(d) * abs(x[k])
        return [float(v) for v in scale], [float(v) for v in r]


ROWS = {
    "random": [0.3, -1.2, 2.5, 0.0, -0.7],
    "large logits": [1000.0, 1001.0, 999.0],
    "dominant by 40": [40.0, 0.5, -0.25, 1.0],
    "dominant by 100": [-3.0, 100.0, 1.0, 2.0, 0.0],
    "equal": [7.5, 7.5, 7.5, 7.5],
    "negative offset": [-300.0, -301.5, -299.25],
}


@pytest.mark.parametrize("kind", ["softmax", "log_softmax", "logsumexp"])
@pytest.mark.parametrize("name", list(ROWS))
def test_row_kinds_match_finite_differences_of_the_exact_function(kind, name):
    row = ROWS[name]
    expected, r = _scale_by_differences(kind, row)
    r_array = np.array([r[0]]) if kind == "logsumexp" else np.array([r])
    got = conditioning.rows(KINDS[kind], np.array([row]), None, r_array).reshape(-1)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=0)


def test_the_top_entry_of_a_dominant_row_keeps_its_tiny_scale():
    """log-softmax of the top entry of [100, 0, 0]: r = -log(1 + 2e**-100), about -7.4e-44, and its scale is
    about 101 |r|. Computing (1 - p) |x| + A - p |x| naively would give about 1e-14 here, hiding any error."""
    row = [100.0, 0.0, 0.0]
    expected, r = _scale_by_differences("log_softmax", row)
    got = conditioning.rows(KINDS["log_softmax"], np.array([row]), None, np.array([r]))[0]
    assert got[0] == pytest.approx(expected[0], rel=1e-9) and got[0] < 1e-40


def test_masked_and_removed_entries_count_for_nothing():
    x = np.array([[0.5, 3.0, -np.inf, 1.0]])
    mask = np.array([[True, False, True, True]])  # the 3.0 is masked, the -inf removed
    expected, r = _scale_by_differences("softmax", [0.5, 1.0])
    ref = np.array([[r[0], 0.0, 0.0, r[1]]])
    got = conditioning.rows(KINDS["softmax"], x, mask, ref)[0]
    np.testing.assert_allclose(got[[0, 3]], expected, rtol=1e-9)
    assert got[1] == 0 and got[2] == 0


def _attention_exact(q, k, v, c):
    out = []
    for qi in q:
        s = [c * mpmath.fsum(a * b for a, b in zip(qi, kj)) for kj in k]
        p = _softmax(s)
        out.append([mpmath.fsum(pj * vj[col] for pj, vj in zip(p, v)) for col in range(len(v[0]))])
    return out


def test_attention_is_exact_in_keys_and_values_and_bounds_the_queries_part():
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((2, 3)), rng.standard_normal((4, 3)) * 2, rng.standard_normal((4, 2))
    c = 1 / np.sqrt(3.0)
    with mpmath.workdps(DPS):
        mq, mk, mv = ([[mpmath.mpf(float(a)) for a in row] for row in arr] for arr in (q, k, v))
        mc = mpmath.mpf(float(c))
        o = _attention_exact(mq, mk, mv, mc)
        parts = {}
        for name, arr in (("q", mq), ("k", mk), ("v", mv)):
            total = [[mpmath.mpf(0)] * 2 for _ in range(2)]
            for a in range(len(arr)):
                for b in range(len(arr[0])):
                    up = [list(row) for row in arr]
                    down = [list(row) for row in arr]
                    up[a][b] += STEP
                    down[a][b] -= STEP
                    args_up = {"q": mq, "k": mk, "v": mv, name: up}
                    args_down = {"q": mq, "k": mk, "v": mv, name: down}
                    hi = _attention_exact(args_up["q"], args_up["k"], args_up["v"], mc)
                    lo = _attention_exact(args_down["q"], args_down["k"], args_down["v"], mc)
                    for i in range(2):
                        for col in range(2):
                            total[i][col] += abs((hi[i][col] - lo[i][col]) / (2 * STEP)) * abs(arr[a][b])
            parts[name] = np.array([[float(t) for t in row] for row in total])
        exact_o = np.array([[float(t) for t in row] for row in o])
    got, values = conditioning.attention(q, k, v, np.ones((2, 4), bool), exact_o, float(c))
    np.testing.assert_allclose(got, np.abs(exact_o) + parts["v"] + 2 * parts["k"], rtol=1e-9)
    np.testing.assert_allclose(values, parts["v"], rtol=1e-9)  # d o / d v_j = p_j: sum_j p_j |v_j|
    assert (parts["q"] <= parts["k"] * (1 + 1e-9)).all()  # the queries' part is bounded by the keys' form


def test_keys_not_kept_count_for_nothing_whatever_they_hold():
    rng = np.random.default_rng(4)
    q, k, v = rng.standard_normal((3, 4)), rng.standard_normal((5, 4)), rng.standard_normal((5, 2))
    keep = np.array([True, True, True, False, False])
    junk_k, junk_v = k.copy(), v.copy()
    junk_k[3], junk_k[4, 0], junk_v[3:] = np.nan, np.inf, 1.7e308  # (PyTorch #101967: NaN in a masked-out key)
    o = rng.standard_normal((3, 2))
    clean = conditioning.attention(q, k[:3], v[:3], np.ones((3, 3), bool), o, 0.5)
    junk = conditioning.attention(q, junk_k, junk_v, np.broadcast_to(keep, (3, 5)), o, 0.5)
    for a, b in zip(clean, junk):
        np.testing.assert_allclose(b, a, rtol=1e-12)


def test_gradient_keys_not_kept_count_for_nothing_whatever_they_hold():
    rng = np.random.default_rng(5)
    q, k, v, g = (rng.standard_normal(s) for s in ((3, 4), (5, 4), (5, 2), (3, 2)))
    keep = np.broadcast_to(np.array([True, True, True, False, False]), (3, 5))
    grads = [rng.standard_normal(s) for s in ((3, 4), (5, 4), (5, 2))]
    grads[1][3:], grads[2][3:] = 0.0, 0.0  # (a key no query attends has dk = dv = 0)
    zeroed_k, zeroed_v = np.where(keep[0][:, None], k, 0.0), np.where(keep[0][:, None], v, 0.0)
    junk_k, junk_v = k.copy(), v.copy()
    junk_k[3], junk_k[4, 0], junk_v[3:] = np.nan, np.inf, 1.7e308
    clean = conditioning.attention_grad(q, zeroed_k, zeroed_v, g, keep, grads, 0.5)
    junk = conditioning.attention_grad(q, junk_k, junk_v, g, keep, grads, 0.5)
    for a, b in zip(clean, junk):
        np.testing.assert_allclose(b, a, rtol=1e-12)


def test_attention_chunks_give_the_same_scale(monkeypatch):
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((2, 9, 4)), rng.standard_normal((2, 7, 4)), rng.standard_normal((2, 7, 3))
    keep = rng.random((2, 9, 7)) < 0.7
    keep[..., 0] = True
    o = np.zeros((2, 9, 3))
    whole, _ = conditioning.attention(q, k, v, keep, o, 0.5)
    monkeypatch.setattr(conditioning, "CHUNK", 7 * 3 * 2)  # two queries at a time
    assert np.array_equal(conditioning.attention(q, k, v, keep, o, 0.5)[0], whole)


def _softmax_vjp(x, g):
    p = _softmax(x)
    gbar = mpmath.fsum(a * b for a, b in zip(p, g))
    return [pi * (gi - gbar) for pi, gi in zip(p, g)]


def _log_softmax_vjp(x, g):
    total = mpmath.fsum(g)
    return [gi - pi * total for pi, gi in zip(_softmax(x), g)]


def _logsumexp_vjp(x, g):
    return [pi * g[0] for pi in _softmax(x)]


VJPS = {"softmax_grad": _softmax_vjp, "log_softmax_grad": _log_softmax_vjp, "logsumexp_grad": _logsumexp_vjp}


def _grad_scale_by_differences(vjp, inputs):
    """|r_i| + sum over every input entry of |d r_i / d input| |input|, by central differences in mpmath."""
    with mpmath.workdps(DPS):
        args = [[mpmath.mpf(float(v)) for v in row] for row in inputs]
        r = vjp(*args)
        scale = [abs(v) for v in r]
        for a, row in enumerate(args):
            for j in range(len(row)):
                up, down = [list(x) for x in args], [list(x) for x in args]
                up[a][j] += STEP
                down[a][j] -= STEP
                for i, (hi, lo) in enumerate(zip(vjp(*up), vjp(*down))):
                    scale[i] += abs((hi - lo) / (2 * STEP)) * abs(row[j])
        return np.array([float(v) for v in scale]), np.array([float(v) for v in r])


GRADS = {
    "gaussian": [0.3, -1.2, 2.5, -0.7],
    "one-hot": [0.0, 1.0, 0.0, 0.0],
    "constant": [0.5, 0.5, 0.5, 0.5],
    "wide": [1e-6, -3e4, 2.0, 7e2],
}


def _intermediate(kind, x, g):
    """What rounding the standard algorithm's intermediate once costs, per output, in mpmath: <g, p> for softmax's
    VJP (p_i sum_k p_k |g_k|), sum(g) for log-softmax's (p_i sum_k |g_k|), lse for log-sum-exp's exp(x - lse) g
    (p_i |g| |lse|)."""
    with mpmath.workdps(DPS):
        p = _softmax([mpmath.mpf(float(v)) for v in x])
        g = [mpmath.mpf(float(v)) for v in g]
        if kind == "softmax_grad":
            return np.array([float(pi * mpmath.fsum(pk * abs(gk) for pk, gk in zip(p, g))) for pi in p])
        if kind == "log_softmax_grad":
            return np.array([float(pi * mpmath.fsum(abs(gk) for gk in g)) for pi in p])
        lse = abs(mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(float(v))) for v in x)))
        return np.array([float(pi * abs(g[0]) * lse) for pi in p])


@pytest.mark.parametrize("kind", list(VJPS))
@pytest.mark.parametrize("name", ["random", "large logits", "dominant by 40", "equal", "negative offset"])
@pytest.mark.parametrize("upstream", list(GRADS))
def test_row_gradient_scales_against_finite_differences_of_the_exact_vjp(kind, name, upstream):
    """Each scale is the inputs' part (central differences of the exact VJP) plus the standard algorithm's
    intermediate rounded once (_intermediate): exact for log-softmax and log-sum-exp; softmax's bounds its logits'
    part by the triangle inequality, so it is at least that sum and, on these rows, within 3x of it."""
    row = ROWS[name]
    g = (GRADS[upstream] * 2)[: len(row)]
    g = g[:1] if kind == "logsumexp_grad" else g
    expected, r = _grad_scale_by_differences(VJPS[kind], [row, g])
    expected = expected + _intermediate(kind, row, g)
    got = getattr(conditioning, kind)(np.array([row]), None, np.array(g if kind != "logsumexp_grad" else g[0]), r)
    got = got.reshape(-1)
    if kind == "softmax_grad":
        assert (got >= expected * (1 - 1e-9)).all() and (got <= 3 * expected).all()
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=0)


def _attention_vjp(q, k, v, g, c):
    """(dq, dk, dv) of attention in mpmath from the textbook formulas, each flattened."""
    s = [[c * mpmath.fsum(a * b for a, b in zip(qi, kj)) for kj in k] for qi in q]
    p = [_softmax(row) for row in s]
    dp = [[mpmath.fsum(a * b for a, b in zip(gi, vj)) for vj in v] for gi in g]
    d = [mpmath.fsum(a * b for a, b in zip(pi, dpi)) for pi, dpi in zip(p, dp)]
    ds = [[pij * (dpij - di) for pij, dpij in zip(pi, dpi)] for pi, dpi, di in zip(p, dp, d)]
    dq = [[c * mpmath.fsum(ds[i][j] * k[j][t] for j in range(len(k))) for t in range(len(q[0]))] for i in range(len(q))]
    dk = [[c * mpmath.fsum(ds[i][j] * q[i][t] for i in range(len(q))) for t in range(len(q[0]))] for j in range(len(k))]
    dv = [[mpmath.fsum(p[i][j] * g[i][t] for i in range(len(q))) for t in range(len(g[0]))] for j in range(len(k))]
    return [x for grad in (dq, dk, dv) for row in grad for x in row]


@pytest.mark.parametrize("seed", range(8))
def test_attention_gradient_scales_bound_finite_differences_of_the_exact_vjp(seed):
    """The scales of dq, dk, dv are upper bounds of |r| + sum |d r / d input| |input| (every entry of q, k, v
    and g perturbed), and not loose ones: within 16x of it on random inputs (10.6x the worst of these seeds, on
    an entry of dq; the median about 2x)."""
    rng = np.random.default_rng(seed)
    lq, lk, d, dv = 2, 3, 2, 2
    q, k, v, g = (rng.standard_normal(s) for s in ((lq, d), (lk, d), (lk, dv), (lq, dv)))
    c = 0.7
    with mpmath.workdps(DPS):
        mc = mpmath.mpf(c)

        def vjp(*flat):
            rows = [
                [flat[a][i * n : (i + 1) * n] for i in range(m)]
                for a, (m, n) in enumerate(((lq, d), (lk, d), (lk, dv), (lq, dv)))
            ]
            return _attention_vjp(*rows, mc)

        expected, r = _grad_scale_by_differences(vjp, [a.ravel() for a in (q, k, v, g)])
    dq, dk, dv_ = np.split(r, [lq * d, lq * d + lk * d])
    got = conditioning.attention_grad(
        q, k, v, g, np.ones((lq, lk), bool), (dq.reshape(lq, d), dk.reshape(lk, d), dv_.reshape(lk, dv)), c
    )
    got = np.concatenate([a.ravel() for a in got])
    assert (got >= expected * (1 - 1e-9)).all()
    assert (got <= 16 * expected).all()


def _modified_attention_vjp(q, k, v, g, b, z, c, cap=None):
    """(dq, dk, dv) flattened, in mpmath, for the scores c q.k + b and a sink of logit z (one more key of value 0),
    from the textbook formulas: the sink's weight joins each softmax, its dP is 0. With a softcap the scores are
    cap tanh(c q.k / cap) + b, and dS is sech(c q.k / cap)**2 P (dP - D)."""
    raw = [[c * mpmath.fsum(a * t for a, t in zip(qi, kj)) for kj in k] for qi in q]
    capped = raw if cap is None else [[cap * mpmath.tanh(x / cap) for x in row] for row in raw]
    s = [[x + bij for x, bij in zip(row, bi)] for row, bi in zip(capped, b)]
    p = [_softmax(row + [z[0]])[:-1] for row in s]
    dp = [[mpmath.fsum(a * t for a, t in zip(gi, vj)) for vj in v] for gi in g]
    d = [mpmath.fsum(a * t for a, t in zip(pi, dpi)) for pi, dpi in zip(p, dp)]
    ds = [[pij * (dpij - di) for pij, dpij in zip(pi, dpi)] for pi, dpi, di in zip(p, dp, d)]
    if cap is not None:
        ds = [[mpmath.sech(x / cap) ** 2 * dsij for x, dsij in zip(row, dsi)] for row, dsi in zip(raw, ds)]
    lq, lk, dim = len(q), len(k), len(q[0])
    dq = [[c * mpmath.fsum(ds[i][j] * k[j][t] for j in range(lk)) for t in range(dim)] for i in range(lq)]
    dk = [[c * mpmath.fsum(ds[i][j] * q[i][t] for i in range(lq)) for t in range(dim)] for j in range(lk)]
    dv = [[mpmath.fsum(p[i][j] * g[i][t] for i in range(lq)) for t in range(len(g[0]))] for j in range(lk)]
    return [x for grad in (dq, dk, dv) for row in grad for x in row]


@pytest.mark.parametrize("cap", [None, 1.5])
@pytest.mark.parametrize("seed", range(6))
def test_attention_gradient_scales_with_a_bias_and_a_sink_bound_finite_differences(seed, cap):
    """With a bias and a sink (attention_grad's problem as the kind forms it: the sink one more key at the end),
    the scales still bound |r| + sum |d r / d input| |input| over q, k, v, g, every bias entry and the sink's
    logit, within 16x where the weights are not peaked (a bias of N(0, 1) here; a peaked softmax makes the bound
    loose for q and k as much as for the bias: its P_ij (2 a_ij + 2 alpha_i) does not see that a top weight near 1
    hardly moves). With a softcap of 1.5 too (scores up to about 3, past the cap: the bias after it)."""
    from softaudit import kinds

    rng = np.random.default_rng(seed)
    lq, lk, d, dv = 2, 3, 2, 2
    q, k, v, g = (rng.standard_normal(s) for s in ((lq, d), (lk, d), (lk, dv), (lq, dv)))
    bias, sinks = rng.standard_normal((lq, lk)), rng.standard_normal(())
    with mpmath.workdps(DPS):
        mc = 1 / mpmath.sqrt(d)
        shapes = ((lq, d), (lk, d), (lk, dv), (lq, dv), (lq, lk))

        def vjp(*flat):
            rows = [[flat[a][i * n : (i + 1) * n] for i in range(m)] for a, (m, n) in enumerate(shapes)]
            return _modified_attention_vjp(*rows, flat[-1], mc, None if cap is None else mpmath.mpf(cap))

        flat = [a.ravel() for a in (q, k, v, g, bias)] + [[float(sinks)]]
        expected, r = _grad_scale_by_differences(vjp, flat)
    dq, dk, dv_ = np.split(r, [lq * d, lq * d + lk * d])
    inputs = {"q": q, "k": k, "v": v, "g": g, "bias": bias, "sinks": np.asarray(sinks)}
    q1, k1, v1, g1, keep, b1, extra, _ = kinds.attention_problem(inputs, None, {})
    grads = (dq.reshape(lq, d), dk.reshape(lk, d), dv_.reshape(lk, dv))
    got = conditioning.attention_grad(q1, k1, v1, g1, keep, grads, 1 / np.sqrt(d), b1, extra, softcap=cap)
    assert [a.shape for a in got] == [(lq, d), (lk, d), (lk, dv)]
    got = np.concatenate([a.ravel() for a in got])
    assert (got >= expected * (1 - 1e-9)).all()
    assert (got <= 16 * expected).all()


def test_a_masked_gradient_scale_is_the_kept_entries_own():
    x, g = np.array([[0.5, 3.0, -np.inf, 1.0]]), np.array([[0.25, -9.0, 4.0, -1.5]])
    mask = np.array([[True, False, True, True]])  # the 3.0 is masked, the -inf removed
    expected, r = _grad_scale_by_differences(_softmax_vjp, [[0.5, 1.0], [0.25, -1.5]])
    expected = expected + _intermediate("softmax_grad", [0.5, 1.0], [0.25, -1.5])  # <g, p> over the kept entries
    got = conditioning.softmax_grad(x, mask, g, np.array([[r[0], 0.0, 0.0, r[1]]]))[0]
    assert got[1] == 0 and got[2] == 0
    assert (got[[0, 3]] >= expected * (1 - 1e-9)).all() and (got[[0, 3]] <= 3 * expected).all()


@pytest.mark.parametrize("seed", range(4))
def test_attention_gradient_scales_cover_rounding_d_once(seed):
    """D_i = sum_t dO_it O_it (FlashAttention's form) rounded once moves D_i by u sum_t |dO_it| |O_it|, and with it
    dq_i by c |D_i's error| |(P k)_i| and dk_j by c sum_i P_ij |D_i's error| |q_i|: the scales hold that cost on
    top of |dq| and |dk| (their term 2 delta, delta >= sum_j P_ij b_ij >= sum_t |dO_it| |O_it|). The cost is
    computed here in mpmath from the textbook attention."""
    rng = np.random.default_rng(seed)
    lq, lk, d = 3, 5, 4
    q, k, v, g = (rng.standard_normal(s) * 3 for s in ((lq, d), (lk, d), (lk, d), (lq, d)))
    c = 0.5
    with mpmath.workdps(50):
        s = [[c * mpmath.fsum(mpmath.mpf(a) * b for a, b in zip(qi, kj)) for kj in k] for qi in q]
        p = [_softmax(row) for row in s]
        o = [[mpmath.fsum(p[i][j] * v[j][t] for j in range(lk)) for t in range(d)] for i in range(lq)]
        cost = [mpmath.fsum(abs(g[i][t] * o[i][t]) for t in range(d)) for i in range(lq)]
        pk = [[mpmath.fsum(p[i][j] * k[j][t] for j in range(lk)) for t in range(d)] for i in range(lq)]
        dq_cost = np.array([[float(c * cost[i] * abs(pk[i][t])) for t in range(d)] for i in range(lq)])
        dk_cost = np.array(
            [
                [float(c * mpmath.fsum(p[i][j] * cost[i] * abs(q[i][t]) for i in range(lq))) for t in range(d)]
                for j in range(lk)
            ]
        )
    zeros = (np.zeros((lq, d)), np.zeros((lk, d)), np.zeros((lk, d)))
    dq_scale, dk_scale, _ = conditioning.attention_grad(q, k, v, g, np.ones((lq, lk), bool), zeros, c)
    assert (dq_scale >= dq_cost).all() and (dk_scale >= dk_cost).all()


def test_the_log_kinds_scales_hold_one_rounding_of_the_sum():
    """x - m - log s rounds s once, which moves log s by up to u whatever the inputs: the log kinds' scale adds 1 on
    kept entries (0 stays 0: masked or undefined); softmax's p_i (1 + ...) already holds p_i u."""
    scale = np.array([[2.0**-60, 0.0, 3.0]])
    assert conditioning.sum_rounding(KINDS["log_softmax"], scale).tolist() == [[1.0 + 2.0**-60, 0.0, 4.0]]
    assert conditioning.sum_rounding(KINDS["logsumexp"], scale[0]).tolist() == [1.0 + 2.0**-60, 0.0, 4.0]
    assert conditioning.sum_rounding(KINDS["softmax"], scale) is scale


def _capped_attention_vjp(q, k, v, g, bias, z, keep, cap, c):
    """(dq, dk, dv) of attention with the scores cap tanh(c q k^T / cap) + bias over the kept keys and a sink of
    logit z (one more weight, no value), in plain numpy from the textbook formulas: dP = g v^T, D = rowsum(P dP),
    dS = (1 - tanh**2) P (dP - D), dq = c dS k, dk = c dS^T q, dv = P^T g. Complex inputs give the complex step
    (the shift m is the real part's, a constant)."""
    t = np.tanh(c * (q @ k.T) / cap)
    f = cap * t + bias
    m = np.maximum(np.where(keep, f.real, -np.inf).max(axis=1, keepdims=True), z.real)
    e = np.where(keep, np.exp(f - m), 0.0)
    p = e / (e.sum(axis=1, keepdims=True) + np.exp(z - m))
    dp = g @ v.T
    ds = (1 - t**2) * p * (dp - (p * dp).sum(axis=1, keepdims=True))
    return c * ds @ k, c * ds.T @ q, p.T @ g


CAPPED = {  # name: (seed, the queries' size, the shared part, cap, a mask, the sink's logit or None)
    "gaussian": (0, 1.0, 0.0, 2.0, False, None),
    "masked, bias and sink": (1, 1.5, 0.0, 3.0, True, 0.5),
    "past the cap": (0, 4.0, 0.0, 2.0, False, None),
    "all past the cap, masked and sink": (1, 1.0, 5.0, 2.0, True, 1.0),
}


def _capped_case(name):
    """The inputs (q, k, v, g, bias, z), the keep mask and the cap of CAPPED[name]: Lq = 3, Lk = 5, d = 4, the
    queries size N(0, 1) + shared and the keys N(0, 1) + 1 where there is a shared part (then every score c q.k is
    about 5 and past the cap); with a mask each query keeps its own key and a random half of the rest, a bias
    N(0, 1); without a sink z is -inf (weight 0)."""
    seed, size, shared, cap, masked, sink = CAPPED[name]
    rng = np.random.default_rng(seed)
    lq, lk, d = 3, 5, 4
    q = rng.standard_normal((lq, d)) * size + shared
    k = rng.standard_normal((lk, d)) + (1.0 if shared else 0.0)
    v, g = (rng.standard_normal(s) for s in ((lk, d), (lq, d)))
    bias = rng.standard_normal((lq, lk)) if masked else np.zeros((lq, lk))
    keep = rng.random((lq, lk)) < 0.5 if masked else np.ones((lq, lk), bool)
    keep[np.arange(lq), np.arange(lq)] = True
    z = np.asarray(-np.inf if sink is None else sink)
    return [q, k, v, g, bias, z], keep, cap


def _capped_first_order(arrays, keep, cap, c):
    """(r, J): the exact (dq, dk, dv) flattened and its Jacobian in every input entry (q, k, v, g, the bias, z),
    by the complex step (d r / d x = Im r(x + i h) / h, no cancellation: exact to float64's rounding)."""
    h = 1e-30
    r = np.concatenate([a.ravel() for a in _capped_attention_vjp(*arrays, keep, cap, c)])
    columns = []
    for index, a in enumerate(arrays):
        if not np.isfinite(a).all():  # no sink: -inf, no input
            continue
        for position in np.ndindex(a.shape):
            moved = [x.astype(complex) for x in arrays]
            moved[index][position] += 1j * h
            out = _capped_attention_vjp(*moved, keep, cap, c)
            columns.append(np.concatenate([o.ravel() for o in out]).imag / h)
    x = np.concatenate([a.ravel() for a in arrays if np.isfinite(a).all()])
    return r, np.array(columns).T, x


def _capped_scales(arrays, keep, cap, c, r):
    """conditioning.attention_grad's scales for the case, flattened, the sink as the kind forms it."""
    from softaudit import kinds

    q, k, v, g, bias, z = arrays
    lq, lk, d = q.shape[0], k.shape[0], q.shape[1]
    inputs = {"q": q, "k": k, "v": v, "g": g, "bias": bias}
    if np.isfinite(z):
        inputs["sinks"] = z
    q1, k1, v1, g1, keep1, b1, extra, _ = kinds.attention_problem(inputs, keep, {})
    grads = np.split(r, [lq * d, (lq + lk) * d])
    grads = [a.reshape(-1, d) for a in grads]
    got = conditioning.attention_grad(q1, k1, v1, g1, keep1, grads, c, b1, extra, softcap=cap)
    assert [a.shape for a in got] == [(lq, d), (lk, d), (lk, d)]
    return np.concatenate([a.ravel() for a in got])


@pytest.mark.parametrize("name", list(CAPPED))
def test_capped_attention_gradient_scales_bound_every_perturbation_of_the_inputs(name):
    """Under a softcap the scales bound |r| + sum |d r / d x| |x| over q, k, v, g, the bias and the sink's logit
    (J by the complex step of an independent numpy VJP), and bound what perturbing every input by a relative
    eps = 1e-7 does to each output: 8 random signs, and for each output the worst signs (sign(J x) for that
    output, which reach eps sum |J| |x| to first order; they reach 0.73 to 0.98 of eps (scale - |r|) here).
    The two cases past the cap (scores up to 2.7 caps; every kept one 1.6 to 8 caps) need sigma's own movement,
    |F| 4 |t| sigma a / cap: without it the worst signs reach 1.5 and 4.3 times eps (scale - |r|), and random
    ones 2.9 times in the second. Not loose either: over the outputs the exact first-order part is at least 0.4 of
    the scale's (scale - |r|) at the median (0.52 to 0.75 on these cases) and at least 1/8 of it everywhere (0.24
    the least)."""
    arrays, keep, cap = _capped_case(name)
    c = 1 / np.sqrt(arrays[0].shape[1])
    r, jac, x = _capped_first_order(arrays, keep, cap, c)
    exact = np.abs(jac) @ np.abs(x)  # sum over the inputs of |d r / d x| |x|
    got = _capped_scales(arrays, keep, cap, c, r)
    assert (got >= (np.abs(r) + exact) * (1 - 1e-9)).all()

    inputs_part = got - np.abs(r)
    eps = 1e-7
    rng = np.random.default_rng(7)
    signs = [rng.choice([-1.0, 1.0], x.size) for _ in range(8)]
    signs += [np.where(row * x >= 0, 1.0, -1.0) for row in jac]
    for sign in signs:
        moved, start = [], 0
        for a in arrays:
            if not np.isfinite(a).all():
                moved.append(a)
                continue
            moved.append(a * (1 + eps * sign[start : start + a.size].reshape(a.shape)))
            start += a.size
        change = np.concatenate([o.ravel() for o in _capped_attention_vjp(*moved, keep, cap, c)]) - r
        assert (np.abs(change) <= eps * inputs_part * (1 + 1e-3) + 1e-22).all(), np.max(
            np.abs(change) / (eps * inputs_part)
        )

    nonzero = inputs_part > 0
    ratio = exact[nonzero] / inputs_part[nonzero]
    assert np.median(ratio) > 0.4 and ratio.min() > 1 / 8, (np.median(ratio), ratio.min())


def test_a_far_softcap_gives_the_uncapped_scales_and_the_capped_scores_rounding():
    """cap -> infinity: sigma -> 1 and sigma's movement -> 0, so the scales tend to the uncapped ones but for the
    capped score's own rounding, which a capped kernel does and the uncapped scale does not hold: |C t| / 2 ->
    |s| / 2 <= a0 / 2 in a. So they are at least the uncapped ones, and the term moves them by a bounded share."""
    arrays, keep, _ = _capped_case("masked, bias and sink")
    c = 1 / np.sqrt(arrays[0].shape[1])
    r, *_ = _capped_first_order(arrays, keep, 1e9, c)
    far = _capped_scales(arrays, keep, 1e9, c, r)
    q, k, v, g, bias, z = arrays
    from softaudit import kinds

    q1, k1, v1, g1, keep1, b1, extra, _ = kinds.attention_problem(
        {"q": q, "k": k, "v": v, "g": g, "bias": bias, "sinks": z}, keep, {}
    )
    grads = [a.reshape(-1, q.shape[1]) for a in np.split(r, [q.size, q.size + k.size])]
    plain = np.concatenate([a.ravel() for a in conditioning.attention_grad(q1, k1, v1, g1, keep1, grads, c, b1, extra)])
    assert (far >= plain * (1 - 1e-12)).all()
    ratio = far / plain
    assert 1 < np.median(ratio) < 1.5 and ratio.max() < 3, (np.median(ratio), ratio.max())
