"""assert_accurate and the pytest plugin's fixture."""

import re

import numpy as np
import pytest

import softaudit
from softaudit.policy import Policy


def in_float32(x, axis=-1):
    w = x.astype(np.float32)
    e = np.exp(w - w.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def in_dtype(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_assert_accurate_passes_a_sound_implementation():
    softaudit.assert_accurate(in_float32, kind="softmax", dtypes=["float16"], families=["gaussian", "long"])


def fast_exp_softmax(x, axis=-1):
    """A defect: Schraudolph's (1999) bit-trick exp, a few percent off, in a float32 softmax."""
    w = np.maximum(x.astype(np.float32) - x.max(axis=axis, keepdims=True), -87)
    e = (np.float32(12102203) * w + np.float32(1065353216)).astype(np.int32).view(np.float32)
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def test_a_precision_trade_off_passes_unless_strict():
    # Softmax in float16 arithmetic is what a plain kernel does: a warn (below best practice), not a defect.
    softaudit.assert_accurate(in_dtype, kind="softmax", dtypes=["float16"], families=["gaussian", "long"])
    with pytest.raises(AssertionError) as info:
        softaudit.assert_accurate(in_dtype, kind="softmax", dtypes=["float16"], families=["gaussian", "long"],
                                  policy=Policy(strict=True))  # fmt: skip
    assert re.search("warn +float16", str(info.value)) and "fix: " in str(info.value)


def test_assert_accurate_fails_a_defect_with_its_cause_and_fix():
    with pytest.raises(AssertionError) as info:
        softaudit.assert_accurate(fast_exp_softmax, kind="softmax", dtypes=["float32"], families=["gaussian"])
    message = str(info.value)
    assert "did not pass for softmax candidate" in message
    assert re.search("fail +float32 +gaussian", message) and "x the conditioning" in message and "fix: " in message


def test_the_plugin_fixture_is_the_same_function(assert_accurate):
    assert assert_accurate is softaudit.assert_accurate
