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
        softaudit.assert_accurate(
            in_dtype, kind="softmax", dtypes=["float16"], families=["gaussian", "long"], policy=Policy(strict=True)
        )
    assert re.search("warn +float16", str(info.value)) and "fix: " in str(info.value)


def test_assert_accurate_fails_a_defect_with_its_cause_and_fix():
    with pytest.raises(AssertionError) as info:
        softaudit.assert_accurate(fast_exp_softmax, kind="softmax", dtypes=["float32"], families=["gaussian"])
    message = str(info.value)
    assert "did not pass for softmax candidate" in message
    # (Schraudolph's exp without the correction, c = 0: the approximate_exp model's variant reproduces it)
    assert re.search("fail +float32 +gaussian", message) and "x u (scale + T)" in message
    assert "approximate_exp" in message and "fix: use an accurate exp" in message


def test_the_plugin_fixture_is_the_same_function(assert_accurate):
    assert assert_accurate is softaudit.assert_accurate


USER_TESTS = """
import numpy as np
import softaudit


def naive(x, axis=-1):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def test_defect():
    softaudit.assert_accurate(naive, kind="softmax", dtypes=["float16"], families=["gaussian"])


def test_typo():
    softaudit.assert_accurate(naive, kind="sofmax", dtypes=["float16"])


def test_missing_target():
    softaudit.assert_accurate("no_such_module_xyz:f", kind="softmax", dtypes=["float16"])
"""


def test_pytest_shows_the_users_line_and_the_message_not_softaudits_frames(tmp_path):
    import subprocess
    import sys

    (tmp_path / "test_user.py").write_text(USER_TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    out = done.stdout
    assert done.returncode == 1 and "3 failed" in out, out
    assert "softaudit/" not in out and "softaudit\\" not in out, out  # no frame of softaudit's own
    for line in (
        'softaudit.assert_accurate(naive, kind="softmax"',
        "AssertionError: 1 of 1 audits did not pass",
        "ValueError: unknown kind 'sofmax'",
        "TargetError: module 'no_such_module_xyz' does not import",
    ):
        assert line in out, out
