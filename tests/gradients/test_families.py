"""The upstream-gradient and backward-bug families (softaudit/cases/_grad.py) are seeded and hold what they say."""

import math

import ml_dtypes
import numpy as np
import pytest

from softaudit.cases import _grad

from . import oracle as O


def rng():
    return np.random.default_rng(12)


def test_upstream_gradients_have_the_shape_asked_and_repeat_with_the_seed():
    for make in (_grad.gaussian_g, _grad.onehot_g, _grad.constant_g, _grad.wide_range_g):
        a, b = make(rng(), (3, 5)), make(rng(), (3, 5))
        assert a.shape == (3, 5) and a.dtype == np.float64 and np.array_equal(a, b)
    assert (_grad.onehot_g(rng(), (4, 9)).sum(-1) == 1).all()
    spread = np.abs(_grad.wide_range_g(rng(), (1000,)))
    assert spread.max() / spread.min() > 1e6


def test_cross_entropy_gradients_make_the_vjp_p_minus_onehot():
    x = rng().standard_normal((6, 10)) * 3
    g = _grad.cross_entropy_g(rng(), x)
    onehot = _grad.cross_entropy_g(rng(), x, log_softmax=True) * -6
    expected = (O.softmax(x) - onehot) / 6
    assert np.allclose(O.softmax_vjp(x, g), expected, atol=1e-15)
    assert np.allclose(O.log_softmax_vjp(x, -onehot / 6), expected, atol=1e-15)


def test_constant_g_has_a_zero_softmax_vjp():
    x = rng().standard_normal((4, 16))
    assert np.allclose(O.softmax_vjp(x, _grad.constant_g(rng(), x.shape, 3.0)), 0, atol=1e-15)


def test_similar_low_rank_puts_most_bfloat16_scores_just_below_the_row_maximum():
    arrays, mask = _grad.similar_low_rank(rng())
    assert mask is None and set(arrays) == {"q", "k", "v", "g"}
    q, k = (arrays[n].astype(ml_dtypes.bfloat16).astype(np.float64) for n in "qk")
    s = np.einsum("hid,hjd->hij", q, k) / math.sqrt(q.shape[-1])
    gap = s.max(-1, keepdims=True) - s
    assert ((gap > 0) & (gap < 2.0**-9)).mean() > 0.5


def test_keys_64_mod_128_carry_a_padding_mask_with_a_key_per_query():
    for arrays, mask in _grad.keys_64_mod_128(rng()):
        lk = arrays["k"].shape[-2]
        assert lk % 128 == 64 and mask.shape == (arrays["q"].shape[-2], lk) and mask.any(-1).all()


def test_constant_1000_overflows_16_bit_scores_but_has_a_finite_exact_gradient():
    arrays, _ = _grad.constant_1000(rng())
    q, k, v, g = (arrays[n] for n in "qkvg")
    assert float(q[0, 0] @ k[0, 0]) > float(np.finfo(np.float16).max)  # 64e6: inf in float16
    dq, dk, dv = O.attention_vjp(q, k, v, g)
    assert np.allclose(dq, 0) and np.allclose(dk, 0) and np.allclose(dv, g.sum(-2, keepdims=True) / k.shape[-2])


@pytest.mark.parametrize("make", [_grad.head_dim_256_causal])
def test_head_dim_256_causal(make):
    arrays, mask = make(rng())
    assert arrays["q"].shape[-1] == 256 and (mask == np.tril(mask)).all() and mask.all(-1).sum() == 1
