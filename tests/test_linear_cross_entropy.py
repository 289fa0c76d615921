"""The linear_cross_entropy kinds: their conditioning against perturbations of the inputs, the fail line's budget
against the standard algorithm's real errors, the built-ins' verdicts where their weakness shows, and the hunt."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from softaudit import budget, cases, kinds
from softaudit.candidates import linear_cross_entropy as lce
from softaudit.candidates import linear_cross_entropy_grad as lce_grad
from softaudit.hunt import _strategies
from softaudit.reference import evaluate_linear_cross_entropy, evaluate_linear_cross_entropy_grad, format_of, round_to

FORWARD, GRAD = kinds.get("linear_cross_entropy"), kinds.get("linear_cross_entropy_grad")


def _loss64(x, w, t):
    """Each row's loss in float64 from the textbook formula (independent of softaudit)."""
    z = x @ w.T
    m = z.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))
    return lse - z[np.arange(len(z)), t]


def _case(family, kind="linear_cross_entropy", dtype="float32", suite="quick"):
    fmt = format_of(dtype)
    case = cases.FAMILIES[family].cases(kind, fmt, suite)[0]
    entry = kinds.get(kind)
    inputs = {n: a.astype(np.int64) if n in entry.integers else round_to(a, fmt.dtype) for n, a in case.arrays.items()}
    return inputs, dict(case.options)


@pytest.mark.parametrize("family", ["lce_gaussian", "lce_cancelling", "lce_confident"])
def test_loss_scale_is_what_a_worst_input_rounding_moves_it_by(family):
    """The scale less |r| (per unit u) bounds the loss's change when every x_h and W_vh moves by u relative, and the
    worst signs reach it to first order (x's part through sum_v a_v W_vh, W's through |a_v| |x_h W_vh|)."""
    inputs, _ = _case(family)
    x, w, t = (inputs[n].astype(np.float64) if n != "target" else inputs[n] for n in ("x", "weight", "target"))
    (ref,) = FORWARD.reference(FORWARD, inputs, None, np.float32)
    (fields,) = FORWARD.conditioning(FORWARD, inputs, None, (ref,))
    bound = fields["scale"] - np.abs(ref.hi) - 1  # (less the sum's own rounding, which no input moves)
    u = 2.0**-30
    z = x @ w.T
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    a = p.copy()
    a[np.arange(len(t)), t] -= 1
    for i in range(len(x)):
        dx = u * np.abs(x[i]) * np.sign(a[i] @ w)
        dw = u * np.abs(w) * np.sign(np.outer(a[i], x[i]))
        moved = _loss64((x[i] + dx)[None], w + dw, t[i : i + 1])[0] - _loss64(x[i][None], w, t[i : i + 1])[0]
        assert abs(moved) <= u * bound[i] * 1.01
        assert abs(moved) >= u * bound[i] * 0.9


def test_gradient_scale_bounds_a_perturbation_of_the_inputs():
    """dx's, dweight's and dbias's scales bound what moving x and W by u relative (random signs) moves them."""
    inputs, _ = _case("lce_gaussian", "linear_cross_entropy_grad")
    x, w, t, g = (inputs[n].astype(np.float64) if n != "target" else inputs[n] for n in ("x", "weight", "target", "g"))
    refs = GRAD.reference(GRAD, inputs, None, np.float32)
    fields = GRAD.conditioning(GRAD, inputs, None, refs)

    def grads(x, w):
        z = x @ w.T
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(len(t)), t] -= 1
        dz = p * g[:, None]
        return dz @ w, dz.T @ x, dz.sum(axis=0)

    u = 2.0**-30
    rng = np.random.default_rng(0)
    base = grads(x, w)
    for _ in range(4):
        moved = grads(x * (1 + u * rng.choice([-1, 1], x.shape)), w * (1 + u * rng.choice([-1, 1], w.shape)))
        for before, after, ref, f in zip(base, moved, refs, fields):
            room = f["scale"] - np.abs(ref.hi)
            assert (np.abs(after - before) <= u * room * 1.01 + 1e-300).all()


def test_families_cover_the_regimes_and_shapes():
    fmt = format_of("bfloat16")
    default = {name: cases.FAMILIES[name].cases("linear_cross_entropy", fmt, "default") for name in FORWARD.families}
    shapes = [c.arrays["weight"].shape for c in default["lce_real_shapes"]]
    assert shapes == [(257, 2048)]
    assert any(c.arrays["x"].shape[0] >= 256 for c in default["lce_chunks"])
    assert any("bias" in c.arrays for c in default["lce_gaussian"])
    assert {o for cs in default.values() for c in cs for o in c.options} >= {
        "reduction",
        "label_smoothing",
        "z_loss",
        "softcap",
    }
    full = cases.FAMILIES["lce_real_shapes"].make(FORWARD.name, fmt, cases.SIZES["full"], np.random.default_rng(0))
    assert [a[0]["weight"].shape for a in full] == [(32000, 4096), (128256, 2048)]


def test_materialised_float16_overflows_where_the_logits_pass_its_max():
    inputs, _ = _case("lce_large_logits", dtype="float16")
    assert not np.isfinite(lce.materialised(inputs["x"], inputs["weight"], inputs["target"])[:2]).any()
    (ref,) = FORWARD.reference(FORWARD, inputs, None, np.float16)
    assert np.isfinite(ref.value).all()  # (the logits are never rounded: the loss itself is small)
    best = lce.f32_logits(inputs["x"], inputs["weight"], inputs["target"])
    assert np.abs(best.astype(np.float64) - ref.value.astype(np.float64)).max() <= 2 * 2.0**-10 * np.abs(ref.hi).max()


def test_weight_gradient_accumulated_in_bfloat16_loses_chunks():
    """Liger-Kernel #1391: dweight summed across chunks of rows in bfloat16 is off by far more than summed in
    float32, on many rows (its error grows with the number of chunks: 32 here)."""
    inputs, options = _case("lce_chunks", "linear_cross_entropy_grad", "bfloat16", "default")
    args = (inputs["x"], inputs["weight"], inputs["target"], inputs["g"])
    refs = GRAD.reference(GRAD, inputs, None, ml_dtypes.bfloat16, **options)
    exact = refs[1].hi
    bad = lce_grad.accumulated_in_dtype(*args, **options)[1].astype(np.float64)
    good = lce_grad.chunked(*args, **options)[1].astype(np.float64)
    assert np.abs(bad - exact).max() > 2.5 * np.abs(good - exact).max()


def test_filtered_gradient_loses_at_most_what_it_documents():
    """CCE's filter drops entries with p < 2**-12: dx is off by at most FILTER_EPS sum_v |W_vh| per unit of |g|
    (plus rounding), and more than rounding where small p's are many."""
    inputs, _ = _case("lce_gaussian", "linear_cross_entropy_grad", "float32", "default")
    args = (inputs["x"], inputs["weight"], inputs["target"], inputs["g"])
    (dx_ref, _, _) = evaluate_linear_cross_entropy_grad(*args, dtype=np.float32)
    dx = lce_grad.filtered(*args)[0].astype(np.float64)
    w = np.abs(inputs["weight"].astype(np.float64)).sum(axis=0)
    g = np.abs(inputs["g"].astype(np.float64))[:, None]
    off = np.abs(dx - dx_ref.hi)
    assert (off <= lce_grad.FILTER_EPS * g * w * 1.01 + 1e-5 * np.abs(dx_ref.hi)).all()
    assert off.max() > 1e3 * 2.0**-24 * np.abs(dx_ref.hi).max()


def test_filter_bound_is_what_skipping_the_small_entries_can_cost():
    """The declared filter's bound B, written out entry by entry: every entry whose p (not the target's) or p - q
    is below twice the threshold may be skipped, and B sums |g p_nv| (|g (p - 1)| at a target) over them against
    |W_vh|, |x_nh| and 1 (dx, dweight, dbias)."""
    inputs, _ = _case("lce_gaussian", "linear_cross_entropy_grad", "float32")
    x, w, g = (inputs[n].astype(np.float64) for n in ("x", "weight", "g"))
    t = inputs["target"]
    eps = 2 * 2.0**-12
    b_dx, b_dw, b_db = np.zeros(x.shape), np.zeros(w.shape), np.zeros(len(w))
    for n in range(len(x)):
        z = [float(np.dot(x[n], w[v])) for v in range(len(w))]
        e = [np.exp(zv - max(z)) for zv in z]
        for v in range(len(w)):
            p = e[v] / sum(e)
            a = p - (v == t[n])
            if (p < eps and v != t[n]) or abs(a) < eps:
                b_dx[n] += abs(g[n] * a) * np.abs(w[v])
                b_dw[v] += abs(g[n] * a) * np.abs(x[n])
                b_db[v] += abs(g[n] * a)
    got = GRAD.approximations["filter"](GRAD, inputs, {}, "2**-12", format_of("float32"))
    for found, expected in zip(got, (b_dx, b_dw, b_db)):
        np.testing.assert_allclose(found, expected, rtol=1e-9, atol=1e-300)
    assert b_dw.max() > 0  # (the case has entries to skip)
    assert GRAD.approximations["filter"](GRAD, inputs, {}, "auto", format_of("bfloat16"))[0].max() == pytest.approx(
        b_dx.max(), rel=1e-12
    )  # ("auto" in bfloat16 is its epsilon / 32 = 2**-12, as Cut Cross-Entropy's filter_eps="auto")


def _audited(fn, conventions=None, dtypes=("bfloat16", "float32")):
    import softaudit

    marked = softaudit.candidate(fn, kind="linear_cross_entropy_grad", name="filter_test", conventions=conventions)
    families = ["lce_gaussian", "lce_confident", "lce_ignored", "lce_options"]
    result = softaudit.audit(marked, dtypes=dtypes, families=families, isolation="none", workers=1, cache=False)
    return result.table


def _filtering_at(threshold):
    def filtered(x, weight, target, g, *, bias=None, **options):
        return lce_grad._filtered(x, weight, target, g, bias, options, threshold)

    return filtered


def test_declared_filter_is_a_warn_with_its_size_where_undeclared_it_fails():
    """docs/policy.md: a candidate that declares its gradient filter is judged a warn, with its size, while every
    element is within u (scale + T) + B; the same function undeclared fails as any candidate would."""
    undeclared = _audited(_filtering_at(2.0**-12))
    declared = _audited(_filtering_at(2.0**-12), {"filter": "2**-12"})
    failed = undeclared.verdict == "fail"
    assert failed.sum() >= 10
    assert (declared.verdict != "fail").all()
    assert (declared[failed.values].verdict == "warn").all()
    warned = declared[declared.cause == "approximation"]
    assert len(warned) == failed.sum()
    assert warned.note.str.contains("past the fail line by what its declared 2\\*\\*-12 gradient filter may skip").all()
    assert declared.note.str.contains("judged against its declared 2\\*\\*-12 gradient filter").all()
    assert (warned.fix.str.contains("filter_eps=None")).all()


def test_filter_past_its_declared_threshold_fails():
    """A kernel that filters at 2**-8 while declaring 2**-12 skips entries the declared filter keeps: past u (scale
    + T) + B, a fail that says so."""
    rows = _audited(_filtering_at(2.0**-8), {"filter": "2**-12"}, dtypes=("float32",))
    failed = rows[rows.verdict == "fail"]
    assert len(failed) >= 6
    assert failed.note.str.contains("past u \\(scale \\+ T\\) \\+ B of its declared 2\\*\\*-12 gradient filter").all()


def test_a_bad_filter_declaration_is_one_line():
    with pytest.raises(ValueError, match="convention filter='1e-4' for linear_cross_entropy_grad is not one of"):
        GRAD.declaration({"filter": "1e-4"})
    with pytest.raises(ValueError, match="linear_cross_entropy has no conventions to declare"):
        FORWARD.declaration({"filter": "2**-12"})


def test_budget_covers_the_standard_algorithm():
    """The fail line's budget T bounds the materialised version's error (logits and dz in the dtype) in bfloat16:
    |y - r| <= u (scale + T) on every family of the quick suite."""
    u = 2.0**-8
    for family in GRAD.families:
        inputs, options = _case(family, "linear_cross_entropy_grad", "bfloat16")
        args = (inputs["x"], inputs["weight"], inputs["target"], inputs["g"])
        refs = evaluate_linear_cross_entropy_grad(*args, dtype=ml_dtypes.bfloat16, bias=inputs.get("bias"), **options)
        fields = GRAD.conditioning(GRAD, inputs, None, refs, **options)
        exact = tuple(r.hi for r in refs)
        lines = budget.line(GRAD.name, inputs, None, exact, 8, -126, options)
        got = lce_grad.materialised(*args, bias=inputs.get("bias"), **options)
        for y, ref, f, (t, _) in zip(got, refs, fields, lines):
            err = np.abs(y.astype(np.float64) - ref.hi)
            assert (err <= u * (f["scale"] + t) + 2.0**-133).all(), family


def test_reference_loss_is_cross_entropy_of_exact_logits():
    """Where x W^T is exact in float64 (small integers), the loss is cross_entropy's reference on those logits."""
    from softaudit.reference import evaluate_cross_entropy

    rng = np.random.default_rng(1)
    x, w = rng.integers(-8, 8, (3, 5)).astype(np.float64), rng.integers(-8, 8, (7, 5)).astype(np.float64)
    t = np.array([0, 3, 6])
    for dtype in (np.float32, ml_dtypes.bfloat16):
        got = evaluate_linear_cross_entropy(x, w, t, dtype=dtype, label_smoothing=0.1).value
        want = evaluate_cross_entropy(x @ w.T, t, dtype=dtype, label_smoothing=0.1).value
        np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


def test_hunt_draws_the_kind():
    assert _strategies.for_kind(FORWARD) is _strategies.linear_cross_entropy
    assert _strategies.for_kind(GRAD) is _strategies.linear_cross_entropy
    assert "bias" in _strategies.keywords(GRAD)


def test_the_chunk_accumulation_in_bfloat16_is_named():
    """Liger-Kernel #1391's mistake, in the built-in that makes it, is diagnosed by its bug model."""
    import softaudit

    table = softaudit.audit(
        lce_grad.accumulated_in_dtype,
        kind="linear_cross_entropy_grad",
        dtypes=["bfloat16"],
        families=["lce_chunks"],
        suite="default",
        isolation="none",
        cache=False,
    ).table
    judged = table[table.verdict.isin(["warn", "fail"])]
    assert set(judged.output) >= {"dweight"}
    assert set(judged.finding) == {"weight_grad_accumulated_in_dtype"}
