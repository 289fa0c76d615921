"""attention_grad with attention's modifiers (issue 25, part 3's gradients): causal and window choose the keys each
query attends, bottom-right aligned as the forward's; a bias, ALiBi's slopes and sinks add to the scores (a sink is
one more key of value 0). A backward aligned top-left, a window off by one, a dropped sink or ALiBi slopes rounded to
float16 fail and the note names the convention implemented. The softcap's backward: tests/gradients/
test_softcap_grad.py."""

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


def _modified_case(d, lq=3, lk=6, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v, g = (rng.standard_normal(s) for s in ((lq, d), (lk, d), (lk, d), (lq, d)))
    return q, k, v, g, rng.standard_normal((lq, lk)) * 2, rng.random((lq, lk)) < 0.8


@pytest.mark.parametrize("d", [16, 8], ids=["c rational", "c irrational"])
@pytest.mark.parametrize("method", ["auto", "mpmath"])
@pytest.mark.parametrize("sink", [None, 0.7], ids=["no sink", "sink"])
def test_the_reference_with_a_bias_and_a_sink_is_correctly_rounded(d, method, sink):
    """float64 results equal the mpmath oracle's (60 digits, the textbook formulas written apart) to the last bit:
    the fast tiers (auto) and the exact one (mpmath), with c = 1/4 (the exponents c q.k + b rational) and
    c = 1/sqrt(8) (keys grouped by both parts)."""
    q, k, v, g, bias, keep = _modified_case(d)
    got = reference.attention_grad(q, k, v, g, keep, bias=bias, sinks=sink, dtype=np.float64, method=method)
    want = O.mp_attention_vjp(q, k, v, g, keep, bias, sink)
    for r, w in zip(got, want):
        assert np.array_equal(r, w)


@pytest.mark.parametrize("d", [16, 8])
@pytest.mark.parametrize("method", ["auto", "mpmath"])
def test_exact_zeros_with_a_bias_are_found(d, method):
    """Equal keys make every dq exactly 0 whatever the bias (dS's rows sum to 0); equal values make dS, so dq and
    dk, exactly 0. Decided, not refined forever: the exponents c t + b are grouped exactly."""
    q, k, v, g, bias, _ = _modified_case(d)
    same_k = np.tile(k[:1], (len(k), 1))
    dq, _, _ = reference.attention_grad(q, same_k, v, g, None, bias=bias, dtype=np.float32, method=method)
    assert np.array_equal(dq, np.zeros_like(dq)) and not np.signbit(dq).any()
    same_v = np.tile(v[:1], (len(v), 1))
    dq, dk, _ = reference.attention_grad(q, k, same_v, g, None, bias=bias, dtype=np.float16, method=method)
    assert not dq.any() and not dk.any()


@pytest.mark.parametrize("method", ["auto", "mpmath"])
def test_a_tie_made_by_the_bias_is_one_weight(method):
    """c = 1/4: keys with c q.k = 1 and 0 and biases 0 and 1 tie at score 1 (one exponent, grouped as one)."""
    q = np.zeros((1, 16))
    q[0, 0] = 1.0
    k = np.zeros((3, 16))
    k[:, 0] = (4.0, 0.0, -4.0)
    bias = np.array([[0.0, 1.0, 0.5]])
    rng = np.random.default_rng(4)
    v, g = rng.standard_normal((3, 16)), rng.standard_normal((1, 16))
    got = reference.attention_grad(q, k, v, g, None, bias=bias, dtype=np.float64, method=method)
    for r, w in zip(got, O.mp_attention_vjp(q, k, v, g, None, bias)):
        assert np.array_equal(r, w)


def test_weights_far_apart_through_the_bias_keep_their_digits():
    """Biases down to -1,400 put weights far below float64's range (tier B keeps their exponents apart): the
    gradients, signed zeros included, equal the oracle's at 900 digits (at 80 the oracle itself loses them: dP - D
    cancels to e**-300 at the top key)."""
    rng = np.random.default_rng(3)
    q, k, v, g = (rng.standard_normal(s) for s in ((3, 8), (6, 8), (6, 8), (3, 8)))
    bias = np.array([0, -300, -700, -745, -1000, -1400.0])[None, :] + rng.standard_normal((3, 6))
    got = reference.attention_grad(q, k, v, g, None, bias=bias, dtype=np.float64)
    for r, w in zip(got, O.mp_attention_vjp(q, k, v, g, None, bias, dps=900)):
        assert np.array_equal(r, w) and np.array_equal(np.signbit(r), np.signbit(w))


def test_a_shared_kv_head_with_sinks_per_query_head():
    """Grouped-query heads (k, v broadcast) with one sink per query head and a bias per head: dq per head, dk and dv
    the sums over the heads sharing them, against the oracle per head (float64, to 1e-13)."""
    rng = np.random.default_rng(2)
    q, g = rng.standard_normal((2, 4, 3, 8)), rng.standard_normal((2, 4, 3, 8))
    k, v = rng.standard_normal((2, 1, 5, 8)), rng.standard_normal((2, 1, 5, 8))
    sinks, bias = rng.standard_normal(4), rng.standard_normal((4, 3, 5))
    dq, dk, dv = reference.attention_grad(q, k, v, g, None, bias=bias, sinks=sinks, dtype=np.float64)
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
    for b in range(2):
        heads = [O.mp_attention_vjp(q[b, h], k[b, 0], v[b, 0], g[b, h], None, bias[h], sinks[h]) for h in range(4)]
        assert all(np.allclose(dq[b, h], heads[h][0], rtol=1e-14, atol=0) for h in range(4))
        assert np.allclose(dk[b, 0], sum(x[1] for x in heads), rtol=1e-13, atol=1e-300)
        assert np.allclose(dv[b, 0], sum(x[2] for x in heads), rtol=1e-13, atol=0)


def test_biased_keys_compare_by_their_exact_value():
    """c t + b with c = 1/sqrt(d) irrational: the order of keys against mpmath at 50 digits, on pairs that float64
    cannot tell apart (t and b cancel to 1e-20)."""
    from fractions import Fraction

    import mpmath

    from softaudit.reference._grad_exact import Biased

    rng = np.random.default_rng(5)
    for _ in range(200):
        d = int(rng.choice([2, 3, 5, 8, 128]))
        t1, t2 = (Fraction(float(x)) for x in rng.standard_normal(2))
        b1 = Fraction(float(rng.standard_normal()))
        with mpmath.workdps(50):
            c = 1 / mpmath.sqrt(d)
            # b2 within 3e-20 of the value that ties them (the tie computed at 50 digits, as an exact rational)
            man, exp = (mpmath.mpf(b1.numerator) / b1.denominator + c * (mpmath.mpf(float(t1)) - float(t2))).man_exp
            b2 = Fraction(man) * Fraction(2) ** exp + Fraction(int(rng.integers(-3, 4)) or 1, 10**20)
            first, second = (
                c * mpmath.mpf(t.numerator) / t.denominator + mpmath.mpf(b.numerator) / b.denominator
                for t, b in ((t1, b1), (t2, b2))
            )
            assert first != second
        assert (Biased(t1, b1, d) < Biased(t2, b2, d)) == (first < second)
        assert (Biased(t1, b1, d) > Biased(t2, b2, d)) == (first > second)


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


@softaudit.candidate(kind="attention_grad", name="sink_dropped_grad")
def sink_dropped_grad(q, k, v, g, mask=None, *, sinks=None):
    """A backward that forgets the sink its forward had (the weights renormalised over the keys alone)."""
    return builtin.upcast(q, k, v, g, mask)


@softaudit.candidate(kind="attention_grad", name="alibi_float16_grad")
def alibi_float16_grad(q, k, v, g, mask=None, *, alibi_slopes=None, causal=False):
    """ALiBi's slopes cast to float16 before the bias is formed (FlashAttention #845), in a backward."""
    slopes = None if alibi_slopes is None else np.asarray(alibi_slopes).astype(np.float16).astype(np.float64)
    return builtin.upcast(q, k, v, g, mask, alibi_slopes=slopes, causal=causal)


@pytest.mark.parametrize(
    "candidate, family, matches",
    [
        (top_left_causal_grad, "attn_causal", "matches top-left causal, not bottom-right"),
        (window_short_by_one_grad, "attn_window", "matches window (255, 0), left side off by -1"),
        (sink_dropped_grad, "attn_sinks", "matches no sink (the sink dropped)"),
        (alibi_float16_grad, "attn_alibi", "matches ALiBi slopes rounded to float16"),
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


def test_the_built_in_backwards_take_a_bias_alibi_and_sinks_in_their_dtype():
    """None fails; best practice passes; each returns the dtype (a Python -inf beside bfloat16 once made the plain
    form's P float64 with sinks: the audit's "returned float64, cast" note)."""
    families = ["attn_bias", "attn_alibi", "attn_sinks"]
    table = _audit(["softaudit.candidates.attention_grad"], families, ("float16", "bfloat16"))
    assert len(table) == 3 * 2 * 3 * 3 and set(table.verdict) <= {"pass", "warn"}, table[["candidate", "verdict"]]
    assert set(table[table.candidate.str.endswith("upcast")].verdict) == {"pass"}
    assert not table.note.str.contains("returned float").any()


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
