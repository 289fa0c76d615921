"""Each cause softaudit names (softaudit/causes.py) on a hand-made implementation with exactly that defect, and a
sound implementation beside it that must not get it: a cause is worth reading only if it points at what is wrong.

The implementations are small numpy (and one torch) kernels written here, not built-ins; each test audits one kind
on one family in one dtype.
"""

import math

import numpy as np
import pytest

import softaudit
from softaudit import causes
from softaudit.reference import format_of

TILE = 16


def audit(target, kind, family, dtype, cases=None):
    """The rows of one target on one family in one dtype (a case file's family where `cases` names one)."""
    table = softaudit.audit(
        target, kind=kind, dtypes=[dtype], families=[family], cases=cases, isolation="none", cache=False
    ).table
    return table[table.family == family]


def one(target, kind, family, dtype, output="", cases=None):
    table = audit(target, kind, family, dtype, cases)
    return table[table.output == output].iloc[0]


def worst(target, kind, family, dtype):
    """(verdict, the worst element's cause, its explanation): a row that passes has its worst element classified
    too (it is in the report's worst inputs), so a cause is testable where the error is within the conditioning."""
    result = softaudit.audit(target, kind=kind, dtypes=[dtype], families=[family], isolation="none", cache=False)
    (record,) = result.worst.values()
    return result.table.verdict.iloc[0], record.cause, record.explanation


def _w(x, dtype):
    return np.asarray(x).astype(dtype)


# -- wrong_terms: a term missing, extra or wrong; never rounding in the dtype --


def online_softmax(x, axis=-1, rescale=True):
    """Softmax over blocks of 16 entries with a running max and sum, in float32 (as a FlashAttention kernel does).
    rescale=False: the running sum l is not multiplied by exp(m_old - m_new) when the max grows (a missing term)."""
    w = np.float32
    x32 = x.astype(w)
    m = np.full(x.shape[:-1] + (1,), -np.inf, w)
    total = np.zeros(x.shape[:-1] + (1,), w)
    for start in range(0, x.shape[-1], TILE):
        block = x32[..., start : start + TILE]
        new = np.maximum(m, block.max(axis=-1, keepdims=True))
        kept = np.exp(m - new) * total if rescale else total
        total = kept + np.exp(block - new).sum(axis=-1, keepdims=True, dtype=w)
        m = new
    return (np.exp(x32 - m) / total).astype(x.dtype)


def online_softmax_no_rescale(x, axis=-1):
    return online_softmax(x, axis, rescale=False)


def test_an_online_softmax_that_does_not_rescale_its_sum_has_a_wrong_term():
    """All in float32: the missing exp(m_old - m_new) is no rounding, and no float32 upcast fixes it."""
    row = one(online_softmax_no_rescale, "softmax", "gaussian", "float32")
    assert row.verdict == "fail" and row.cause == "wrong_terms", row.note
    # (the band describes the error; the finding, which a model of the missing rescale reproduces, names the fix)
    assert row.finding == "online_no_rescale" and "exp(m_old - m_new)" in row.fix, row.note
    assert "float32" not in row.fix, row.fix
    sound = one(online_softmax, "softmax", "gaussian", "float32")
    assert sound.cause != "wrong_terms", sound.note


def torch_bf16_softmax_grad(x, g, axis=-1):
    """A correct softmax backward, every step in bfloat16 as PyTorch runs p * (g - (g * p).sum())."""
    torch = pytest.importorskip("torch")
    xt, gt = (torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16) for a in (x, g))
    p = torch.softmax(xt, dim=-1)
    return (p * (gt - (gt * p).sum(dim=-1, keepdim=True))).float().numpy().astype(x.dtype)


def test_a_correct_bfloat16_softmax_backward_is_rounding_not_a_wrong_term():
    """mnist_logits' worst row: p_max 0.99803 rounds to 0.99609 and <g, p> 0.52740 to 0.52344; g_i - <g, p>
    cancels, so one rounding of <g, p> is hundreds of times the element's conditioning scale. Rounding, not a term."""
    pytest.importorskip("torch")
    row = one(torch_bf16_softmax_grad, "softmax_grad", "mnist_logits", "bfloat16")
    # (the scale holds one rounding of <g, p> now: 2.15x the conditioning, where it read 302x the line before)
    assert row.verdict != "fail" and row.max_cond_err < row.fail_above / 2, row.note
    assert row.cause != "wrong_terms" and "missing, extra or wrong" not in row.note, row.note
    # (the band says what the error is; the finding, which a model in bfloat16 reproduces, says what the code does)
    assert row.cause == "cancellation" and row.finding == "in_dtype", row.note


def _probabilities(x, how):
    """p in x's dtype three ways: e / s, e (1 / s), exp(x - m - log s)."""
    e = _shifted_exp(x, x.dtype)
    s = e.sum(axis=-1, keepdims=True, dtype=x.dtype)
    if how == "reciprocal":
        return e * (x.dtype.type(1) / s)
    if how == "log":
        return np.exp(x - x.max(axis=-1, keepdims=True) - np.log(s))
    return e / s


def sound_softmax_grad(how, split=False):
    """A sound softmax backward in the dtype: p formed `how`, and p (g - <g, p>) or (split) p g - p <g, p>."""

    def grad(x, g, axis=-1):
        p, g = _probabilities(x, how), g.astype(x.dtype)
        gbar = (g * p).sum(axis=-1, keepdims=True, dtype=x.dtype)
        return (p * g - p * gbar if split else p * (g - gbar)).astype(x.dtype)

    grad.__name__ = f"softmax_grad_{how}{'_split' if split else ''}"
    return grad


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_no_sound_softmax_backward_in_the_dtype_gets_a_wrong_term(dtype):
    """p three ways, the product fused or split: every ordering of the roundings stays within the rounding budget,
    on the families where g - <g, p> cancels hardest."""
    variants = [sound_softmax_grad(how, split) for how in ("divide", "reciprocal", "log") for split in (False, True)]
    families = ["textbook", "offset", "dominant", "mnist_logits", "g_wide", "g_cross_entropy"]
    table = softaudit.audit(
        variants, kind="softmax_grad", dtypes=[dtype], families=families, isolation="none", cache=False
    ).table
    assert len(table) == len(variants) * len(families)
    wrong = table[table.cause.isin(["wrong_terms", "masked_block"])]
    assert wrong.empty, wrong[["candidate", "family", "note"]].to_string()


def softmax_grad_extra_term(x, g, axis=-1):
    """p * (g - <g, p>) + p * <g, p> / n: an extra term, computed in float64 and rounded once."""
    p = np.exp(x - x.max(axis=-1, keepdims=True))
    p = p / p.sum(axis=-1, keepdims=True)
    gbar = (g * p).sum(axis=-1, keepdims=True)
    return (p * (g - gbar) + p * gbar / x.shape[-1]).astype(x.dtype)


def test_an_extra_term_in_a_softmax_backward_is_a_wrong_term():
    row = one(softmax_grad_extra_term, "softmax_grad", "gaussian", "float32")
    assert row.verdict == "fail" and row.cause == "wrong_terms", row.note


# -- cancellation, not underflow --


def softmax_grad_in_dtype(x, g, axis=-1):
    """The plain backward p * (g - sum(g * p)), every step in the dtype."""
    p = np.exp(x - x.max(axis=-1, keepdims=True))
    p = p / p.sum(axis=-1, keepdims=True)
    return p * (g - (g * p).sum(axis=-1, keepdims=True))


def test_a_zero_where_g_minus_gbar_cancels_is_cancellation_not_underflow():
    """The textbook row [-25, 0, 25, 50] in float32: p_3 = 1 - 1.4e-11, so <g, p> rounds to g_3 and g_3 - <g, p>
    is exactly 0 where the exact gradient is about 1e-11: nothing underflowed."""
    fmt = format_of("float32")
    x = np.array([-25.0, 0.0, 25.0, 50.0])
    g = np.array([0.3, -1.2, 0.7, 0.5])
    y = softmax_grad_in_dtype(x.astype(np.float32), g.astype(np.float32))
    assert y[3] == 0
    import mpmath

    with mpmath.workdps(50):
        e = [mpmath.exp(mpmath.mpf(v) - 50) for v in x]
        s = sum(e)
        p = [t / s for t in e]
        gbar = sum(pk * gk for pk, gk in zip(p, g))
        exact = float(p[3] * (g[3] - gbar))
    from softaudit import budget, conditioning

    scale = float(conditioning.softmax_grad(x[None], None, g[None], np.array([[0, 0, 0, exact]]))[0, 3])
    terms = budget.of("softmax_grad", {"x": x[None], "g": g[None]}, None, (np.array([[0, 0, 0, exact]]),))
    cause, why = causes.classify("softmax_grad", fmt, 0.0, exact, exact, scale, 4, budget=(float(terms[0][0, 3]),) * 2)
    assert cause == "cancellation" and "underflow" not in why, why


# -- masked_block: a fully masked first tile --


def flash_attention(q, k, v, mask=None, guard=True):
    """FlashAttention-style forward in float32: blocks of 16 keys, a running max and sum. guard=False: the running
    max of a fully masked block stays -inf, exp(-inf - -inf) is NaN, and the NaN is dropped at the end (the row
    comes out zeros); guard=True uses 0 in its place, as FlashAttention does."""
    w = np.float32
    q32, k32, v32 = (a.astype(w) for a in (q, k, v))
    c = w(1 / math.sqrt(q.shape[-1]))
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    m = np.full(lead + (q.shape[-2], 1), -np.inf, w)
    total = np.zeros_like(m)
    acc = np.zeros(lead + (q.shape[-2], v.shape[-1]), w)
    with np.errstate(all="ignore"):
        for start in range(0, k.shape[-2], TILE):
            s = (q32 @ np.swapaxes(k32[..., start : start + TILE, :], -1, -2)) * c
            if mask is not None:
                s = np.where(mask[..., start : start + TILE], s, -np.inf)
            new = np.maximum(m, s.max(axis=-1, keepdims=True))
            safe = np.where(np.isfinite(new), new, 0) if guard else new
            alpha = np.exp(m - safe)
            e = np.exp(s - safe)
            total = alpha * total + e.sum(axis=-1, keepdims=True)
            acc = alpha * acc + e @ v32[..., start : start + TILE, :]
            m = new
        out = acc / np.where(total > 0, total, 1) if guard else np.nan_to_num(acc / total)
    return out.astype(q.dtype)


def flash_unguarded(q, k, v, mask=None):
    return flash_attention(q, k, v, mask, guard=False)


@pytest.fixture(scope="module")
def left_padded(tmp_path_factory):
    """Queries whose first 16 keys are masked (left padding) and the rest kept, beside queries that keep all."""
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((8, 32)), rng.standard_normal((40, 32)), rng.standard_normal((40, 32))
    mask = np.ones((8, 40), bool)
    mask[::2, :TILE] = False
    path = tmp_path_factory.mktemp("cases") / "left_padded.npz"
    np.savez(path, q=q, k=k, v=v, mask=mask)
    return path


def test_a_fully_masked_first_tile_is_named(left_padded):
    row = one(flash_unguarded, "attention", "file:left_padded", "float32", cases=left_padded)
    assert row.verdict == "fail" and row.cause == "masked_block", row.note
    assert row.finding == "unguarded_running_max" and "-inf" in row.note, row.note
    assert "running max" in row.fix and "float32" not in row.fix, row.fix
    sound = one(flash_attention, "attention", "file:left_padded", "float32", cases=left_padded)
    assert sound.cause != "masked_block" and sound.verdict != "fail", sound.note


# -- a gradient in its input's broadcast shape --


def attention_grad_unsummed(q, k, v, g, mask=None):
    """A correct attention backward in float64 that returns dk and dv in the broadcast shape (one per query head)
    where k and v are shared by several heads: they must be summed over the heads."""
    q64, k64, v64, g64 = (a.astype(np.float64) for a in (q, k, v, g))
    c = 1 / math.sqrt(q.shape[-1])
    s = q64 @ np.swapaxes(k64, -1, -2) * c
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    dp = g64 @ np.swapaxes(v64, -1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    grads = (ds @ k64 * c, np.swapaxes(ds, -1, -2) @ q64 * c, np.swapaxes(p, -1, -2) @ g64)
    return tuple(a.astype(q.dtype) for a in grads)


def test_a_gradient_returned_in_the_broadcast_shape_is_told_to_sum_over_the_broadcast_axis():
    row = audit(attention_grad_unsummed, "attention_grad", "attn_broadcast_kv", "float32").iloc[0]
    assert row.verdict == "error", row.note
    assert "dk: returned shape (2, 4, 24, 32), expected (2, 1, 24, 32)" in row.note, row.note
    assert "k is broadcast along axis 1" in row.note and "dk must be summed over it" in row.note, row.note


def attention_grad_summed(q, k, v, g, mask=None):
    """The same backward, with dk and dv summed over the axes k and v are broadcast along."""
    dq, dk, dv = attention_grad_unsummed(q, k, v, g, mask)
    return dq, _summed_to(dk, k.shape), _summed_to(dv, v.shape)


def _summed_to(a, shape):
    a = a.sum(axis=tuple(range(a.ndim - len(shape)))) if a.ndim > len(shape) else a
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and a.shape[i] != 1)
    return a.sum(axis=axes, keepdims=True) if axes else a


def test_a_gradient_summed_over_the_broadcast_axis_is_judged():
    table = audit(attention_grad_summed, "attention_grad", "attn_broadcast_kv", "float32")
    assert set(table.verdict) <= {"pass", "warn"} and not table.note.str.contains("broadcast").any(), table.note


# -- each kind's own formula in its note --


def logsumexp_grad_in_dtype(x, g, axis=-1):
    """dx = exp(x - logsumexp(x)) g, every step in the dtype."""
    m = x.max(axis=-1, keepdims=True)
    lse = m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
    return np.exp(x - lse) * g[..., None]


def test_a_logsumexp_gradient_note_quotes_its_own_formula():
    """dx = p g has no g - <g, p> (softmax_grad's formula, which its notes quoted)."""
    row = one(logsumexp_grad_in_dtype, "logsumexp_grad", "offset", "bfloat16")
    assert row.cause == "cancellation", row.note
    assert "g - <g, p>" not in row.note and "p g" in row.note, row.note


# -- the other causes: one defect each, and a sound kernel beside it --


def _shifted_exp(x, dtype):
    x = x.astype(dtype)
    return np.exp(x - x.max(axis=-1, keepdims=True))


def softmax_running_sum(x, axis=-1):
    """exp(x - max) / s with s a running sum in the dtype (one entry after another)."""
    e = _shifted_exp(x, x.dtype)
    s = np.zeros(x.shape[:-1], x.dtype)
    for j in range(x.shape[-1]):
        s = (s + e[..., j]).astype(x.dtype)
    return (e / s[..., None]).astype(x.dtype)


def softmax_f32_sum(x, axis=-1):
    """exp(x - max) in float32 summed pairwise in float64 (numpy's sum), divided once: float32 or narrower."""
    e = _shifted_exp(x, np.float32)
    return (e / e.sum(axis=-1, keepdims=True, dtype=np.float64)).astype(x.dtype)


def softmax_sum_in_dtype(x, axis=-1):
    e = _shifted_exp(x, x.dtype)
    return (e / e.sum(axis=-1, keepdims=True, dtype=x.dtype)).astype(x.dtype)


def test_a_running_sum_in_bfloat16_is_accumulation_and_a_pairwise_float32_sum_is_not():
    row = one(softmax_running_sum, "softmax", "long", "bfloat16")
    assert row.cause == "accumulation", row.note
    assert "float32" in row.fix, row.fix
    assert one(softmax_f32_sum, "softmax", "long", "bfloat16").cause != "accumulation"


def test_a_float32_kernel_is_never_told_to_upcast_to_float32():
    """A running sum in float32 accumulates too; its fix names float64 or a pairwise sum, not float32."""
    row = one(softmax_running_sum, "softmax", "long", "float32")
    assert row.cause == "accumulation" and row.finding == "running_sum", row.note
    assert "float32" not in row.fix and "float64" in row.fix, row.fix
    assert "float32" not in causes.fix("below_best", "attention", "precision", fmt=format_of("float32"))
    in64 = causes.fix("defect", "softmax", "accumulation", fmt=format_of("float64"))
    assert "compensated" in in64 and "float32" not in in64 and "float64" not in in64, in64
    assert "float32" in causes.fix("defect", "softmax", "accumulation", fmt=format_of("bfloat16"))


def test_a_float16_sum_of_65536_terms_overflows_and_a_float32_sum_does_not():
    row = one(softmax_sum_in_dtype, "softmax", "equal_sum_overflow", "float16")
    assert row.cause == "sum_overflow", row.note
    assert one(softmax_f32_sum, "softmax", "equal_sum_overflow", "float16").cause != "sum_overflow"


def log_softmax_shifted(x, axis=-1):
    x = x.astype(np.float64).astype(x.dtype)
    shifted = x - x.max(axis=-1, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True, dtype=x.dtype))).astype(x.dtype)


def log_softmax_log1p(x, axis=-1):
    """x - max - log1p(sum of the others), in float64, rounded once."""
    x64 = x.astype(np.float64)
    top = x64.argmax(axis=-1)[..., None]
    shifted = x64 - np.take_along_axis(x64, top, axis=-1)
    e = np.exp(shifted)
    np.put_along_axis(e, top, 0.0, axis=-1)
    return (shifted - np.log1p(e.sum(axis=-1, keepdims=True))).astype(x.dtype)


def test_a_log_of_a_sum_that_rounds_to_1_is_absorbed_and_the_log1p_form_is_not():
    # The zeros are worth 1 u of the scale (the rounding of s, which the scale holds), so the row's worst element
    # against the conditioning is a cancellation beside them; the zeros set the ULP error that warns.
    row = one(log_softmax_shifted, "log_softmax", "dominant", "float32")
    assert row.cause == "absorbed" and "a sum that rounds to 1" in row.note, row.note
    assert "log1p" in row.fix and "underflow" not in row.note, row.fix
    sound = one(log_softmax_log1p, "log_softmax", "dominant", "float32")
    assert sound.cause != "absorbed" and "rounds to 1" not in sound.note, sound.note


def test_a_log_softmax_of_0_where_the_sum_rounds_to_1_is_absorbed_not_underflow():
    """float16, mnist_logits: the largest entry's log p is about -5e-4, above u, and the sum 1.0005 rounds to 1 in
    float16, so it comes out 0. Nothing underflowed: the log1p form is the fix."""
    row = one("softaudit.candidates.log_softmax:shifted", "log_softmax", "mnist_logits", "float16")
    assert row.cause == "absorbed" and "a sum that rounds to 1" in row.note, row.note
    assert "underflow" not in row.note and "log1p" in row.fix, row.note


def softmax_flush(x, axis=-1):
    """A correct float64 softmax whose results below the normal range are flushed to 0 (an FTZ mode)."""
    y = softmax_f64(x)
    tiny = np.finfo(np.float32).tiny if x.dtype == np.float32 else float(format_of(x.dtype).min_normal)
    return np.where(np.abs(y.astype(np.float64)) < tiny, 0, y).astype(x.dtype)


def softmax_f64(x, axis=-1):
    e = np.exp(x.astype(np.float64) - x.astype(np.float64).max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def test_subnormal_results_flushed_to_0_are_flushed_and_kept_ones_are_not():
    row = one(softmax_flush, "softmax", "subnormal", "float32")
    assert row.cause == "flushed", row.note
    assert one(softmax_f64, "softmax", "subnormal", "float32").cause != "flushed"


def softmax_unshifted(x, axis=-1):
    """exp(x) / sum(exp(x)) in the dtype: no max subtracted."""
    e = np.exp(x)
    return (e / e.sum(axis=-1, keepdims=True, dtype=x.dtype)).astype(x.dtype)


@pytest.fixture(scope="module")
def far_below(tmp_path_factory):
    """Rows far below 0: exp of the logits themselves is subnormal or 0 in float32, the results are normal."""
    path = tmp_path_factory.mktemp("cases") / "far_below.npy"
    np.save(path, np.array([[-95.0, -100.0, -105.0], [-96.0, -99.0, -104.0]]))
    return path


def test_an_unshifted_exp_that_underflows_is_underflow_and_the_shifted_one_is_not(far_below):
    row = one(softmax_unshifted, "softmax", "file:far_below", "float32", cases=far_below)
    assert row.cause == "underflow" and row.finding == "no_max_shift", row.note
    assert one(softmax_f64, "softmax", "file:far_below", "float32", cases=far_below).verdict == "pass"


def test_an_unshifted_exp_that_overflows_is_nan_and_the_fix_subtracts_the_max():
    row = one(softmax_unshifted, "softmax", "offset", "float32")
    assert row.cause == "nan" and "subtract the row max" in row.fix, row.note
    assert one(softmax_f64, "softmax", "offset", "float32").cause != "nan"


def log_softmax_unshifted(x, axis=-1):
    return (x - np.log(np.exp(x).sum(axis=-1, keepdims=True, dtype=x.dtype))).astype(x.dtype)


def test_a_log_of_an_overflowed_sum_is_overflow():
    row = one(log_softmax_unshifted, "log_softmax", "offset", "float32")
    assert row.cause == "overflow", row.note
    assert one(log_softmax_log1p, "log_softmax", "offset", "float32").cause != "overflow"


def masked_fill(x, mask, axis=-1, fill=-1e4):
    """Masked softmax with a fill for masked entries, in float64: a finite fill leaks, -inf gives NaN rows."""
    filled = np.where(mask, x.astype(np.float64), fill)
    with np.errstate(all="ignore"):
        e = np.exp(filled - filled.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def masked_fill_finite(x, mask, axis=-1):
    return masked_fill(x, mask, fill=-1e4)


def masked_fill_neginf(x, mask, axis=-1):
    return masked_fill(x, mask, fill=-np.inf)


def masked_where(x, mask, axis=-1):
    """where over the kept entries, a guarded division: rows with nothing kept give zeros."""
    x64 = np.where(mask, x.astype(np.float64), -np.inf)
    m = x64.max(axis=-1, keepdims=True)
    e = np.where(mask, np.exp(x64 - np.where(np.isfinite(m), m, 0)), 0)
    s = e.sum(axis=-1, keepdims=True)
    return (e / np.where(s > 0, s, 1)).astype(x.dtype)


def test_a_finite_mask_fill_leaks_and_where_does_not():
    row = one(masked_fill_finite, "masked_softmax", "below_fill", "float32")
    assert row.cause == "mask_leak", row.note
    assert one(masked_where, "masked_softmax", "below_fill", "float32").cause != "mask_leak"


def test_a_minus_inf_fill_gives_nan_for_fully_masked_rows_and_where_gives_zeros():
    row = one(masked_fill_neginf, "masked_softmax", "fully_masked", "float32")
    assert row.cause == "fully_masked", row.note
    assert one(masked_where, "masked_softmax", "fully_masked", "float32").verdict == "pass"


def softmax_nan_to_num(x, axis=-1):
    return softmax_f64(np.nan_to_num(x, nan=0.0))


def test_a_nan_input_dropped_is_nan_propagation_and_a_plain_softmax_propagates_it():
    row = one(softmax_nan_to_num, "softmax", "undefined", "float32")
    assert row.cause == "nan_propagation", row.note
    assert one(softmax_f64, "softmax", "undefined", "float32").cause != "nan_propagation"


def softmax_grad_f32(x, g, axis=-1):
    """Best practice: the plain backward in float32, rounded once."""
    return softmax_grad_in_dtype(x.astype(np.float32), g.astype(np.float32)).astype(x.dtype)


def test_a_bfloat16_backward_where_g_minus_gbar_cancels_is_cancellation_and_float32_is_not():
    row = one(softmax_grad_in_dtype, "softmax_grad", "g_wide", "bfloat16")
    assert row.cause == "cancellation" and "cancels" in row.note, row.note
    assert one(softmax_grad_f32, "softmax_grad", "g_wide", "bfloat16").cause != "cancellation"


def test_several_roundings_in_bfloat16_are_precision_and_float32_is_not():
    pytest.importorskip("torch")
    verdict, cause, why = worst(torch_bf16_softmax_grad, "softmax_grad", "ties", "bfloat16")
    assert cause == "precision" and verdict != "fail", why
    assert "bfloat16" not in causes.fix("below_best", "softmax_grad", cause).split("best practice")[0]
    assert one(softmax_grad_f32, "softmax_grad", "ties", "bfloat16").verdict == "pass"


def test_float64_gets_its_own_wording_for_digits_and_for_range():
    f64 = format_of("float64")
    assert "compensated" in causes.fix("defect", "softmax", "precision", fmt=f64)
    for fix in (causes.fix("defect", "softmax", "subnormal", fmt=f64), causes.fix("flushed", "softmax", fmt=f64)):
        assert "power of two" in fix and "float32" not in fix and "in float64" not in fix, fix


def softmax_two_roundings(x, axis=-1):
    """p = e * (1 / s) with e and s exact in float64 but 1 / s and e rounded to the dtype before the product:
    two roundings more than the one a correctly rounded result takes."""
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    return (e.astype(x.dtype) * (1 / e.sum(axis=-1, keepdims=True)).astype(x.dtype)).astype(x.dtype)


def test_two_roundings_too_many_are_rounding_and_a_correctly_rounded_softmax_passes():
    # (about 1 ulp, within twice best practice's error against the conditioning: it passes, its cause is rounding)
    verdict, cause, why = worst(softmax_two_roundings, "softmax", "ties", "bfloat16")
    assert (verdict, cause) == ("pass", "rounding") and "within a rounding or two" in why, why
    assert one(softmax_f64, "softmax", "ties", "bfloat16").verdict == "pass"


def test_a_subnormal_result_formed_in_the_dtype_is_subnormal_and_one_rounded_once_passes():
    """exp(x - max) below float32's normal range keeps only the bits above the smallest subnormal, and dividing it
    by the sum in float32 rounds those again."""
    verdict, cause, why = worst(softmax_sum_in_dtype, "softmax", "subnormal", "float32")
    assert cause == "subnormal" and "normal range" in why and verdict != "fail", why
    assert one(softmax_f64, "softmax", "subnormal", "float32").verdict == "pass"


def attention_in_float32(q, k, v, mask=None):
    """A correct attention that computes in float32 whatever the dtype, as jax.nn.dot_product_attention does for
    float64 inputs on the CPU: in float64 its errors are float32's rounding, not a missing term."""
    return flash_attention(q, k, v, mask).astype(q.dtype)


def test_a_float64_kernel_computing_in_float32_is_a_downcast_not_a_wrong_term():
    row = one(attention_in_float32, "attention", "attn_gaussian", "float64")
    # (the band describes the error's size; a model in float32 reproduces a float32 kernel only to within float32's
    # roundings, about the whole error, so the finding is the model's only where its order of operations matches)
    assert row.cause == "downcast" and row.finding in ("downcast", "unexplained"), row.note
    assert ("narrower type" in row.fix) == (row.finding == "downcast") and "missing" not in row.note, row.fix
    assert one(attention_in_float32, "attention", "attn_gaussian", "float32").cause != "downcast"
