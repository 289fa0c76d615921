"""softaudit.frameworks.cce: Cut Cross-Entropy's Triton kernels called through the adapter as an audit calls them (on
this CPU in Triton's interpreter), forward and backward, every option it takes (ignore_index, softcap, the
reductions, a bias folded in as a column), against float64 torch computed here; the options it lacks are skips
naming the release; and its gradient filter, declared, judged a warn where it acts, not a fail."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
pytest.importorskip("cut_cross_entropy")
ml_dtypes = pytest.importorskip("ml_dtypes")

from softaudit.adapters import load_target  # noqa: E402
from softaudit.adapters._call import call_all  # noqa: E402

from ._linear_exact import exact_linear  # noqa: E402


@pytest.fixture(scope="module")
def cce():
    return {c.name: c for c in load_target("softaudit.frameworks.cce")}


def _case(v=128, h=16, rows=4, seed=0, spread=2.0, dtype=np.float32):
    """x (rows, H), W (V, H) with logits about N(0, spread**2), a bias, targets with row 1 ignored, in dtype. V is
    a whole number of CCE's blocks of 128 classes: a softcap leaks into padded lanes (the next test)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, h)).astype(dtype)
    w = (rng.standard_normal((v, h)) * (spread / np.sqrt(h))).astype(dtype)
    b = rng.standard_normal(v).astype(dtype)
    t = rng.integers(0, v, rows)
    t[1] = -100
    return x, w, b, t


OPTIONS = [{}, {"reduction": "mean"}, {"reduction": "sum", "softcap": 5.0}, {"ignore_index": 3, "reduction": "mean"}]


def _named(o):
    return ",".join(f"{k}={v}" for k, v in o.items()) or "plain"


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("options", OPTIONS, ids=_named)
def test_forward_takes_every_option_it_has(cce, options, bias):
    x, w, b, t = _case()
    if options.get("ignore_index") == 3:
        t[t == -100] = 3
    arrays = {"x": x, "weight": w, "target": t} | ({"bias": b} if bias else {})
    shape = (1,) if options.get("reduction", "none") != "none" else (len(x),)
    (got,), note = call_all(cce["cce.linear_cross_entropy"], arrays, None, (shape,), x.dtype, 60, options=options)
    assert "ran in Triton's interpreter" in note
    exact = exact_linear(x, w, b if bias else np.zeros_like(b), t, **options).reshape(shape)
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", OPTIONS, ids=_named)
def test_unfiltered_backward_gives_dx_dweight_dbias(cce, options):
    """bfloat16 (its backward takes 16-bit hidden states only): (dx, dweight, dbias) within bfloat16's rounding of
    float64 autograd's, a g per row for reduction='none' and g = 0.375 for a mean or sum, dbias from the bias
    column."""
    x, w, b, t = _case(seed=1, dtype=ml_dtypes.bfloat16)
    if options.get("ignore_index") == 3:
        t[t == -100] = 3
    reduced = options.get("reduction", "none") != "none"
    g = np.array(0.375) if reduced else np.array([0.5, 2.0, -1.0, 3.0])
    arrays = {"x": x, "weight": w, "target": t, "g": g, "bias": b}
    shapes = (x.shape, w.shape, b.shape)
    got, _ = call_all(
        cce["cce.linear_cross_entropy_grad_unfiltered"], arrays, None, shapes, x.dtype, 60, options=options
    )
    for found, exact in zip(got, exact_linear(x, w, b, t, g, **options)):
        size = np.abs(exact).max()
        np.testing.assert_allclose(found.astype(np.float64), exact, rtol=2**-6, atol=2**-7 * size)


def test_its_softcap_turns_the_padded_lanes_of_the_last_block_into_minus_softcap(cce):
    """docs/kernels.md's report: CCE's forward sets the lanes past V in its last block of 128 classes to -inf, then
    softcaps them to -c, and they enter the log-sum-exp with weight e**-c each: with V = 96, 32 lanes, softcap 5,
    the loss is log(sum e**z + 32 e**-5) - z_y, not log(sum e**z) - z_y (float64 here, against float32's rounding)."""
    x, w, _, t = _case(v=96)
    t[1] = 0
    (got,), _ = call_all(
        cce["cce.linear_cross_entropy"],
        {"x": x, "weight": w, "target": t},
        None,
        ((4,),),
        x.dtype,
        60,
        options={"softcap": 5.0},
    )
    z = 5 * np.tanh((x.astype(np.float64) @ w.astype(np.float64).T) / 5)
    exact = np.log(np.exp(z).sum(1)) - z[np.arange(4), t]
    leaked = np.log(np.exp(z).sum(1) + 32 * np.exp(-5.0)) - z[np.arange(4), t]
    np.testing.assert_allclose(got, leaked, rtol=2e-6)
    assert (np.abs(got - exact) > 100 * 2.0**-24 * np.abs(exact)).all()  # (far past float32's rounding)


def test_what_it_lacks_is_a_skip_naming_the_release(cce):
    from softaudit.adapters import CandidateSkip
    from softaudit.frameworks import cce as module

    x, w, _, t = _case()
    with pytest.raises(CandidateSkip, match=r"cut-cross-entropy \S+'s linear_cross_entropy takes no label_smoothing"):
        module.linear_cross_entropy(*(torch.from_numpy(a) for a in (x, w, t)), label_smoothing=0.1)
    with pytest.raises(CandidateSkip, match="backward takes bfloat16 and float16 hidden states only"):
        module.linear_cross_entropy_grad(*(torch.from_numpy(a) for a in (x, w, t)), torch.ones(4))


def test_its_gradient_filter_acts_and_is_judged_against_its_declaration(cce, tmp_path):
    """Four similar rows with logits about N(0, 64) over 512 classes: most p are far below bfloat16's epsilon / 32 =
    2**-12, and CCE, which skips a block of 128 classes (sorted by their mean logit) only where every row's |p - q|
    is below it, skips whole blocks: the filtered dweight differs from the unfiltered one. The declared filter's
    rows are warns (within u (scale + T) + B) or passes, never fails; undeclared, the same kernel fails."""
    import softaudit

    x, w, _, t = _case(v=512, h=16, rows=4, seed=2, spread=8.0)
    x = (x[:1] + 0.05 * x).astype(ml_dtypes.bfloat16)  # (the rows alike: the same classes are small in each)
    w = w.astype(ml_dtypes.bfloat16)
    t[1] = 7
    g = np.array([1.0, 0.5, -2.0, 1.5])
    arrays = {"x": x, "weight": w, "target": t, "g": g}
    shapes = (x.shape, w.shape, (len(w),))
    filtered, _ = call_all(cce["cce.linear_cross_entropy_grad"], arrays, None, shapes, x.dtype, 60)
    unfiltered, _ = call_all(cce["cce.linear_cross_entropy_grad_unfiltered"], arrays, None, shapes, x.dtype, 60)
    moved = np.abs(filtered[1].astype(np.float64) - unfiltered[1].astype(np.float64))
    assert moved.max() > 0  # (it acted)

    def undeclared(x, weight, target, g, *, bias=None, **options):
        from softaudit.frameworks import cce as module

        return module.linear_cross_entropy_grad(x, weight, target, g, bias=bias, **options)

    plain = softaudit.candidate(undeclared, kind="linear_cross_entropy_grad", name="undeclared", framework="triton")
    np.savez(tmp_path / "filtered.npz", x=x.astype(np.float32), weight=w.astype(np.float32), target=t, g=g)
    table = softaudit.audit(
        [cce["cce.linear_cross_entropy_grad"], plain],
        dtypes=["bfloat16"],
        cases=[tmp_path / "filtered.npz"],
        families=["file:filtered"],
        cache=False,
        isolation="none",
        workers=1,
    ).table
    declared = table[table.candidate == "cce.linear_cross_entropy_grad"]
    assert set(declared.verdict) <= {"pass", "warn"} and "warn" in set(declared.verdict)
    assert declared.note.str.contains("judged against its declared auto gradient filter").all()
    assert list(table[table.candidate == "undeclared"].verdict) == list(declared.verdict)
