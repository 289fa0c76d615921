"""PyTorch's and JAX's attention with score modifiers and with the lse, against the exact reference: FlexAttention
and SDPA with a bias pass; JAX aligns is_causal and local windows top-left, as it documents and declares (undeclared,
the audit names the convention it matches); PyTorch's CPU flash kernel and JAX give a query with no key a finite lse
where the exact one is -inf. Each fail is checked here outside softaudit, with the framework called directly."""

import dataclasses

import numpy as np
import pytest

import softaudit

MODIFIED = ["attn_softcap", "attn_alibi", "attn_window", "attn_causal", "attn_bias"]


def _audit(target, kind, families, dtypes=("float32",)):
    return softaudit.audit(
        target, kind=kind, families=families, dtypes=list(dtypes), suite="quick", isolation="none", cache_dir="off"
    ).table


@pytest.mark.parametrize("name", ["flex_attention", "flex_attention_block_mask", "sdpa_bias"])
def test_torch_with_modifiers_passes_what_it_takes(name):
    pytest.importorskip("torch")
    table = _audit(f"softaudit.frameworks.torch:{name}", "attention", MODIFIED, ("float32", "bfloat16"))
    ran = table[table.verdict != "skip"]
    assert len(ran) >= 6 and set(ran.verdict) <= {"pass", "warn"}, table[["family", "verdict", "note"]]
    assert table[table.verdict == "skip"].note.str.startswith("does not take").all()


def test_flex_attentions_block_mask_keeps_what_the_mask_keeps_and_gives_a_query_with_no_key_zeros():
    """The mask as FlexAttention's mask_mod and BlockMask (blocks of 128 keys with nothing kept are skipped): on a
    mask with kept keys scattered over three blocks and a query with none, the kept keys' outputs are the score_mod
    form's and the exact ones (float64), and the query with no key gets zeros, as with the score_mod (the audit's
    fully_masked rule: zeros)."""
    torch = pytest.importorskip("torch")
    from softaudit.frameworks.torch import flex_attention, flex_attention_block_mask

    rng = np.random.default_rng(3)
    q, k, v = (torch.tensor(rng.standard_normal(shape)) for shape in ((2, 6, 16), (2, 300, 16), (2, 300, 8)))
    keep = torch.tensor(rng.random((2, 6, 300)) < 0.02)
    keep[:, :, 250] = True
    keep[1, 3] = False  # a query with no key
    blocked, scored = flex_attention_block_mask(q, k, v, keep), flex_attention(q, k, v, keep)
    exact = softaudit.reference.attention(q.numpy(), k.numpy(), v.numpy(), keep.numpy(), dtype="float64")
    assert torch.equal(blocked[1, 3], torch.zeros(8, dtype=torch.float64))
    defined = np.ones((2, 6), bool)
    defined[1, 3] = False
    assert np.allclose(blocked.numpy()[defined], exact[defined], rtol=1e-12, atol=1e-14)
    assert np.allclose(blocked.numpy(), scored.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("target", ["torch:sdpa_sinks", "jax:dot_product_attention_sinks"])
def test_sinks_as_one_more_key_of_value_zero_pass_and_a_query_with_no_key_gives_zeros(target):
    """No PyTorch or JAX attention op takes sinks; model code adds each head's sink as a key whose score is the
    sink's logit and whose value is 0. Both forms pass attn_sinks (learned sinks and softmax1) in float32 and
    bfloat16, skip cases without sinks, and give a query with no key zeros (it attends the sink alone), as the exact
    result is."""
    framework, name = target.split(":")
    pytest.importorskip(framework)
    table = _audit(
        f"softaudit.frameworks.{target}", "attention", ["attn_sinks", "attn_gaussian"], ("float32", "bfloat16")
    )
    by = table.set_index(["dtype", "family"]).verdict
    assert set(by.xs("attn_sinks", level="family")) <= {"pass", "warn"}, table[["family", "verdict", "note"]]
    assert set(by.xs("attn_gaussian", level="family")) == {"skip"}
    module = __import__(f"softaudit.frameworks.{framework}", fromlist=[name])
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for shape in ((1, 2, 3, 8), (1, 2, 20, 8), (1, 2, 20, 8)))
    keep = rng.random((3, 20)) < 0.5
    keep[1] = False
    sinks = np.array([1.5, -0.5], np.float32)
    if framework == "torch":
        import torch

        out = getattr(module, name)(*map(torch.tensor, (q, k, v)), torch.tensor(keep), sinks=torch.tensor(sinks))
    else:
        out = getattr(module, name)(q, k, v, keep, sinks=sinks)
    out = np.asarray(out, dtype=np.float64)
    exact = softaudit.reference.attention(q, k, v, keep, dtype="float64", sinks=sinks.astype(np.float64))
    assert np.array_equal(out[:, :, 1], np.zeros((1, 2, 8)))
    assert np.allclose(out, exact, rtol=2e-6, atol=2e-7)


def _undeclared(target, kind):
    """The framework candidate without its declared conventions: judged against the kind's defaults."""
    return dataclasses.replace(softaudit.adapters.load_target(target, kind)[0], conventions=())


def test_jax_aligns_causal_and_windows_top_left_as_declared_and_the_audit_says_so():
    jax = pytest.importorskip("jax")
    target, families = "softaudit.frameworks.jax:dot_product_attention_modified", ["attn_causal", "attn_window"]
    declared = _audit(target, "attention", families)
    assert set(declared.verdict) == {"pass"}
    assert dict(zip(declared.family, declared.note)) == {
        "attn_causal": "judged against its declared top-left causal alignment",
        "attn_window": "judged against its declared top-left window alignment",
    }
    table = _audit(_undeclared(target, "attention"), "attention", families)
    notes = dict(zip(table.family, table.note))
    assert set(table.verdict) == {"fail"}
    assert "matches top-left causal, not bottom-right" in notes["attn_causal"]
    assert "matches window (256, 0) aligned top-left, not bottom-right" in notes["attn_window"]
    # Outside softaudit: is_causal=True with 3 queries over 5 keys is the top-left mask, not the bottom-right one.
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 3, 1, 8), (1, 5, 1, 8), (1, 5, 1, 8)))
    causal = jax.nn.dot_product_attention(q, k, v, is_causal=True)
    top_left = np.tril(np.ones((3, 5), bool))
    bottom_right = np.tril(np.ones((3, 5), bool), k=2)
    explicit = [jax.nn.dot_product_attention(q, k, v, mask=m[None, None]) for m in (top_left, bottom_right)]
    assert np.array_equal(causal, explicit[0]) and not np.allclose(causal, explicit[1])


def test_torch_cpu_flash_gives_a_query_with_no_key_lse_0():
    torch = pytest.importorskip("torch")
    table = _audit("softaudit.frameworks.torch:sdpa_flash_cpu_lse", "attention_lse", ["lse_empty"])
    row = table[table.output == "lse"].iloc[0]
    assert row.verdict == "fail" and row.wrong_inf > 0
    # Outside softaudit: the kernel's logsumexp for a query whose every key is masked is 0, where log 0 = -inf.
    q, k, v = torch.randn(1, 1, 3, 8), torch.randn(1, 1, 5, 8), torch.randn(1, 1, 5, 8)
    mask = torch.zeros(1, 1, 3, 5)
    mask[0, 0, 0] = float("-inf")
    _, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask)[:2]
    assert lse[0, 0, 0].item() == 0.0 and bool(torch.isfinite(lse).all())


def test_jax_gives_a_query_with_no_key_a_finite_lse():
    jax = pytest.importorskip("jax")
    table = _audit("softaudit.frameworks.jax:dot_product_attention_lse", "attention_lse", ["lse_empty"])
    assert dict(zip(table.output, table.verdict))["lse"] == "fail"
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 3, 1, 8), (1, 5, 1, 8), (1, 5, 1, 8)))
    mask = np.ones((1, 1, 3, 5), bool)
    mask[..., 0, :] = False
    _, lse = jax.nn.dot_product_attention(q, k, v, mask=mask, return_residual=True)
    assert np.isfinite(np.asarray(lse)[0, 0, 0])  # log of an empty sum is -inf


def test_torch_sdpa_bias_backward_takes_causal_and_windows_and_passes():
    pytest.importorskip("torch")
    table = _audit("softaudit.frameworks.torch:sdpa_bias_grad", "attention_grad", ["attn_causal", "attn_window"])
    assert len(table) == 2 * 3 and set(table.verdict) == {"pass"}, table[["family", "output", "verdict", "note"]]


def test_jax_backward_aligns_causal_top_left_as_its_forward_and_the_audit_says_so():
    jax = pytest.importorskip("jax")
    target = "softaudit.frameworks.jax:dot_product_attention_modified_grad"
    declared = _audit(target, "attention_grad", ["attn_causal"])
    assert set(declared.verdict) == {"pass"}
    assert set(declared.note) == {"judged against its declared top-left causal alignment"}
    table = _audit(_undeclared(target, "attention_grad"), "attention_grad", ["attn_causal"])
    assert set(table.verdict) == {"fail"}
    assert "matches top-left causal, not bottom-right" in table[table.output == "dq"].note.iloc[0]
    # Outside softaudit: the VJP of is_causal=True with 3 queries over 5 keys is the top-left mask's.
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 3, 1, 8), (1, 5, 1, 8), (1, 5, 1, 8)))
    g = rng.standard_normal((1, 3, 1, 8)).astype(np.float32)

    def vjp(**how):
        return jax.vjp(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, **how), q, k, v)[1](g)

    causal = vjp(is_causal=True)
    top_left, bottom_right = (vjp(mask=np.tril(np.ones((3, 5), bool), k=d)[None, None]) for d in (0, 2))
    assert all(np.array_equal(a, b) for a, b in zip(causal, top_left))
    assert not all(np.allclose(a, b) for a, b in zip(causal, bottom_right))


@pytest.mark.parametrize(
    "name, families", [("sdpa_bias_grad", ["attn_bias", "attn_alibi"]), ("sdpa_sinks_grad", ["attn_sinks"])]
)
def test_torch_backward_with_a_bias_alibi_and_sinks_passes_in_float32(name, families):
    """autograd through SDPA with the bias and ALiBi in its float attn_mask, and through the sink as a key of
    value 0: every float32 row passes but where ALiBi takes far keys' gradients below float32's normal range and
    some come out 0 (a warn that says so); no row fails in bfloat16 (FlashAttention 2's form warns there too)."""
    pytest.importorskip("torch")
    table = _audit(f"softaudit.frameworks.torch:{name}", "attention_grad", families, ("float32", "bfloat16"))
    assert len(table) == len(families) * 2 * 3, table[["family", "dtype", "output", "verdict"]]
    f32 = table[table.dtype == "float32"]
    warned = f32[f32.verdict != "pass"]
    assert set(warned.verdict) <= {"warn"} and set(warned.family) <= {"attn_alibi"}, warned
    assert warned.note.str.contains("subnormal results came out 0").all(), warned.note
    assert "fail" not in set(table.verdict), table[["family", "dtype", "output", "verdict", "note"]]


@pytest.mark.parametrize(
    "name, family",
    [("dot_product_attention_modified_grad", "attn_bias"), ("dot_product_attention_sinks_grad", "attn_sinks")],
)
def test_jax_backward_with_a_bias_and_sinks_passes_in_float32_and_is_float32_accurate_in_float64(name, family):
    """float32 passes; float64 fails as JAX's float64 attention VJP does without a bias (its softmax in float32).
    Outside softaudit: with x64 on, jax.vjp of the biased attention in float64 is 1e-8-accurate against the float64
    oracle where a float64 backward is 1e-15-accurate."""
    jax = pytest.importorskip("jax")
    table = _audit(f"softaudit.frameworks.jax:{name}", "attention_grad", [family], ("float32", "float64"))
    assert set(table[table.dtype == "float32"].verdict) == {"pass"}, table[["dtype", "output", "verdict", "note"]]
    assert set(table[table.dtype == "float64"].verdict) == {"fail"}
    assert table[table.dtype == "float64"].note.str.contains("intermediates are kept in float32").any()

    from softaudit.adapters._bridge import context

    from ..gradients import oracle as O

    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal(s) for s in ((1, 4, 1, 16), (1, 6, 1, 16), (1, 6, 1, 16), (1, 4, 1, 16)))
    bias = rng.standard_normal((1, 1, 4, 6))
    with context("jax"):
        got = jax.vjp(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, bias=bias), q, k, v)[1](g)
    want = O.mp_attention_vjp(q[0, :, 0], k[0, :, 0], v[0, :, 0], g[0, :, 0], None, bias[0, 0])
    errors = [np.abs(np.asarray(a)[0, :, 0] - w).max() / np.abs(w).max() for a, w in zip(got, want)]
    assert all(a.dtype == np.float64 for a in got) and all(1e-10 < e < 1e-6 for e in errors), errors


def test_torch_softcap_backward_is_the_capped_formulas_in_float64_and_skips_a_case_without_a_cap():
    """autograd through attention with the cap written out (SDPA takes none), called as an audit calls it (numpy in,
    with the mask, causal, window, bias and ALiBi): in float64 it is the plain formulas of tests/gradients/oracle.py
    (dS = sigma P (dP - D), sigma = sech(s / cap)**2) to 1e-12, and far from them without sigma."""
    pytest.importorskip("torch")
    from softaudit.adapters._call import call_all
    from softaudit.adapters._targets import load_target

    from ..gradients import oracle as O

    found = {c.name: c for c in load_target("softaudit.frameworks.torch")}["torch.softcap_attention_grad"]
    rng = np.random.default_rng(7)
    q, g = (rng.standard_normal((2, 5, 16)) * 2 for _ in range(2))
    k, v = (rng.standard_normal((2, 40, 16)) * 2 for _ in range(2))
    mask = rng.random((5, 40)) < 0.7
    bias, slopes = rng.standard_normal((5, 40)), np.array([0.5, 0.25])
    offset = np.arange(40)[None, :] - (np.arange(5)[:, None] + 35)
    keep = mask & (offset <= 0) & (offset >= -30)
    arrays = {"q": q, "k": k, "v": v, "g": g, "bias": bias, "alibi_slopes": slopes}
    options = {"softcap": 4.0, "causal": True, "window": (30, 0)}
    shapes = (q.shape, k.shape, v.shape)
    got, _ = call_all(found, arrays, mask, shapes, np.float64, timeout=None, options=options)
    extra = bias - slopes[:, None, None] * np.abs(offset)
    exact = O.capped_attention_vjp(q, k, v, g, 4.0, keep, extra)
    dropped = O.capped_attention_vjp(q, k, v, g, 4.0, keep, extra, derivative=False)
    assert max(O.normwise(a, b) for a, b in zip(got, exact)) <= 1e-12
    assert min(O.normwise(a, b) for a, b in zip(got[:2], dropped[:2])) > 1e-2
    with pytest.raises(softaudit.CandidateSkip, match="a softcap"):
        call_all(found, {"q": q, "k": k, "v": v, "g": g}, mask, shapes, np.float64, timeout=None)
