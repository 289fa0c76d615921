"""Diagnosis (softaudit/diagnosis.py): a cause is named only where a bug model reproduces the output.

The kernels here are written for these tests, each with one known mistake (or none); the corpus's defects are
labelled with theirs in tests/corpus/mistakes.py, and benchmarks/diagnosis.py counts the whole corpus. What is
asserted: the named finding is the mistake made, or "unexplained", never another model, and a named finding's fix
is its model's.
"""

import numpy as np
import pytest

import softaudit
from softaudit import diagnosis
from softaudit.candidates import bugs
from softaudit.report import issues
from tests.corpus import attention, fp8, grads, log_softmax, masked, new_kinds, sinks_grad, softmax
from tests.corpus.mistakes import MISTAKES


def table(fn, kind, dtypes, families):
    return softaudit.audit(
        fn, kind=kind, dtypes=list(dtypes), families=list(families), suite="quick", isolation="none", cache=False
    ).table


def judged(fn, kind, dtypes, families):
    t = table(fn, kind, dtypes, families)
    return t[t.verdict.isin(["warn", "fail"])]


# -- the newcomer's kernels (issue 42): each told the mistake it makes ----------------------------------------------


def flash_forgets_to_rescale_o(q, k, v, mask=None):
    """FlashAttention-style, key blocks of 32, float32 accumulation, the running max guarded: but o is not
    multiplied by exp(m_old - m_new) when the max grows (l is)."""
    w = np.float32
    q, k, v = (a.astype(w) for a in (q, k, v))
    lk = k.shape[-2]
    m = np.full(q.shape[:-1] + (1,), -np.inf, w)
    l = np.zeros(q.shape[:-1] + (1,), w)
    o = np.zeros(q.shape[:-1] + (v.shape[-1],), w)
    keep = np.ones(q.shape[:-1] + (lk,), bool) if mask is None else np.broadcast_to(mask, q.shape[:-1] + (lk,))
    for start in range(0, lk, 32):
        s = q @ np.swapaxes(k[..., start : start + 32, :], -1, -2) / np.sqrt(w(q.shape[-1]))
        s = np.where(keep[..., start : start + 32], s, -np.inf)
        new = np.maximum(m, s.max(-1, keepdims=True))
        safe = np.where(np.isfinite(new), new, 0)
        p = np.exp(s - safe)
        l = l * np.exp(np.where(np.isfinite(m), m, safe) - safe) + p.sum(-1, keepdims=True)
        o = o + p @ v[..., start : start + 32, :]
        m = new
    return np.where(l > 0, o / np.where(l > 0, l, 1), 0).astype(v.dtype)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_a_flash_kernel_that_does_not_rescale_o_is_told_so(dtype):
    """Not "accumulate in float32" (it does), not "guard the running max" (it does)."""
    rows = judged(flash_forgets_to_rescale_o, "attention", [dtype], ["attn_gaussian", "attn_long"])
    assert len(rows) and set(rows.finding) == {"online_no_rescale_o"}, rows[["family", "finding", "note"]]
    assert set(rows.fix) == {bugs.models("attention")[5].fix} and "o by exp(m_old - m_new)" in rows.fix.iloc[0]
    assert not rows.fix.str.contains("float32|guard").any()


def log_of_shifted_softmax(x, axis=-1):
    """log(softmax(x)) with the max subtracted: no overflow, but a probability that underflows gives -inf."""
    w = x.astype(np.float64) if x.dtype == np.float64 else x.astype(np.float32)
    t = w - w.max(axis=axis, keepdims=True)
    e = np.exp(t)
    return np.log(e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_a_log_softmax_as_log_of_softmax_is_told_so_and_not_to_subtract_the_max(dtype):
    rows = judged(log_of_shifted_softmax, "log_softmax", [dtype], ["textbook", "gaussian", "temperature"])
    assert len(rows) and set(rows.finding) == {"log_of_softmax"}, rows[["family", "finding", "note"]]
    text = " ".join(rows.note) + " ".join(rows.fix)
    assert "subtract the row max" not in text and "float16 or TF32" not in text, text


def cross_entropy_mean_over_every_row(
    logits, target, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"
):
    """A float64 cross-entropy whose mean divides by every row, ignored ones included."""
    x = logits.astype(np.float64)
    m = x.max(1, keepdims=True)
    lse = (m + np.log(np.exp(x - m).sum(1, keepdims=True)))[:, 0]
    ignored = target == ignore_index
    y = np.where(ignored, 0, target)
    loss = np.where(ignored, 0, lse - x[np.arange(len(x)), y])
    if reduction == "none":
        return loss.astype(logits.dtype)
    if reduction == "sum":
        return np.array(loss.sum()).astype(logits.dtype)
    return np.array(loss.sum() / len(loss)).astype(logits.dtype)


def test_a_mean_over_every_row_is_told_so_not_to_accumulate_in_float32():
    rows = judged(cross_entropy_mean_over_every_row, "cross_entropy", ["float32"], ["ce_ignored"])
    assert list(rows.finding) == ["mean_over_all_rows"], rows[["family", "finding", "note"]]
    assert "number of rows whose target is not ignore_index" in rows.fix.iloc[0]
    assert "running sum" not in rows.note.iloc[0] and "dK" not in rows.fix.iloc[0]


# -- what no model explains is said to be unexplained, with no fix -----------------------------------------------


def half_softmax(x, axis=-1):
    """A softmax off by a factor of one half: no model makes that mistake."""
    w = x.astype(np.float64)
    e = np.exp(w - w.max(axis=axis, keepdims=True))
    return (0.5 * e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def test_an_error_no_model_reproduces_is_unexplained_with_its_shape_and_no_fix():
    rows = judged(half_softmax, "softmax", ["float32"], ["gaussian"])
    assert list(rows.finding) == ["unexplained"], rows.finding
    assert rows.fix.iloc[0] == ""
    assert "the output is 0.5x the exact value on every one of the compared elements" in rows.note.iloc[0], (
        rows.note.iloc[0]
    )


def sound_softmax(x, axis=-1):
    w = x.astype(np.float64)
    e = np.exp(w - w.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def test_a_sound_kernel_gets_no_finding():
    t = table(sound_softmax, "softmax", ["float16", "float32"], ["gaussian", "long", "offset"])
    assert set(t.verdict) == {"pass"} and set(t.finding) == {""}, t[["family", "verdict", "finding"]]


# -- one finding per bug ------------------------------------------------------------------------------------------


def test_one_bug_is_one_finding_across_dtypes_and_families():
    t = table(softmax.unshifted, "softmax", ["float16", "float32"], ["offset", "temperature", "gaussian"])
    found = issues(t)
    assert len(found) == 1, found
    (finding,) = found
    assert finding["cause"] == "no_max_shift" and finding["dtype"] == "float16, float32"
    assert finding["fix"] == "subtract the row max before exp" and finding["why"].startswith("no_max_shift: ")


# -- the corpus: the mistake named, or unexplained, never another model ---------------------------------------------

#: One (kernel, kind, dtype, family) per model the corpus exercises: the named finding must be its mistake.
NAMED = [
    (softmax.log2e_truncated, "softmax", "float32", "gaussian"),
    (softmax.ln2_truncated, "softmax", "float64", "wide_spread"),
    (softmax.running_sum_in_dtype, "softmax", "bfloat16", "long"),
    (softmax.online_no_rescale, "softmax", "float32", "tile_edges"),
    (softmax.nan_to_num, "softmax", "float64", "undefined"),
    (log_softmax.ls_no_log1p, "log_softmax", "float32", "dominant"),
    (log_softmax.lse_missing_max, "logsumexp", "float32", "offset"),
    (log_softmax.lse_online_no_rescale, "logsumexp", "float16", "long"),
    (masked.fill_neg1e4, "masked_softmax", "float32", "below_fill"),
    (masked.sum_includes_masked, "masked_softmax", "float32", "padding"),
    (attention.unscaled_scores, "attention", "float16", "attn_gaussian"),
    (attention.times_sqrt_d, "attention", "float64", "attn_masks"),
    (attention.online_no_rescale, "attention", "float32", "attn_long"),
    (attention.mask_after_softmax, "attention", "bfloat16", "attn_masks"),
    (grads.sg_p_times_g, "softmax_grad", "float32", "gaussian"),
    (grads.sg_sum_g_not_dot, "softmax_grad", "float16", "g_wide"),
    (grads.lsg_softmax_formula, "log_softmax_grad", "float64", "gaussian"),
    (new_kinds.ce_unshifted, "cross_entropy", "float32", "ce_offset"),
    (new_kinds.lce_logits_in_dtype, "linear_cross_entropy", "float16", "lce_large_logits"),
    (new_kinds.lceg_logits_in_dtype, "linear_cross_entropy_grad", "float16", "lce_large_logits"),
    (new_kinds.ce_softcap_every_lane, "cross_entropy", "float32", "ce_softcap"),
    (new_kinds.ceg_softcap_every_lane, "cross_entropy_grad", "float32", "ce_softcap"),
    (softmax.schraudolph_exp, "softmax", "float32", "gaussian"),
    (softmax.exp_rounded_to_dtype, "softmax", "float16", "mnist_logits"),
    (grads.lsg_missing_p, "log_softmax_grad", "float32", "gaussian"),
    (sinks_grad.sink_sign_flipped, "attention_sinks_grad", "float32", "sinks_extremes"),
    (sinks_grad.sink_d_without_sink, "attention_sinks_grad", "float64", "sinks_extremes"),
    (new_kinds.ce_z_loss_when_off, "cross_entropy", "float32", "ce_z_loss"),
    (new_kinds.ceg_p_in_dtype, "cross_entropy_grad", "bfloat16", "ce_confident"),
    (fp8.fp8_attention_descale_v_dropped, "attention_fp8", "bfloat16", "fp8_heads"),
    (fp8.quantize_amax_of_last_token, "quantize_fp8", "float8_e4m3fn", "quantize_head"),
]


@pytest.mark.parametrize("fn, kind, dtype, family", NAMED, ids=lambda p: getattr(p, "__name__", str(p)))
def test_a_corpus_defect_gets_its_mistakes_name(fn, kind, dtype, family):
    rows = judged(fn, kind, [dtype], [family])
    assert len(rows), "the defect must fail or warn here"
    assert set(rows.finding) == {MISTAKES[fn]}, rows[["output", "finding", "note"]]


def softmax_rolled(x, axis=-1):
    """A mistake no model has: a float64 softmax whose row comes out rotated by one position (an off-by-one in
    the store's index)."""
    w = x.astype(np.float64)
    e = np.exp(w - w.max(axis, keepdims=True))
    return np.roll(e / e.sum(axis, keepdims=True), 1, axis).astype(x.dtype)


def ce_halved(logits, target, **options):
    """A mistake no model has: a float64 cross-entropy, exact but for a factor 0.5 on every row's loss."""
    return (new_kinds.ce_float64_once(logits, target, **options).astype(np.float64) * 0.5).astype(logits.dtype)


#: Defects with no model of their mistake: unexplained, never another model's name.
UNMODELLED = [
    (softmax_rolled, "softmax", "float32", "gaussian"),
    (ce_halved, "cross_entropy", "float32", "ce_gaussian"),
]


@pytest.mark.parametrize("fn, kind, dtype, family", UNMODELLED, ids=lambda p: getattr(p, "__name__", str(p)))
def test_a_defect_without_a_model_is_unexplained(fn, kind, dtype, family):
    rows = judged(fn, kind, [dtype], [family])
    assert len(rows) and set(rows.finding) == {"unexplained"}, rows[["finding", "note"]]
    assert set(rows.fix) == {""}


# -- the library itself -------------------------------------------------------------------------------------------


def test_every_model_has_a_mistake_a_one_sentence_fix_and_variants():
    for kind in bugs.kinds_modelled():
        for model in bugs.models(kind):
            assert model.variants and model.mistake and model.fix, model.name
            assert model.fix.count(". ") == 0 and not model.fix.endswith("."), model.fix
            assert " or " not in model.name, "a model's name must not read as a tie"


def test_a_tie_names_every_model_that_reproduces_the_output():
    """A first block fully masked for no query (attn_masks' cases): an unguarded tiled max and a dense -inf fill
    both give NaN on a query with no key, and nothing else tells them apart on that family."""
    rows = judged(attention.tiled_unguarded_max, "attention", ["float32"], ["attn_masks"])
    (finding,) = set(rows.finding)
    assert diagnosis.ambiguous(finding) and "unguarded_running_max" in finding.split(" or ")


def _online_loop(x, block, rescale, w):
    """The online sum as a kernel writes it, block by block (the model forms each block's exps at once)."""
    from softaudit.candidates._ops import dtype_sum, exp

    shape = x.shape[:-1] + (1,)
    m, s = np.full(shape, -np.inf, w), np.zeros(shape, w)
    for start in range(0, x.shape[-1], block):
        part = x[..., start : start + block]
        new = np.maximum(m, part.max(axis=-1, keepdims=True))
        safe = np.where(np.isneginf(new), np.zeros((), w), new)
        kept = s * exp(np.where(np.isneginf(m), safe, m) - safe) if rescale else s
        s = kept + dtype_sum(exp(part - safe))
        m = new
    final = x.max(axis=-1, keepdims=True, initial=-np.inf)
    return s * exp(np.where(np.isneginf(m), 0, m) - np.where(np.isneginf(final), 0, final)) if rescale else s


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_the_online_models_sum_is_the_block_by_block_loops_bit_for_bit(dtype):
    from softaudit.candidates.bugs.rows import _online_sum

    rng = np.random.default_rng(1)
    for n in (1, 15, 16, 17, 100, 1000, 4097):
        x = (rng.normal(size=(3, n)) * 5 + np.linspace(0, 20, n)).astype(dtype)
        x[1, : n // 2] = -np.inf  # (a row whose first blocks keep nothing)
        for block in (16, 64):
            for rescale in (True, False):
                got, want = _online_sum(x, block, rescale, np.dtype(dtype)), _online_loop(x, block, rescale, dtype)
                assert np.array_equal(got, want, equal_nan=True), (n, block, rescale)


@pytest.mark.parametrize(
    "fn, kind",
    [(new_kinds.ce_softcap_every_lane, "cross_entropy"), (new_kinds.ceg_softcap_every_lane, "cross_entropy_grad")],
)
def test_a_softcap_that_makes_masked_lanes_finite_is_a_leak_not_an_accumulation(fn, kind):
    """Liger-Kernel 0.8.5's softcap on -inf vocabulary lanes: the worst element's magnitude reads as a long sum's
    error (a running sum of 1152 terms, "accumulate the sum pairwise"); the model that reproduces it says leak."""
    rows = judged(fn, kind, ["float32"], ["ce_softcap"])
    assert len(rows) and set(rows.cause) == {"mask_leak"}, rows[["cause", "finding", "note"]]
    assert rows.note.str.contains("a leak: the softcap").all()
    assert not rows.fix.str.contains("pairwise").any() and rows.fix.str.contains("kept lanes only").all()
