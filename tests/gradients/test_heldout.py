"""The held-out implementations (heldout.py) are what they claim: the sound ones accurate to the final rounding,
each defective one measurably wrong, for its stated reason, against the float64 VJPs of oracle.py."""

import ml_dtypes
import numpy as np
import pytest

from . import heldout as H
from . import oracle as O

DTYPES = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}
U = {name: float(ml_dtypes.finfo(t).eps) / 2 for name, t in DTYPES.items()}


def rows(dtype, seed=1):
    rng = np.random.default_rng(seed)
    x, g = (rng.standard_normal((8, 64)) * 3).astype(dtype), rng.standard_normal((8, 64)).astype(dtype)
    mask = rng.random((8, 64)) < 0.6
    mask[:, 0], mask[3] = True, False
    return x, mask, g


def attention_inputs(dtype, seed=2, masked=True):
    rng = np.random.default_rng(seed)
    q, k, v, g = (rng.standard_normal(s).astype(dtype) for s in ((2, 8, 64), (2, 40, 64), (2, 40, 16), (2, 8, 16)))
    mask = None
    if masked:
        mask = rng.random((8, 40)) < 0.7
        mask[:, 0], mask[5] = True, False
    return (q, k, v, g), mask


@pytest.mark.parametrize("dtype", DTYPES)
def test_sound_ones_are_accurate_to_the_final_rounding(dtype):
    x, mask, g = rows(DTYPES[dtype])
    assert O.normwise(H.sound_softmax_grad(x, g), O.softmax_vjp(x, g)) <= U[dtype]
    assert O.normwise(H.sound_masked_softmax_grad(x, mask, g), O.softmax_vjp(x, g, mask)) <= U[dtype]
    assert (H.sound_masked_softmax_grad(x, mask, g)[~mask] == 0).all()
    inputs, amask = attention_inputs(DTYPES[dtype])
    for got, exact in zip(H.sound_attention_grad(*inputs, mask=amask), O.attention_vjp(*inputs, mask=amask)):
        assert O.normwise(got, exact) <= U[dtype]


def test_the_sound_ones_agree_with_central_differences_in_float64():
    x, mask, g = rows(np.float64)
    x, g, mask = x[:2, :6], g[:2, :6], mask[:2, :6]
    assert np.allclose(H.sound_softmax_grad(x, g), O.central_difference(O.softmax, x, g), atol=1e-8)
    masked = H.sound_masked_softmax_grad(x, mask, g)
    assert np.allclose(masked, O.central_difference(lambda t: O.softmax(t, mask), x, g), atol=1e-8)


@pytest.mark.parametrize("dtype", DTYPES)
def test_missing_dot_is_off_by_exactly_p_times_the_dot(dtype):
    x, _, g = rows(DTYPES[dtype])
    exact = O.softmax_vjp(x, g)
    got = H.softmax_grad_missing_dot(x, g)
    assert O.normwise(got, exact) > 100 * U[dtype]
    p = O.softmax(x)
    repaired = got.astype(np.float64) - p * (g.astype(np.float64) * p).sum(-1, keepdims=True)
    assert O.normwise(repaired, exact) <= 2 * U[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_masking_defects_show_on_the_fully_masked_row(dtype):
    x, mask, g = rows(DTYPES[dtype])
    nan = H.masked_softmax_grad_nan_fully_masked(x, mask, g)
    assert np.isnan(nan[3]).all() and np.isfinite(np.delete(nan, 3, 0)).all()
    leak = H.masked_softmax_grad_leaks(x, mask, g).astype(np.float64)
    assert (leak[3] != 0).sum() > 32  # exact: all 0
    assert np.allclose(np.delete(leak, 3, 0), np.delete(O.softmax_vjp(x, g, mask), 3, 0), atol=4 * U[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_defects_are_wrong_where_their_reason_says(dtype):
    inputs, mask = attention_inputs(DTYPES[dtype])
    dq, dk, dv = O.attention_vjp(*inputs, mask=mask)

    def err(got):
        return [O.normwise(a, b) for a, b in zip(got, (dq, dk, dv))]

    sqrt_d = np.sqrt(inputs[0].shape[-1])
    # dk without c: exactly sqrt(d) times too large, dq and dv right
    e_q, e_k, e_v = err(H.attention_grad_dk_missing_scale(*inputs, mask=mask))
    assert e_q <= U[dtype] and e_v <= U[dtype] and abs(e_k - (sqrt_d - 1)) < 0.01 * sqrt_d
    # 1/d: everything from P on is wrong (P flatter), dv too
    assert min(err(H.attention_grad_scale_1_over_d(*inputs, mask=mask))) > 100 * U[dtype]
    # the wrong D: dv right (it does not use D), dq and dk off
    for defect in (H.attention_grad_delta_rowsum_do, H.attention_grad_delta_unnormalized_o):
        e_q, e_k, e_v = err(defect(*inputs, mask=mask))
        assert e_v <= U[dtype] and e_q > 100 * U[dtype] and e_k > 100 * U[dtype], defect.__name__
