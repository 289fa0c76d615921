"""attention_grad with attention's causal and window (issue 25, part 3's gradients): the keys each query attends,
bottom-right aligned as the forward's; a backward aligned top-left or a window off by one fails and the note names
the convention it implements. The softcap, a bias, ALiBi and sinks have no backward reference yet: a clear error."""

import numpy as np
import pytest

import softaudit
from softaudit import reference
from softaudit.candidates import attention_grad as builtin
from softaudit.kinds import _grads

from . import oracle as O


def _case(lq, lk, d=16, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(s) for s in ((2, lq, d), (2, lk, d), (2, lk, d)))
    return {"q": q, "k": k, "v": v, "g": rng.standard_normal((2, lq, d))}


@pytest.mark.parametrize(
    "options, kept",
    [
        # keys j <= i + Lk - Lq, written out for 3 queries over 5 keys: np.tril with the diagonal moved by Lk - Lq
        ({"causal": True}, np.tril(np.ones((3, 5), bool), k=2)),
        # (left 1, right 0): keys i + 2 - 1 <= j <= i + 2
        ({"window": (1, 0)}, np.tril(np.ones((3, 5), bool), k=2) & np.triu(np.ones((3, 5), bool), k=1)),
        # (-1, 1): no bound on the left, one key to the right of the query's own
        ({"window": (-1, 1)}, np.tril(np.ones((3, 5), bool), k=3)),
    ],
)
def test_the_reference_is_the_masked_backward_of_the_keys_the_modifiers_keep(options, kept):
    """Against the float64 oracle (plain formulas, written apart from the reference) on the hand-written mask, to
    float64's accuracy; and bit for bit the reference given that mask."""
    case = _case(3, 5)
    got = _grads.attention_reference(None, case, None, np.float64, **options)
    oracle = O.attention_vjp(case["q"], case["k"], case["v"], case["g"], kept)
    masked = reference.evaluate_attention_grad(case["q"], case["k"], case["v"], case["g"], kept, dtype=np.float64)
    for r, o, m in zip(got, oracle, masked):
        assert np.allclose(r.value, o, rtol=1e-12, atol=1e-14)
        assert np.array_equal(r.value, m.value)


@pytest.mark.parametrize(
    "inputs, options",
    [({}, {"softcap": 20.0}), ({"bias": np.zeros((3, 5))}, {}), ({"sinks": np.zeros(2)}, {})],
    ids=["softcap", "bias", "sinks"],
)
def test_a_modifier_that_changes_the_scores_has_no_backward_reference_yet(inputs, options):
    with pytest.raises(ValueError, match="no backward reference for"):
        _grads.attention_reference(None, _case(3, 5) | inputs, None, np.float64, **options)


def _audit(target, families, dtypes=("float32",)):
    return softaudit.audit(
        target,
        kind="attention_grad",
        families=list(families),
        dtypes=list(dtypes),
        suite="quick",
        isolation="none",
        cache_dir="off",
    ).table


@softaudit.candidate(kind="attention_grad", name="top_left_causal_grad")
def top_left_causal_grad(q, k, v, g, mask=None, *, causal=False):
    """FlashAttention #951's alignment in a backward: query i sees keys j <= i, where it is bottom-right."""
    lq, lk = q.shape[-2], k.shape[-2]
    top_left = np.tril(np.ones((lq, lk), bool)) if causal else None
    return builtin.upcast(q, k, v, g, top_left if mask is None else mask & top_left)


@softaudit.candidate(kind="attention_grad", name="window_short_by_one_grad")
def window_short_by_one_grad(q, k, v, g, mask=None, *, window=None):
    """The sliding window one key short on the left (transformers #39408's off by one), in a backward."""
    return builtin.upcast(q, k, v, g, mask, window=None if window is None else (window[0] - 1, window[1]))


@pytest.mark.parametrize(
    "candidate, family, matches",
    [
        (top_left_causal_grad, "attn_causal", "matches top-left causal, not bottom-right"),
        (window_short_by_one_grad, "attn_window", "matches window (255, 0), left side off by -1"),
    ],
)
def test_a_backward_with_the_wrong_convention_fails_and_the_note_names_it(candidate, family, matches):
    table = _audit(candidate, [family])
    assert set(table.verdict) == {"fail"}, table[["output", "verdict", "note"]]
    assert matches in table[table.output == "dq"].note.iloc[0]


def test_the_built_in_backwards_take_causal_and_windows_and_best_practice_passes():
    """None fails; FlashAttention 2's form warns where its bfloat16 dS loses a small dk to 0 (its weakness)."""
    table = _audit(["softaudit.candidates.attention_grad"], ["attn_causal", "attn_window"], ("float32", "bfloat16"))
    assert len(table) == 3 * 2 * 2 * 3 and set(table.verdict) <= {"pass", "warn"}, table[["candidate", "verdict"]]
    assert set(table[table.candidate.str.endswith("upcast")].verdict) == {"pass"}


def test_a_candidate_without_the_keyword_is_skipped_not_called_without_it():
    @softaudit.candidate(kind="attention_grad", name="no_modifiers_grad")
    def no_modifiers_grad(q, k, v, g, mask=None):
        return builtin.upcast(q, k, v, g, mask)

    table = _audit(no_modifiers_grad, ["attn_causal"])
    assert set(table.verdict) == {"skip"} and table.note.str.startswith("does not take").all()


def test_the_rounding_budget_of_a_causal_backward_is_that_of_its_mask():
    """The causes read the budget (softaudit/budget.py): with causal it is the masked problem's, not all keys'."""
    from softaudit import budget

    case = _case(3, 5)
    kept = np.tril(np.ones((3, 5), bool), k=2)
    exact = tuple(r.value for r in _grads.attention_reference(None, case, kept, np.float64))
    by_option = budget.of("attention_grad", case, None, exact, options={"causal": True})
    by_mask = budget.of("attention_grad", case, kept, exact)
    every_key = budget.of("attention_grad", case, None, exact)
    assert all(np.array_equal(a, b) for a, b in zip(by_option, by_mask))
    assert not all(np.array_equal(a, b) for a, b in zip(by_option, every_key))
