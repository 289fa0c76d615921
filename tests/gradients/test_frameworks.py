"""The framework gradient candidates (softaudit.frameworks.torch and .jax, the *_grad kinds) on the CPU, called as an
audit calls them (`call_all`: numpy in, the bridge's tensors, numpy out), against the float64 VJPs of oracle.py."""

import ml_dtypes
import numpy as np
import pytest

import softaudit
from softaudit.adapters._call import call_all
from softaudit.adapters._targets import load_target

from . import oracle as O

RNG = np.random.default_rng(5)
X = RNG.standard_normal((6, 33)) * 3
G = RNG.standard_normal((6, 33))
MASK = RNG.random((6, 33)) < 0.6
MASK[:, 0], MASK[2] = True, False
KEPT = np.arange(6) != 2  # (row 2 is fully masked)
TOLERANCE = {np.float64: 1e-13, np.float32: 1e-5, ml_dtypes.bfloat16: 2e-2}


def candidates(framework):
    pytest.importorskip(framework)
    return {c.name: c for c in load_target(f"softaudit.frameworks.{framework}") if c.kind.endswith("_grad")}


def called(c, arrays, mask=None):
    """The candidate's outputs through softaudit's own call path, in the arrays' dtype."""
    x = next(iter(arrays.values()))
    shapes = tuple(arrays[n].shape for n in ("q", "k", "v")) if c.kind == "attention_grad" else (x.shape,)
    outs, note = call_all(c, arrays, mask, shapes, x.dtype, timeout=None)
    assert note == ""  # the dtype in is the dtype out
    return outs


def row_checks(prefix, x, g):
    """(candidate name, arrays, mask, exact float64 dx, rows compared) for each row gradient of a framework."""
    masked = {"torch": ["masked_fill_neginf_grad", "masked_fill_finfo_min_grad"], "jax.nn": ["softmax_where_grad"]}
    return [
        (f"{prefix}.softmax_grad", {"x": x, "g": g}, None, O.softmax_vjp(x, g), slice(None)),
        (f"{prefix}.log_softmax_grad", {"x": x, "g": g}, None, O.log_softmax_vjp(x, g), slice(None)),
        (f"{prefix}.logsumexp_grad", {"x": x, "g": g[:, 0]}, None, O.logsumexp_vjp(x, g[:, 0]), slice(None)),
        *[(f"{prefix}.{name}", {"x": x, "g": g}, MASK, O.softmax_vjp(x, g, MASK), KEPT) for name in masked[prefix]],
    ]


@pytest.mark.parametrize(
    "framework, prefix, dtype",
    [("torch", "torch", d) for d in TOLERANCE] + [("jax", "jax.nn", np.float32)],
    ids=lambda v: getattr(v, "__name__", v),
)  # (jax compiles each dtype: one is enough)
def test_row_gradients_match_the_float64_vjp(framework, prefix, dtype):
    found = candidates(framework)
    checks = row_checks(prefix, X.astype(dtype), G.astype(dtype))
    assert {name for name, *_ in checks} == {
        n for n, c in found.items() if c.kind not in ("attention_grad", "attention_sinks_grad", "cross_entropy_grad")
    }
    for name, arrays, mask, exact, rows in checks:
        (got,) = called(found[name], arrays, mask)
        assert O.normwise(got[rows], exact[rows]) <= TOLERANCE[dtype], name


def test_torch_masking_idioms_keep_autograds_zeros():
    """masked_fill's backward zeroes the filled entries: on the fully masked row, whose -inf forward is NaN, the
    gradient reaching x is 0 (the NaN goes into the loss, not dx); the audit shows what torch does."""
    found = candidates("torch")
    arrays = {"x": X.astype(np.float32), "g": G.astype(np.float32)}
    for name in ("torch.masked_fill_neginf_grad", "torch.masked_fill_finfo_min_grad"):
        (got,) = called(found[name], arrays, MASK)
        assert (got[2] == 0).all() and (got[~MASK] == 0).all(), name


def test_jax_softmax_where_gives_zero_gradient_on_masked_entries():
    (got,) = called(
        candidates("jax")["jax.nn.softmax_where_grad"], {"x": X.astype(np.float32), "g": G.astype(np.float32)}, MASK
    )
    assert (got[~MASK] == 0).all()


def test_a_quick_audit_of_the_row_gradients_judges_them_against_the_exact_vjp():
    pytest.importorskip("torch")
    names = ["softmax_grad", "log_softmax_grad", "logsumexp_grad", "masked_fill_neginf_grad"]
    table = softaudit.audit(
        [f"softaudit.frameworks.torch:{n}" for n in names], dtypes=["float32"], suite="quick", families=["textbook"]
    ).table
    rows = {r.candidate: r for r in table.itertuples()}
    assert sorted(rows) == sorted(f"torch.{n}" for n in names) and table.verdict.isin(["pass", "warn"]).all()
    # autograd's exp(x - lse), with lse rounded to float32, where best practice rounds p g once: far past best
    # practice in ulps, but within 2 u of what rounding the logits costs (the conditioning), as best practice is
    lse = rows["torch.logsumexp_grad"]
    assert lse.max_ulp > 100 * lse.best_ulp and lse.max_cond_err < 2 and lse.verdict == "pass", lse.note


def test_a_dtype_torch_lacks_is_a_skip_row():
    pytest.importorskip("torch")
    table = softaudit.audit(
        "softaudit.frameworks.torch:softmax_grad", dtypes=["float8_e4m3fn"], suite="quick", families=["gaussian"]
    ).table
    assert (table.verdict == "skip").all() and table.note.str.contains("not implemented").all()


def _attention(dtype, mask):
    q, k, v, g = (RNG.standard_normal(s).astype(dtype) for s in ((2, 5, 16), (2, 9, 16), (2, 9, 16), (2, 5, 16)))
    return {"q": q, "k": k, "v": v, "g": g}, mask


CAUSAL = np.tril(np.ones((5, 9), bool))
PADDED = RNG.random((5, 9)) < 0.7
PADDED[:, 0] = True


@pytest.mark.parametrize("mask", [None, CAUSAL, PADDED], ids=["none", "causal", "random"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=lambda d: np.dtype(d).name)
def test_attention_gradients_on_the_cpu_match_the_float64_vjp(dtype, mask):
    """Each SDPA mask style and CPU backend (torch has a CPU flash kernel); is_causal runs on the causal mask only."""
    arrays, mask = _attention(dtype, mask)
    exact = O.attention_vjp(*arrays.values(), mask=mask)
    found = {**candidates("torch"), **candidates("jax")}
    ran = []
    for name in [
        "torch.sdpa_bool_math_grad",
        "torch.sdpa_float_math_grad",
        "torch.sdpa_causal_math_grad",
        "torch.sdpa_bool_flash_grad",
        "torch.sdpa_float_flash_grad",
        "torch.sdpa_causal_flash_grad",
        "jax.nn.dot_product_attention_grad",
    ]:
        if "causal" in name and mask is PADDED:
            with pytest.raises(softaudit.CandidateSkip, match="causal masks only"):
                called(found[name], arrays, mask)
            continue
        # jax.nn.dot_product_attention takes the logits to float32 even in 64-bit mode: float32 accuracy
        tolerance = TOLERANCE[np.float32 if name.startswith("jax") else dtype]
        for grad, ref in zip(called(found[name], arrays, mask), exact):
            assert O.normwise(grad, ref) <= tolerance, name
        ran.append(name)
    assert len(ran) == (5 if mask is PADDED else 7)


@pytest.mark.parametrize(
    "q_batch, kv_batch", [((2, 4), (2, 1)), ((2, 3), ()), ((1, 2, 3), (1, 2, 1))], ids=["one", "no axis", "grouped"]
)
def test_attention_gradients_of_shared_kv_heads_have_k_and_v_shapes(q_batch, kv_batch):
    """K and V shared by query heads (an axis of size 1, or none): autograd and jax.vjp sum the expand's gradient,
    so dk and dv come back in k's and v's shapes (call_all checks each shape) and equal the float64 VJP of the
    expanded inputs summed over the heads."""
    q, g = (RNG.standard_normal(q_batch + (5, 16)).astype(np.float32) for _ in range(2))
    k, v = (RNG.standard_normal(kv_batch + (9, 16)).astype(np.float32) for _ in range(2))
    mask = np.broadcast_to(CAUSAL, q_batch + CAUSAL.shape)
    expanded = [np.broadcast_to(a, q_batch + a.shape[-2:]) for a in (k, v)]
    dq, dk, dv = O.attention_vjp(q, *expanded, g, mask=mask)
    shared = tuple(range(len(q_batch) - len(kv_batch))) + tuple(
        len(q_batch) - len(kv_batch) + i for i, n in enumerate(kv_batch) if n == 1
    )
    exact = (dq, dk.sum(axis=shared).reshape(k.shape), dv.sum(axis=shared).reshape(v.shape))
    found = {**candidates("torch"), **candidates("jax")}
    for name in ("torch.sdpa_bool_math_grad", "torch.sdpa_bool_flash_grad", "jax.nn.dot_product_attention_grad"):
        got = called(found[name], {"q": q, "k": k, "v": v, "g": g}, mask)
        assert [a.shape for a in got] == [q.shape, k.shape, v.shape], name
        for grad, ref in zip(got, exact):
            assert O.normwise(grad, ref) <= TOLERANCE[np.float32], name


def test_jax_attention_gradient_in_float64_is_only_float32_accurate():
    arrays, _ = _attention(np.float64, None)
    got = called(candidates("jax")["jax.nn.dot_product_attention_grad"], arrays)
    assert max(O.normwise(a, b) for a, b in zip(got, O.attention_vjp(*arrays.values()))) > 1e-9


@pytest.mark.parametrize("name", ["torch.sdpa_bool_efficient_grad", "torch.sdpa_bool_cudnn_grad"])
def test_a_cuda_only_sdpa_backend_on_the_cpu_is_a_skip(name):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is present")
    arrays, _ = _attention(np.float32, None)
    with pytest.raises(softaudit.CandidateSkip):
        called(candidates("torch")[name], arrays)


def test_sdpa_grad_makes_a_candidate_pinned_to_a_device():
    pytest.importorskip("torch")
    from softaudit.adapters._candidate import marking
    from softaudit.frameworks.torch import sdpa_grad

    mark = marking(sdpa_grad("bool", "flash", device="cuda"))
    assert (mark.kind, mark.name, mark.framework, mark.device) == (
        "attention_grad",
        "torch.sdpa_bool_flash_cuda_grad",
        "torch",
        "cuda",
    )
