"""Bug models of the row kinds: softmax, log_softmax, logsumexp f(x, axis=-1) and masked_softmax f(x, mask, axis=-1).

The standard algorithm (`standard`): the row max m over the kept entries (0 where nothing is kept), t = x - m,
e = exp(t) where kept, the sum s (pairwise), then the kind's output from them: softmax e / s (zeros for a row with
nothing kept), log_softmax t - log s, logsumexp m + log s. Each model flips one of its switches; the model's fix is
the same call without it.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from .._ops import const, dtype_sum, exp, exp2, log, log1p, rowwise, running_sum, work_dtype
from ._model import Inapplicable, Model, Variant

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
#: log2(e) and ln(2) as people type them: four to eight significant digits.
SHORT_LOG2E = (1.4427, 1.44269, 1.442695, 1.4426950)
SHORT_LN2 = (0.6931, 0.69315, 0.693147, 0.6931472)
#: The fills people mask with (written in the dtype: -1e9 is -inf in float16).
FILLS = (-1e4, -1e9, -1e30, "finfo_min", -65504.0)
#: The key blocks of online and tiled kernels.
BLOCKS = (16, 32, 64, 128, 256)
#: Narrower types a kernel may compute in without saying so, per audited dtype.
NARROWER = {"float64": ("float32",), "float32": ("float16", "bfloat16")}


def working(dtype, work: str) -> np.dtype:
    """The type a kernel computes in: "wide" (float32 for 16- and 8-bit dtypes, the dtype otherwise) or "dtype"
    (the audited dtype itself; Inapplicable where that is the wide one, a variant already tried)."""
    dtype = np.dtype(dtype)
    if work == "dtype":
        if work_dtype(dtype) == dtype:
            raise Inapplicable("the dtype is its own working precision")
        return dtype
    if work == "wide":
        return work_dtype(dtype)
    wanted = np.dtype(getattr(ml_dtypes, work, None) or work)
    if wanted.itemsize >= dtype.itemsize:
        raise Inapplicable(f"{work} is not narrower than {dtype}")
    return wanted


def standard(
    kind: str,
    x,
    mask=None,
    *,
    work: str = "wide",
    shift: bool = True,
    sum_in_dtype: bool = False,
    wide_sum: bool = False,
    reciprocal: bool = False,
    running: bool = False,
    block: int | None = None,
    rescale: bool = True,
    log2e: float | None = None,
    ln2: float | None = None,
    ln2_in: str = "",
    fill=None,
    sum_over_masked: bool = False,
    log1p_form: bool = False,
    log_of_p: bool = False,
    add_max: bool = True,
    hide_nan: str = "",
    flush: bool = False,
    after_softmax: bool = False,
    fast_exp: int | None = None,
    e_in_dtype: bool = False,
):
    """The row kinds' standard algorithm on rows x (the last axis), with one switch per known mistake:
    shift=False drops the max; sum_in_dtype sums in the audited 16-bit dtype, wide_sum in float32 (rounded back to
    the working precision, as numpy sums float16); reciprocal divides as e * (1 / s); running sums one term at a
    time;
    block with rescale=False is an online sum whose running sum is not rescaled when the max grows; log2e computes
    exp(t) as exp2(t * log2e) with that constant, ln2 exp(t) as exp2(t / ln2) and log(s) as log2(s) ln2 (ln2_in
    "exp" or "log": only there);
    sum_over_masked sums every entry's exp, masked ones too; fill replaces masked entries by a value (written in
    the dtype) instead of excluding them; after_softmax zeroes masked entries after a softmax over the whole row;
    log1p_form takes log s as log1p of the sum without the max's term (the fix of a log of a sum near 1); log_of_p
    gives log_softmax as log(softmax); add_max=False forgets logsumexp's m; hide_nan "input" treats a NaN entry as
    masked, "output" zeroes NaN outputs; flush zeroes subnormal outputs; fast_exp c takes exp(t) by Schraudolph's
    bit trick in float32 with the correction c (`schraudolph`); e_in_dtype rounds each exp(t) to the 16-bit dtype
    (a kernel that stores them) before the sum and the division."""
    d = x.dtype
    w = working(d, work)
    if (sum_in_dtype or e_in_dtype) and work_dtype(d) == d:
        raise Inapplicable("the dtype is its own working precision")
    xw = x.astype(w)
    keep = None if mask is None else np.asarray(mask, bool)
    if hide_nan == "input":
        keep = ~np.isnan(xw) if keep is None else keep & ~np.isnan(xw)
    if after_softmax:
        keep, masked = None, keep
    if fill is not None and keep is not None:
        xw, keep = np.where(keep, xw, const(fill, d).astype(w)), None
    kept_x = xw if keep is None else np.where(keep, xw, -np.inf)
    if shift:
        m = kept_x.max(axis=-1, keepdims=True, initial=-np.inf)
        m = np.where(np.isneginf(m), np.zeros((), w), m)
    else:
        m = np.zeros(x.shape[:-1] + (1,), w)
    t = kept_x - m
    if log2e is not None:
        e = exp2(t * w.type(log2e))
    elif ln2 is not None and ln2_in != "log":
        e = exp2(t / w.type(ln2))
    elif fast_exp is not None:
        e = np.where(np.isneginf(t), np.zeros((), w), schraudolph(t, fast_exp).astype(w))
    else:
        e = exp(t)
    if e_in_dtype:
        e = e.astype(d).astype(w)
    if block is not None:
        s = _online_sum(kept_x, block, rescale, w)
    else:
        terms = e.astype(d) if sum_in_dtype else e.astype(work_dtype(d)) if wide_sum else e
        if sum_over_masked and keep is not None:
            terms = exp(xw - m).astype(terms.dtype)
        s = (running_sum(terms) if running else dtype_sum(terms)).astype(w)
    if log1p_form:
        first = np.argmax(t == 0, axis=-1)[..., None]  # (the max's own term, exp(0) = 1)
        rest = e.copy()
        np.put_along_axis(rest, first, 0, axis=-1)
        log_s = log1p(running_sum(rest) if running else dtype_sum(rest))
    elif ln2 is not None and ln2_in != "exp":
        log_s = log(s) / w.type(LN2) * w.type(ln2)  # (log2(s) ln2, log2 itself exact to a rounding)
    else:
        log_s = log(s)
    if kind in ("softmax", "masked_softmax"):
        out = e * (w.type(1) / s) if reciprocal else e / s
        if keep is not None:
            out = np.where(keep.any(axis=-1, keepdims=True), out, np.zeros((), w))
        if after_softmax and masked is not None:
            out = np.where(masked, out, np.zeros((), w))
    elif kind == "log_softmax":
        out = log(e / s) if log_of_p else t - log_s
    else:
        out = ((m + log_s) if add_max else log_s)[..., 0]
    out = out.astype(d)
    if hide_nan == "output":
        out = np.where(np.isnan(out), np.zeros((), d), out)
    if flush:
        tiny = np.array(ml_dtypes.finfo(d).smallest_normal, d)
        out = np.where(np.abs(out) < tiny, np.zeros((), d), out)
    return out


def schraudolph(t, c: int) -> np.ndarray:
    """exp(t) by Schraudolph's bit trick in float32 (Neural Computation 11(4), 1999): the integer 2**23 t / ln 2 +
    127 * 2**23 - c read as a float32's bits, t clamped at -87 (the least a float32 exponent takes here); a few
    percent off exp(t), the error periodic in t."""
    t = np.maximum(np.asarray(t, np.float32), np.float32(-87))
    bits = (np.float32(2**23 / np.log(2)) * t + np.float32(127 * 2**23 - c)).astype(np.int32)
    return bits.view(np.float32)


def _online_sum(x, block: int, rescale: bool, w):
    """The online (streaming) sum of exp(x - m) over blocks of `block`, m the running max, rescaled by
    exp(m_old - m_new) when the max grows (rescale=False: not), then rescaled once to the row's max. Each block's
    exps and sum are formed at once, the running sum block by block, with the loop's roundings."""
    n = x.shape[-1]
    blocks = -(-n // block)
    padded = np.concatenate([x, np.full(x.shape[:-1] + (blocks * block - n,), -np.inf, w)], axis=-1)
    parts = padded.reshape(x.shape[:-1] + (blocks, block))
    m = np.maximum.accumulate(parts.max(axis=-1), axis=-1)  # (the running max after each block)
    safe = np.where(np.isneginf(m), np.zeros((), w), m)
    # each block's sum of exp(x - its running max), the last one over its own length (a pairwise sum's order)
    sums = dtype_sum(exp(parts[..., : n // block, :] - safe[..., : n // block, None]))[..., 0]
    if n % block:
        tail = dtype_sum(exp(x[..., n - n % block :] - safe[..., -1:]))
        sums = np.concatenate([sums, tail], axis=-1)
    if not rescale:
        return running_sum(sums)
    before = np.concatenate([np.full(m.shape[:-1] + (1,), -np.inf, w), m[..., :-1]], axis=-1)
    factor = exp(np.where(np.isneginf(before), safe, before) - safe)  # (exp(m_old - m_new), 1 while nothing kept)
    total = np.zeros(x.shape[:-1], w)
    for b in range(blocks):
        total = total * factor[..., b] + sums[..., b]
    final = x.max(axis=-1, initial=-np.inf)
    last = m[..., -1]
    shift = exp(np.where(np.isneginf(last), 0, last) - np.where(np.isneginf(final), 0, final))
    return (total * shift)[..., None]


def _function(kind: str, switches: dict):
    """A function with the kind's calling convention running `standard` with these switches (one per kind and
    switches: the variants that share a fix share its function, and the diagnosis computes it once)."""
    return _made(kind, tuple(sorted(switches.items())))


@functools.cache
def _made(kind: str, items: tuple):
    switches = dict(items)
    if kind == "masked_softmax":

        def masked(x, mask):
            return standard(kind, x, mask, **switches)

        return rowwise(masked)

    def plain(x):
        return standard(kind, x, None, **switches)

    return rowwise(plain)


def _model(name: str, kinds: tuple, mistake: str, fix: str, mistakes: list, events: bool = True) -> list[Model]:
    """One Model per kind, its variants (label, the buggy switches, the switches of its fix) run by `standard`."""
    return [
        Model(
            name,
            kind,
            mistake,
            fix,
            tuple(Variant(label, _function(kind, bad), _function(kind, good)) for label, bad, good in mistakes),
            events,
        )
        for kind in kinds
    ]


ROWS = ("softmax", "log_softmax", "logsumexp", "masked_softmax")
WORK = (("float32 for 16-bit inputs", "wide"), ("in the dtype", "dtype"))


def each_work(bad: dict, good: dict | None = None) -> list[tuple[str, dict, dict]]:
    """The variants (label, buggy switches, the fix's switches) of a mistake in each working precision."""
    good = {} if good is None else good
    return [(label, {"work": work} | bad, {"work": work} | good) for label, work in WORK]


MODELS = [
    *_model(
        "no_max_shift",
        ROWS,
        "exp(x) is taken without subtracting the row max, so it overflows (or every term underflows)",
        "subtract the row max before exp",
        each_work({"shift": False}),
    ),
    *_model(
        "in_dtype",
        ROWS,
        "every step is rounded to the 16-bit dtype (no upcast)",
        "compute in float32 and round once",
        [
            ("pairwise sum in the dtype", {"work": "dtype"}, {}),
            ("the sum accumulated in float32 (numpy's float16 sum)", {"work": "dtype", "wide_sum": True}, {}),
            ("the sum in float32, times its reciprocal", {"work": "dtype", "wide_sum": True, "reciprocal": True}, {}),
            ("times the sum's reciprocal", {"work": "dtype", "reciprocal": True}, {}),
        ],
    ),
    *_model(
        "sum_in_dtype",
        ROWS,
        "the exponentials are summed in the 16-bit dtype",
        "accumulate the sum in float32",
        [
            (f"{how}, exp {label}", {"work": work, "sum_in_dtype": True, "running": running}, {"work": "wide"})
            for label, work in WORK
            for how, running in (("pairwise", False), ("one term at a time", True))
            if (work, running) != ("dtype", False)  # (that one is in_dtype)
        ],
    ),
    *_model(
        "running_sum",
        ROWS,
        "the row's sum is taken one term at a time in the working precision (recursive summation), whose error "
        "grows with the row's length",
        "sum pairwise (a tree reduction) or accumulate in {wide}",
        [("float32 for 16-bit inputs", {"running": True}, {})],
    ),
    *_model(
        "online_no_rescale",
        ROWS,
        "an online sum over blocks does not rescale its running sum by exp(m_old - m_new) when the max grows",
        "multiply the running sum by exp(m_old - m_new) whenever the running max grows",
        [
            (f"blocks of {block}, {label}", {"work": work, "block": block, "rescale": False}, {"work": work})
            for block in BLOCKS
            for label, work in WORK
        ],
    ),
    *_model(
        "short_log2e",
        ROWS,
        "exp is computed as exp2(t * log2(e)) with log2(e) rounded to a few digits",
        "use log2(e) to the dtype's full precision (1.4426950408889634)",
        [(f"log2(e) as {c}", {"log2e": c}, {"log2e": LOG2E}) for c in SHORT_LOG2E],
    ),
    *_model(
        "short_ln2",
        ROWS,
        "exp is computed as exp2(t / ln 2) (or log as log2 times ln 2) with ln 2 rounded to a few digits",
        "use ln 2 to the dtype's full precision (0.6931471805599453), or exp and log themselves",
        [
            (f"ln 2 as {c}{where}", {"ln2": c, "ln2_in": place}, {"ln2": LN2, "ln2_in": place})
            for c in SHORT_LN2
            for where, place in (("", ""), (" in exp", "exp"), (" in log", "log"))
        ],
    ),
    *_model(
        "approximate_exp",
        ROWS,
        "exp is Schraudolph's bit trick (a float32 built from 2**23 t / ln 2 plus the exponent bias), a few percent "
        "off exp",
        "use an accurate exp (the library's expf, or exp2 of t * log2(e) with a correctly rounded exp2)",
        # (the corrections c: none, the paper's 60801 for a double's upper 32 bits scaled to float32's 23 bits,
        # and 486411, the constant float32 ports carry)
        [(f"correction c = {c}", {"fast_exp": c}, {}) for c in (0, 60801 * 8, 486411)],
    ),
    *_model(
        "exp_in_dtype",
        ROWS,
        "each exp(x - max) is rounded to the 16-bit dtype (stored) before the sum and the division, which are "
        "in float32",
        "keep the exponentials in float32 until the output is rounded",
        [("exp stored in the dtype", {"e_in_dtype": True}, {})],
    ),
    *_model(
        "downcast",
        ROWS,
        "the computation runs in a narrower type than the audited dtype",
        "compute in the audited dtype (no cast to a narrower type on the way)",
        [(f"in {narrow}", {"work": narrow}, {}) for narrow in ("float32", "float16", "bfloat16")],
        events=False,
    ),
    *_model(
        "nan_hidden",
        ROWS,
        "a NaN input does not reach the output",
        "let a NaN input give NaN: no nan_to_num, no max or where that skips it",
        [
            ("NaN entries treated as masked", {"hide_nan": "input"}, {}),
            ("NaN outputs set to 0", {"hide_nan": "output"}, {}),
        ],
    ),
    *_model(
        "flush_to_zero",
        ROWS,
        "results below the normal range come out 0 (a flush to zero)",
        "keep gradual underflow: no FTZ/DAZ mode, no exp that flushes",
        [("subnormal outputs flushed", {"flush": True}, {})],
    ),
    *_model(
        "log_of_softmax",
        ("log_softmax",),
        "log_softmax is computed as log(softmax(x)), so probabilities that underflow give -inf and small ones lose "
        "their digits",
        "compute (x - max) - log(sum(exp(x - max))) directly",
        each_work({"log_of_p": True}),
    ),
    *_model(
        "log_of_sum_near_1",
        ("log_softmax", "logsumexp"),
        "log(s) of a sum s that rounds to 1 next to a dominant entry loses the result (it is below u)",
        "take log1p of the sum without the max's term (Blanchard, Higham & Higham 2021)",
        each_work({}, {"log1p_form": True}),
    ),
    *_model(
        "max_not_added",
        ("logsumexp",),
        "the row max subtracted before exp is not added back: log(sum(exp(x - max))) is returned",
        "return max + log(sum(exp(x - max)))",
        each_work({"add_max": False}),
    ),
    *_model(
        "finite_fill",
        ("masked_softmax",),
        "masked entries are filled with a finite value instead of being excluded, so kept logits near or below it "
        "lose probability to them and a fully masked row comes out uniform",
        "exclude masked entries with where (max over kept entries, exp only where kept) and give a row with nothing "
        "kept zeros",
        [(f"fill {fill}", {"fill": fill}, {}) for fill in FILLS],
    ),
    *_model(
        "neginf_fill",
        ("masked_softmax",),
        "masked entries are filled with -inf, so a fully masked row is exp(-inf - -inf) = NaN",
        "give a row with nothing kept zeros: where over the kept entries and a division guarded for a zero sum",
        [("fill -inf", {"fill": -np.inf}, {})],
    ),
    *_model(
        "mask_after_softmax",
        ("masked_softmax",),
        "the masked entries' exponentials stay in the sum (a softmax over the whole row with the masked entries "
        "zeroed afterwards, or a sum over every entry), so the kept ones sum to less than 1",
        "exclude masked entries from the sum as from the numerator: where(mask, exp(x - m), 0) before summing",
        [
            ("masked after the softmax", {"after_softmax": True}, {}),
            ("masked entries in the sum", {"sum_over_masked": True}, {}),
        ],
    ),
]
