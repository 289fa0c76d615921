"""torch autograd and jax.vjp backward functions (softaudit/frameworks/_grad_*.py) on the CPU against the float64
VJPs of oracle.py."""

import ml_dtypes
import numpy as np
import pytest

from . import oracle as O

RNG = np.random.default_rng(5)
X = RNG.standard_normal((6, 33)) * 3
G = RNG.standard_normal((6, 33))
MASK = RNG.random((6, 33)) < 0.6
MASK[:, 0], MASK[2] = True, False
TOLERANCE = {np.float64: 1e-13, np.float32: 1e-5, ml_dtypes.bfloat16: 2e-2}




FRAMEWORKS = ["torch", "jax"]


def framework(name):
    pytest.importorskip(name)
    from importlib import import_module

    return import_module(f"softaudit.frameworks._grad_{name}")


@pytest.mark.parametrize("name, dtype", [(n, d) for n in FRAMEWORKS for d in TOLERANCE if (n, d) != ("jax", np.float32)],
                         ids=lambda v: getattr(v, "__name__", v))  # (jax compiles each: one dtype fewer)
def test_row_backwards_match_the_float64_vjp(name, dtype):
    f = framework(name)
    x, g = X.astype(dtype), G.astype(dtype)
    checks = [(f.softmax_grad(x, g), O.softmax_vjp(x, g)), (f.log_softmax_grad(x, g), O.log_softmax_vjp(x, g)),
              (f.logsumexp_grad(x, g[:, 0]), O.logsumexp_vjp(x, g[:, 0])),
              (f.softmax_grad(x.T, g.T, axis=0), O.softmax_vjp(x, g).T)]  # fmt: skip
    for got, exact in checks:
        assert got.dtype == x.dtype and got.shape == exact.shape
        assert O.normwise(got, exact) <= TOLERANCE[dtype]


def test_torch_masking_idioms_on_a_fully_masked_row():
    f = framework("torch")
    x, g = X.astype(np.float32), G.astype(np.float32)
    # the forward of the -inf idiom is NaN on that row, but masked_fill's backward zeroes the filled entries, so
    # the gradient reaching x is 0 there (the NaN poisons the loss, not dx)
    neginf = f.masked_fill_neginf_grad(x, MASK, g)
    assert (neginf[2] == 0).all()
    kept = np.arange(6) != 2
    assert O.normwise(neginf[kept], O.softmax_vjp(x, g, MASK)[kept]) <= 1e-5
    assert (neginf[~MASK] == 0).all()
    finfo = f.masked_fill_finfo_min_grad(x, MASK, g)
    assert np.isfinite(finfo).all() and (finfo[~MASK] == 0).all()


def test_jax_softmax_where_gives_zero_gradient_on_masked_entries():
    f = framework("jax")
    x, g = X.astype(np.float32), G.astype(np.float32)
    got = f.softmax_where_grad(x, MASK, g)
    kept = np.arange(6) != 2
    assert O.normwise(got[kept], O.softmax_vjp(x, g, MASK)[kept]) <= 1e-5
    assert (got[kept][~MASK[kept]] == 0).all()


def _attention(dtype, masked):
    q, k, v, g = (RNG.standard_normal(s).astype(dtype) for s in ((2, 5, 16), (2, 9, 16), (2, 9, 16), (2, 5, 16)))
    mask = None
    if masked:
        mask = RNG.random((5, 9)) < 0.7
        mask[:, 0] = True
    return (q, k, v, g), mask


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=lambda d: np.dtype(d).name)
def test_attention_backwards_on_the_cpu_match_the_float64_vjp(dtype, masked):
    inputs, mask = _attention(dtype, masked)
    exact = O.attention_vjp(*inputs, mask=mask)
    torch_grad = framework("torch").sdpa_grad
    found = {"math": (torch_grad(*inputs, mask=mask, backend="math"), TOLERANCE[dtype]),
             "flash": (torch_grad(*inputs, mask=mask, backend="flash"), TOLERANCE[dtype]),  # torch's CPU flash
             # jax.nn.dot_product_attention takes the logits to float32 even in 64-bit mode: float32 accuracy
             "jax": (framework("jax").dot_product_attention_grad(*inputs, mask=mask), TOLERANCE[np.float32])}
    for name, (got, tolerance) in found.items():
        for grad, ref, a in zip(got, exact, inputs):
            assert grad.dtype == a.dtype and grad.shape == a.shape
            assert O.normwise(grad, ref) <= tolerance, name


def test_jax_attention_backward_in_float64_is_only_float32_accurate():
    inputs, _ = _attention(np.float64, False)
    errors = [O.normwise(a, b) for a, b in zip(framework("jax").dot_product_attention_grad(*inputs), O.attention_vjp(*inputs))]
    assert max(errors) > 1e-9


@pytest.mark.parametrize("backend", ["efficient", "cudnn"])
def test_a_cuda_only_sdpa_backend_on_the_cpu_is_a_skip(backend):
    import softaudit

    inputs, _ = _attention(np.float32, False)
    with pytest.raises(softaudit.CandidateSkip):
        framework("torch").sdpa_grad(*inputs, backend=backend)
