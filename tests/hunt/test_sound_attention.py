"""The hunt runs its whole budget on sound float16 attention: nothing fails, and nothing stops the search (before, a
softcapped query whose two kept keys sat far in the cap's flat part stopped it within a minute: PrecisionExhausted,
rounding undecided at 131072 bits; tests/reference/test_undecided.py holds that input)."""

import pytest

from softaudit.hunt import hunt

SOUND = '''
import numpy as np
import softaudit


def my_softmax(x, axis=-1):
    """docs/audit.md's softmax, as a user copies it."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@softaudit.candidate(kind="attention")
def readme(q, k, v, mask=None):
    """That softmax on the scores in float32, P V in float32, rounded once to the dtype; a query with no key
    gives 0, as the policy asks (that softmax alone gives NaN there)."""
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    s = q32 @ np.swapaxes(k32, -1, -2) / np.float32(np.sqrt(q.shape[-1]))
    if mask is not None:
        s = np.where(mask, s, np.float32(-np.inf))
    with np.errstate(invalid="ignore"):
        p = np.where(np.isfinite(s).any(axis=-1, keepdims=True), my_softmax(s), np.float32(0))
    return (p @ v32).astype(q.dtype)


@softaudit.candidate(kind="attention")
def upcast(q, k, v, mask=None, *, softcap=None, causal=False, window=None, bias=None, alibi_slopes=None, sinks=None):
    """Scores, softmax and P V in float32, rounded once to the dtype, with every modifier the hunt draws (the
    conventions of softaudit/kinds/_attention.py: bottom-right causal and window, the cap before the bias)."""
    f = np.float32
    s = q.astype(f) @ np.swapaxes(k.astype(f), -1, -2) / f(np.sqrt(q.shape[-1]))
    lq, lk = s.shape[-2:]
    offset = np.arange(lk)[None, :] - (np.arange(lq)[:, None] + lk - lq)
    keep = np.ones(s.shape, bool) if mask is None else np.broadcast_to(mask, s.shape)
    if causal:
        keep = keep & (offset <= 0)
    if window is not None:
        left, right = window
        keep = keep & ((offset >= -left) | (left < 0)) & ((offset <= right) | (right < 0))
    with np.errstate(invalid="ignore", over="ignore"):
        if softcap is not None:
            s = f(softcap) * np.tanh(s / f(softcap))
        if bias is not None:
            s = s + bias.astype(f)
        if alibi_slopes is not None:
            s = s - alibi_slopes.astype(f)[:, None, None] * np.abs(offset).astype(f)
        s = np.where(keep, s, f(-np.inf))
        if sinks is not None:
            s = np.concatenate([s, np.broadcast_to(sinks.astype(f)[..., None, None], s.shape[:-1] + (1,))], axis=-1)
        m = s.max(axis=-1, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(m), m, f(0)))
        total = e.sum(axis=-1, keepdims=True)
        p = e / np.where(total > 0, total, f(1))
        if sinks is not None:
            p = p[..., :-1]
        return (p @ v.astype(f)).astype(q.dtype)
'''


@pytest.fixture(autouse=True)
def derandomised(monkeypatch):
    monkeypatch.setenv("CI", "1")


@pytest.mark.parametrize("name", ["upcast", "readme"])
def test_the_hunt_spends_its_budget_on_sound_float16_attention(tmp_path, name):
    path = tmp_path / "sound.py"
    path.write_text(SOUND)
    (finding,) = hunt(f"{path}:{name}", dtypes=["float16"], budget=15, corpus=tmp_path / "corpus")
    assert not finding.stopped and not finding.failed, finding.reason
    assert finding.seconds >= 15 and finding.examples > 0
    assert not (tmp_path / "corpus").exists()
