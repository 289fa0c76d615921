"""Moving a failure to its boundary (softaudit/hunt/_shrink.py), on failures defined here so the answer is known."""

import time

import numpy as np
import pytest

from softaudit.hunt._shrink import signature, to_boundary

FOREVER = float("inf")


def first_above(t: float, dtype) -> float:
    """The smallest value of the dtype above t > 0, stepped to with nextafter from 0.1% below t."""
    v = np.array(0.999 * t, dtype)
    assert float(v) <= t
    while float(v) <= t:
        v = np.nextafter(v, np.array(np.inf, dtype))
    return float(v)


def test_rows_the_failure_does_not_need_are_dropped_and_values_set_to_zero():
    x = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    inputs, mask, _ = to_boundary("softmax", {"x": x}, None, {}, lambda i, m, o: i["x"].shape[0] >= 2, FOREVER)
    assert mask is None
    np.testing.assert_array_equal(inputs["x"], np.zeros((2, 1), np.float32))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("sign", [1, -1])
def test_an_element_is_bisected_to_the_first_value_that_fails(dtype, sign):
    x = np.array([[0.5, sign * 1000.0, 2.0]], dtype)

    def fails(inputs, mask, options):
        return bool((sign * inputs["x"].astype(float) > 3.3).any())

    inputs, _, _ = to_boundary("softmax", {"x": x}, None, {}, fails, FOREVER)
    np.testing.assert_array_equal(inputs["x"], np.array([[sign * first_above(3.3, dtype)]], dtype))


def test_a_masked_row_keeps_its_mask_and_the_gradient_its_rows():
    rng = np.random.default_rng(1)
    x, g = rng.standard_normal((4, 6)).astype(np.float16), rng.standard_normal((4, 6)).astype(np.float16)
    mask = rng.random((4, 6)) < 0.5
    mask[2] = False

    def fails(inputs, mask, options):
        assert inputs["x"].shape == inputs["g"].shape == mask.shape  # (rows and columns dropped together)
        return bool((~mask.any(axis=-1)).any())

    inputs, mask, _ = to_boundary("masked_softmax_grad", {"x": x, "g": g}, mask, {}, fails, FOREVER)
    assert inputs["x"].shape == (1, 1) and not mask.any()


def test_attention_axes_broadcast_k_and_v_and_a_shared_mask_shrink_together():
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 3, 4, 8)).astype(np.float32)
    k, v = rng.standard_normal((2, 1, 5, 8)).astype(np.float32), rng.standard_normal((2, 1, 5, 6)).astype(np.float32)
    mask = np.ones((4, 5), bool)
    mask[1] = False

    sinks, bias = rng.standard_normal(3), rng.standard_normal((4, 5))

    def fails(inputs, mask, options):
        q, k, v = (inputs[n] for n in ("q", "k", "v"))
        np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], mask.shape[:-2])  # raises when inconsistent
        assert q.shape[-1] == k.shape[-1] and k.shape[-2] == v.shape[-2] == mask.shape[-1]
        assert mask.shape[-2] == q.shape[-2] and inputs["bias"].shape == mask.shape
        assert inputs["sinks"].shape == q.shape[-3:-2]  # (one per head: the axis before Lq)
        return bool((~mask.any(axis=-1)).any())

    arrays = {"q": q, "k": k, "v": v, "sinks": sinks, "bias": bias}
    inputs, mask, options = to_boundary("attention", arrays, mask, {"softcap": 5.0}, fails, FOREVER)
    shapes = {n: a.shape for n, a in inputs.items()}
    assert shapes == {"q": (1, 1), "k": (1, 1), "v": (1, 1), "sinks": (), "bias": (1, 1)}
    assert mask.shape == (1, 1) and not mask.any()
    assert options == {}  # (the softcap is not needed: dropped first)


def test_a_keyword_the_failure_needs_stays_and_cross_entropy_targets_go_with_their_rows():
    """A cross-entropy failure that needs a label smoothing and one row whose target is 3: the smoothing stays, the
    z-loss goes, the other rows go with their targets and g, and the targets are never bisected as floats."""
    rng = np.random.default_rng(3)
    logits, g = rng.standard_normal((6, 9)).astype(np.float16), rng.standard_normal(6).astype(np.float16)
    target = np.array([0, 3, 5, 3, 1, 2])

    def fails(inputs, mask, options):
        assert inputs["logits"].shape[0] == inputs["target"].shape[0] == inputs["g"].shape[0]
        assert inputs["target"].dtype == np.int64
        return options.get("label_smoothing") == 0.1 and bool((inputs["target"] == 3).any())

    arrays = {"logits": logits, "target": target, "g": g}
    options = {"label_smoothing": 0.1, "z_loss": 1e-4}
    inputs, _, options = to_boundary("cross_entropy_grad", arrays, None, options, fails, FOREVER)
    assert options == {"label_smoothing": 0.1}
    assert inputs["logits"].shape == (1, 1) and inputs["target"].tolist() == [3] and inputs["g"].tolist() == [0]


def test_merge_splits_shrink_as_an_axis_of_their_own():
    rng = np.random.default_rng(4)
    outputs, lses = rng.standard_normal((5, 2, 3, 4)), rng.standard_normal((5, 2, 3))
    lses[3, 1, 2] = -np.inf

    def fails(inputs, mask, options):
        assert inputs["outputs"].shape[:-1] == inputs["lses"].shape
        return bool(np.isneginf(inputs["lses"]).any())

    inputs, _, _ = to_boundary("merge_attention", {"outputs": outputs, "lses": lses}, None, {}, fails, FOREVER)
    assert inputs["outputs"].shape == (1, 1, 1) and inputs["lses"].shape == (1, 1)  # (the batch axis squeezed)
    assert inputs["lses"][0, 0] == -np.inf


def test_nothing_moves_past_the_deadline():
    x = np.full((3, 4), 100.0, np.float16)
    inputs, _, _ = to_boundary("softmax", {"x": x}, None, {}, lambda i, m, o: True, time.monotonic() - 1)
    assert inputs["x"] is x


def test_a_signature_keeps_the_words_and_drops_the_numbers():
    assert signature("3 NaN where the exact result is defined") == signature("1 NaN where the exact result is defined")
    nan, uniform = "fully masked rows give nan, expected zeros", "fully masked rows give uniform, expected zeros"
    assert signature(nan) != signature(uniform)
