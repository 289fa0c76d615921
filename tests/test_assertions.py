"""assert_accurate and the pytest plugin's fixture."""

import numpy as np
import pytest

import softaudit


def in_float32(x, axis=-1):
    w = x.astype(np.float32)
    e = np.exp(w - w.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def in_dtype(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_assert_accurate_passes_a_sound_implementation():
    softaudit.assert_accurate(in_float32, kind="softmax", dtypes=["float16"], families=["gaussian", "long"])


def test_assert_accurate_fails_with_a_readable_table():
    with pytest.raises(AssertionError) as info:
        softaudit.assert_accurate(in_dtype, kind="softmax", dtypes=["float16"], families=["gaussian", "long"])
    message = str(info.value)
    assert "did not pass for softmax candidate" in message
    assert "fail  float16" in message and "gaussian" in message and "ulp" in message


def test_the_plugin_fixture_is_the_same_function(assert_accurate):
    assert assert_accurate is softaudit.assert_accurate
