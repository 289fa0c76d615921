"""The hunt's strategies draw what `softaudit run` audits: batches, fully masked rows and queries, batch and head axes,
broadcast K and V, the gradient kinds' g with the batch, and the reported-bug families' cases as seeds."""

import math

import numpy as np
import pytest
from hypothesis import find, settings
from hypothesis.errors import NoSuchExample

from softaudit.hunt._strategies import attention, gradients, rows, thresholds
from softaudit.reference import format_of

F16, BF16 = format_of("float16"), format_of("bfloat16")
QUICK = settings(database=None, derandomize=True, max_examples=2000)


def test_rows_come_in_batches_with_fully_masked_rows_beside_kept_ones():
    def wanted(drawn):
        kept = drawn[1].any(axis=-1)
        return kept.any() and not kept.all()

    inputs, mask, _ = find(rows("masked_softmax", F16), wanted, settings=QUICK)
    assert inputs["x"].shape[0] >= 2 and inputs["x"].shape == mask.shape


def test_attention_has_batch_and_head_axes_broadcast_k_and_v_and_fully_masked_queries():
    def wanted(drawn):
        (q, k, _), mask = (drawn[0][n] for n in "qkv"), drawn[1]
        broadcast = q.ndim >= 3 and k.shape[-3] == 1 < q.shape[-3]
        lonely = mask is not None and (~mask.any(axis=-1)).any() and mask.any()
        return broadcast and lonely and q.shape[-2] != k.shape[-2]

    inputs, _, _ = find(attention("attention", F16), wanted, settings=QUICK)
    q, k, v = (inputs[n] for n in "qkv")
    assert np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]) == q.shape[:-2]


def test_the_gradient_kinds_draw_g_with_the_batch():
    row = find(gradients("softmax_grad", F16), lambda d: d[0]["x"].shape[0] >= 3, settings=QUICK)[0]
    assert row["g"].shape == row["x"].shape and row["g"].dtype == np.float16
    lse = find(gradients("logsumexp_grad", F16), lambda d: d[0]["x"].shape[0] >= 3, settings=QUICK)[0]
    assert lse["g"].shape == lse["x"].shape[:-1]
    att = find(gradients("attention_grad", F16), lambda d: d[0]["q"].ndim >= 3, settings=QUICK)[0]
    assert att["q"].shape[:-2] == att["g"].shape[:-2]
    assert att["g"].shape[-2:] == (att["q"].shape[-2], att["v"].shape[-1])


def test_attention_grad_draws_shared_k_and_v_that_its_reference_takes():
    """K and V broadcast against q, as for the forward: the reference gives dk and dv in k's and v's shapes."""
    from softaudit.reference import attention_grad

    def shared(drawn):
        q, k = drawn[0]["q"], drawn[0]["k"]
        return q.ndim == k.ndim >= 4 and k.shape[-3] == 1 < q.shape[-3]

    inputs, mask, _ = find(gradients("attention_grad", F16), shared, settings=QUICK)
    q, k, v, g = (inputs[n] for n in ("q", "k", "v", "g"))
    assert g.shape[:-2] == q.shape[:-2] and k.shape[:-2] == v.shape[:-2]
    dq, dk, dv = attention_grad(q, k, v, g, mask, dtype="float16")
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)


def test_the_reported_bug_families_seed_the_search():
    def wanted(drawn):
        return drawn[0]["x"].shape[-1] == 512 and (drawn[0]["x"] == 0).all()

    inputs, _, _ = find(rows("softmax", BF16), wanted, settings=QUICK)
    assert inputs["x"].shape[-1] == 512  # uniform_512's row of 512 zeros (ExecuTorch PR #20089)


def test_the_thresholds_sit_where_exp_overflows_in_the_dtype():
    overflow = thresholds(F16)[0]
    below = float(np.nextafter(np.float16(overflow), np.float16(0)))
    with np.errstate(over="ignore"):
        assert below < math.log(65504) < overflow and np.isinf(np.float16(math.exp(overflow)))


def test_attention_grad_puts_no_junk_in_keys_no_query_attends():
    """A backward pass meets masked keys' values (dP = dO V^T): the dtype's max there overflows dP and gives NaN in
    every product form, best practice included (found: attention_grad.upcast, float32, v = 1.67e38, a fully masked
    query), so attention_grad's draws leave them as drawn; attention's forward still gets its junk."""

    def junk(drawn):
        (k, v), mask = (drawn[0][n] for n in "kv"), drawn[1]
        if mask is None:
            return False
        free = ~mask.reshape(-1, k.shape[-2]).any(axis=0)
        return bool(free.any() and ((~np.isfinite(k[..., free, :])).any() or (np.abs(v[..., free, :]) > 6e4).any()))

    find(attention("attention", F16), junk, settings=QUICK)
    with pytest.raises(NoSuchExample):
        find(gradients("attention_grad", F16), junk, settings=QUICK)


def test_attention_grad_draws_run_s_key_lengths_where_its_reference_is_fast():
    """Up to 257 keys (the tile edges run audits) where q and k are drawn small enough for the reference's fast tier;
    large activations (scores past about 1e5, decided in mpmath) keep to 33 keys."""
    from softaudit.hunt import _strategies

    def long_keys(drawn):
        return drawn[0]["k"].shape[-2] >= 128

    inputs, _, _ = find(gradients("attention_grad", BF16), long_keys, settings=QUICK)
    assert (
        inputs["k"].shape[-2] >= 128
        and math.prod(inputs["q"].shape[:-1]) * inputs["k"].shape[-2] * inputs["q"].shape[-1]
        <= _strategies.MAX_GRAD_SCORE_WORK
    )

    def long_and_large(drawn):
        q, k = drawn[0]["q"].astype(np.float64), drawn[0]["k"].astype(np.float64)
        return k.shape[-2] > _strategies.MAX_GRAD_WIDE_KEYS and max(abs(q).max(), abs(k).max()) > 10 * 100

    with pytest.raises(NoSuchExample):
        find(gradients("attention_grad", BF16), long_and_large, settings=QUICK)


def test_cross_entropy_draws_integer_targets_ignored_rows_and_only_the_options_the_candidate_takes():
    from softaudit.hunt._strategies import CROSS_ENTROPY_KEYWORDS, cross_entropy

    every = frozenset(CROSS_ENTROPY_KEYWORDS)

    def wanted(drawn):
        inputs, _, options = drawn
        ignored = inputs["target"] == options.get("ignore_index", -100)
        return ignored.any() and not ignored.all() and options.get("reduction") == "mean" and "softcap" in options

    inputs, mask, options = find(cross_entropy("cross_entropy_grad", BF16, every), wanted, settings=QUICK)
    logits, target = inputs["logits"], inputs["target"]
    assert mask is None and logits.dtype == BF16.dtype and target.dtype == np.int64
    kept = target != options.get("ignore_index", -100)
    assert ((target[kept] >= 0) & (target[kept] < logits.shape[1])).all()
    assert inputs["g"].shape == ()  # (a mean's g is one value)
    assert logits.size <= 2048  # (a capped row's reference is mpmath's)
    per_row = find(cross_entropy("cross_entropy_grad", BF16, every), lambda d: "reduction" not in d[2], settings=QUICK)
    assert per_row[0]["g"].shape == per_row[0]["target"].shape
    with pytest.raises(NoSuchExample):  # a candidate that takes no option is called with none
        find(cross_entropy("cross_entropy", BF16, frozenset()), lambda d: bool(d[2]), settings=QUICK)


def test_merge_draws_empty_splits_with_junk_and_queries_with_every_split_empty():
    from softaudit.hunt._strategies import merge

    def wanted(drawn):
        outputs, lses = drawn[0]["outputs"], drawn[0]["lses"]
        empty = np.isneginf(lses.astype(np.float64))
        return outputs.ndim >= 4 and empty.all(axis=0).any() and not empty.all() and np.isnan(outputs).any()

    inputs, mask, options = find(merge("merge_attention", F16), wanted, settings=QUICK)
    outputs, lses = inputs["outputs"], inputs["lses"]
    assert outputs.shape[:-1] == lses.shape and mask is None and options == {}
    assert not np.isnan(outputs[~np.isneginf(lses.astype(np.float64))]).any()  # (junk only in empty splits)


def test_attention_modifiers_are_drawn_where_the_candidate_takes_them_and_the_reference_takes_what_is_drawn():
    from softaudit import kinds
    from softaudit.hunt._strategies import ATTENTION_KEYWORDS

    every = frozenset(ATTENTION_KEYWORDS)
    attention_kind = kinds.get("attention")

    def all_of_them(drawn):
        inputs, _, options = drawn
        return {"bias", "alibi_slopes", "sinks"} <= set(inputs) and {"softcap", "window"} <= set(options)

    inputs, mask, options = find(attention("attention", F16, every), all_of_them, settings=QUICK)
    (ref,) = attention_kind.reference(attention_kind, inputs, mask, "float16", **options)
    assert ref.value.shape == inputs["q"].shape[:-1] + (inputs["v"].shape[-1],)
    assert inputs["sinks"].shape == inputs["alibi_slopes"].shape == inputs["q"].shape[-3:-2]  # (per head)
    with pytest.raises(NoSuchExample):
        find(attention("attention", F16, frozenset({"softcap"})), lambda d: set(d[0]) != set("qkv"), settings=QUICK)
    with pytest.raises(NoSuchExample):  # (a gradient candidate that takes none gets none)
        find(gradients("attention_grad", F16), lambda d: bool(d[2]) or set(d[0]) != set("qkvg"), settings=QUICK)


def test_attention_grad_draws_every_modifier_it_takes_the_softcap_included():
    from softaudit import kinds
    from softaudit.hunt._strategies import ATTENTION_KEYWORDS, keywords

    grad_kind = kinds.get("attention_grad")
    assert keywords(grad_kind) == ("softcap", "causal", "window", "bias", "alibi_slopes", "sinks")
    every = frozenset(ATTENTION_KEYWORDS)

    def all_of_them(drawn):
        inputs, _, options = drawn
        return {"bias", "alibi_slopes", "sinks"} <= set(inputs) and {"softcap", "causal", "window"} <= set(options)

    inputs, mask, options = find(gradients("attention_grad", F16, every), all_of_them, settings=QUICK)
    dq, dk, dv = grad_kind.reference(grad_kind, inputs, mask, "float16", **options)
    assert dq.value.shape == inputs["q"].shape and dv.value.shape[-1] == inputs["v"].shape[-1]
    assert dk.value.shape[-2:] == inputs["k"].shape[-2:]
    with pytest.raises(NoSuchExample):  # (one that takes no softcap gets none)
        find(gradients("attention_grad", F16, every - {"softcap"}), lambda d: "softcap" in d[2], settings=QUICK)
