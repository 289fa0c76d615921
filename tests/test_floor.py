"""The floor of the fail line and what replaced it in float32 (docs/policy.md, "The fail line"): a float32 softmax
with a wrong constant, log2(e) rounded to 1.4427, reads 52-58x the conditioning, under float32's uncapped floor
2**6 = 64; the cap of 16 failed it, and now the proven line, 2 u (scale + T), does whatever the floor is, while sound
float32 softmaxes (exp, exp2 with the right constant, a reciprocal, exp(x - lse)) read at most 9.6 and do not.

Families where the floor governed in float32 (the worst standard algorithm reads under 8 there, 17 on mnist_logits).
"""

import numpy as np
import pytest

import softaudit

FAMILIES = ["textbook", "wide_spread", "mnist_logits", "ties"]
LOG2E = np.float32(1.4426950408889634)


def _shifted(x):
    x = x.astype(np.float32)
    return x - x.max(axis=-1, keepdims=True)


def wrong_log2e(x, axis=-1):
    """exp2((x - m) * 1.4427): the constant off by 4.1e-5 relative, so p_i off by about 2.8e-5 (m - x_i)."""
    e = np.exp2(_shifted(x) * np.float32(1.4427))
    return e / e.sum(axis=-1, keepdims=True)


def exp2_right(x, axis=-1):
    """exp2((x - m) * log2(e)) with log2(e) rounded to float32: as fused GPU kernels compute exp."""
    e = np.exp2(_shifted(x) * LOG2E)
    return e / e.sum(axis=-1, keepdims=True)


def plain(x, axis=-1):
    """exp(x - m) / sum, the sum pairwise (numpy)."""
    e = np.exp(_shifted(x))
    return e / e.sum(axis=-1, keepdims=True)


def reciprocal(x, axis=-1):
    """exp(x - m) * (1 / sum)."""
    e = np.exp(_shifted(x))
    return e * (np.float32(1) / e.sum(axis=-1, keepdims=True))


def via_lse(x, axis=-1):
    """exp(x - m - log(sum))."""
    t = _shifted(x)
    return np.exp(t - np.log(np.exp(t).sum(axis=-1, keepdims=True)))


def _table(fn, policy=None):
    kw = {} if policy is None else {"policy": policy}
    return softaudit.audit(fn, kind="softmax", dtypes=["float32"], families=FAMILIES, cache_dir="off", **kw).table


def test_a_wrong_constant_fails_where_the_floor_governed():
    table = _table(wrong_log2e)
    shown = table[["family", "verdict", "max_cond_err", "max_bound_err", "fail_above", "note"]].to_string()
    assert (table.verdict == "fail").all(), shown
    assert (table.max_cond_err > 40).all() and (table.max_bound_err > 2).all(), shown  # past 2 u (scale + T)
    # under the uncapped floor 2**(p/4) = 64 it passed the measured line; float32's line is the proven one now
    lifted = _table(wrong_log2e, softaudit.Policy(max_floor=np.inf))
    assert (lifted.verdict == "fail").all(), lifted[["family", "verdict", "max_cond_err", "fail_above"]].to_string()


@pytest.mark.parametrize("fn", [plain, exp2_right, reciprocal, via_lse], ids=lambda f: f.__name__)
def test_sound_float32_softmaxes_do_not_fail(fn):
    table = _table(fn)
    shown = table[["family", "verdict", "max_cond_err", "fail_above", "note"]].to_string()
    assert (table.verdict != "fail").all() and (table.max_cond_err < 10).all(), shown
