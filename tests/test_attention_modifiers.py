"""Attention's score modifiers (softcap, bias, ALiBi, sliding windows, causal alignment, sinks): the exact
reference against mpmath at 300 bits, and each reported convention bug failing its family while best practice
passes."""

import ml_dtypes
import mpmath
import numpy as np
import pytest

import softaudit
from softaudit import reference
from softaudit.candidates import attention as builtin

PRECISION = {np.float16: 11, ml_dtypes.bfloat16: 8, np.float32: 24, np.float64: 53}


def _exact(q, k, v, bias, cap, sink, dtype):
    """Every output at 300 bits, rounded by mpmath: scores c q.k, capped, plus the bias (-inf: left out), and a
    sink's e**z in the denominator."""
    out = np.empty(q.shape[:-1] + (v.shape[-1],))
    with mpmath.workprec(300):
        for b in range(q.shape[0]):
            for i in range(q.shape[1]):
                weights = []
                for j in range(k.shape[1]):
                    s = mpmath.fsum(mpmath.mpf(float(x)) * mpmath.mpf(float(y)) for x, y in zip(q[b, i], k[b, j]))
                    s /= mpmath.sqrt(q.shape[-1])
                    if cap is not None:
                        s = cap * mpmath.tanh(s / cap)
                    extra = 0 if bias is None else mpmath.mpf(float(bias[b, i, j]))
                    if extra != -mpmath.inf:
                        weights.append((mpmath.exp(s + extra), j))
                total = mpmath.fsum(w for w, _ in weights) + (0 if sink is None else mpmath.exp(float(sink[b])))
                for c in range(v.shape[-1]):
                    value = mpmath.fsum(w * mpmath.mpf(float(v[b, j, c])) for w, j in weights) / total
                    with mpmath.workprec(PRECISION[dtype]):
                        out[b, i, c] = float(+value)
    return out


@pytest.mark.parametrize("dtype", list(PRECISION), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(
    "modifiers", [{"bias": True}, {"softcap": 2.0}, {"sinks": True}, {"bias": True, "softcap": 2.0, "sinks": True}]
)
def test_the_modified_reference_is_mpmaths_correctly_rounded(dtype, modifiers):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s).astype(dtype) for s in ((2, 3, 8), (2, 20, 8), (2, 20, 4)))
    bias = sinks = None
    if modifiers.get("bias"):
        bias = rng.standard_normal((2, 3, 20)).astype(dtype).astype(np.float64)
        bias[0, 0, :5] = -np.inf
    if modifiers.get("sinks"):
        sinks = np.array([0.5, -1.0])
    cap = modifiers.get("softcap")
    got = reference.attention(q, k, v, dtype=dtype, bias=bias, softcap=cap, sinks=sinks).astype(np.float64)
    want = _exact(*(a.astype(np.float64) for a in (q, k, v)), bias, cap, sinks, dtype)
    normal = float(ml_dtypes.finfo(dtype).smallest_normal)
    compared = np.abs(want) >= normal
    assert compared.sum() > 20 and np.array_equal(got[compared], want[compared])


def test_a_query_with_no_key_but_a_sink_gives_zeros():
    q, k, v = np.ones((1, 2, 4)), np.ones((1, 3, 4)), np.ones((1, 3, 4))
    mask = np.array([[False, False, False], [True, True, True]])
    got = reference.attention(q, k, v, mask, dtype=np.float32, sinks=np.zeros(1))
    with mpmath.workprec(24):  # scores q.k / 2 = 2: three keys of value 1 and a sink of logit 0
        want = float(+(3 * mpmath.exp(2) / (3 * mpmath.exp(2) + 1)))
    assert (got[0, 0] == 0).all() and (got[0, 1] == np.float32(want)).all()


# Each reported bug, written into the best-practice built-in:


def _with(fn, name):
    fn.__name__ = fn.__qualname__ = name
    return softaudit.candidate(fn, kind="attention", name=f"test.{name}")


softcap_dropped = _with(lambda q, k, v, mask=None, *, softcap=None: builtin.upcast(q, k, v, mask), "softcap_dropped")


def _cap_after_mask(q, k, v, mask=None, *, softcap=None):
    """FlashAttention PR #1025: masked scores set to -inf, then capped: c tanh(-inf) = -c takes weight."""
    w = np.float32 if q.dtype != np.float64 else np.float64
    s = (q.astype(w) @ np.swapaxes(k.astype(w), -1, -2)) / np.sqrt(w(q.shape[-1]))
    s = np.where(mask, s, -np.inf) if mask is not None else s
    s = softcap * np.tanh(s / softcap)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return ((e / e.sum(axis=-1, keepdims=True)) @ v.astype(w)).astype(q.dtype)


cap_after_mask = _with(_cap_after_mask, "cap_after_mask")
window_off_by_one = _with(
    lambda q, k, v, mask=None, *, window=None: builtin.upcast(q, k, v, mask, window=(window[0] - 1, window[1])),
    "window_off_by_one",
)


def _top_left(q, k, v, mask=None, *, causal=False):
    """FlashAttention #951: causal aligned top-left (query i sees keys j <= i) where it is bottom-right."""
    lq, lk = q.shape[-2], k.shape[-2]
    top_left = np.arange(lk)[None, :] <= np.arange(lq)[:, None]
    return builtin.upcast(q, k, v, top_left if mask is None else mask & top_left)


top_left_causal = _with(_top_left, "top_left_causal")
slopes_in_float16 = _with(
    lambda q, k, v, mask=None, *, alibi_slopes=None, causal=False: builtin.upcast(
        q, k, v, mask, alibi_slopes=np.asarray(alibi_slopes).astype(np.float16).astype(np.float64), causal=causal
    ),
    "slopes_in_float16",
)
sinks_dropped = _with(lambda q, k, v, mask=None, *, sinks=None: builtin.upcast(q, k, v, mask), "sinks_dropped")


@pytest.mark.parametrize(
    "candidate, family, matches",
    [
        (softcap_dropped, "attn_softcap", "matches no softcap (the cap dropped)"),
        (cap_after_mask, "attn_softcap", "matches the cap after the mask: masked keys score -softcap"),
        (window_off_by_one, "attn_window", "matches window (255, 0), left side off by -1"),
        (top_left_causal, "attn_causal", "matches top-left causal, not bottom-right"),
        (slopes_in_float16, "attn_alibi", "matches ALiBi slopes rounded to float16"),
        (sinks_dropped, "attn_sinks", "matches no sink (the sink dropped)"),
    ],
    ids=[
        "flashinfer_1193",
        "flash_attention_1025",
        "transformers_39408",
        "flash_attention_951",
        "flash_attention_845",
        "flash_attention_1819",
    ],
)
def test_a_reported_convention_bug_fails_its_family_and_best_practice_passes(candidate, family, matches):
    """And the note names the convention the bug implements: the neighbouring convention whose exact result
    explains the output."""

    def audited(target):
        return softaudit.audit(
            target,
            kind="attention",
            families=[family],
            dtypes=["float32"],
            suite="quick",
            isolation="none",
            cache_dir=None,
        ).table

    table = audited(candidate)
    assert set(table.verdict) == {"fail"}
    if matches:
        assert matches in table.note[0]
    else:
        assert "matches " not in table.note[0]
    best = audited("softaudit.candidates.attention:upcast")
    assert set(best.verdict) == {"pass"} and "matches " not in best.note[0]
