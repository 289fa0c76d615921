"""Causes in plain words: what happened at a row's worst element, why an event happened, and the known fix.

Everything here reads numbers the audit already has (the output, the exact value, its conditioning scale, the
inputs of the row); nothing calls a candidate. docs/policy.md lists the causes and the fixes.

(Longer than the house's 400 lines: the worst element's class, the events' diagnoses and the fixes read the same row
quantities and the same rounding budget, and docs/policy.md lists them as one table.)
"""

from __future__ import annotations

import math
import re

import numpy as np

from . import budget, kinds
from .reference import Format

#: The worst element's result is this many times smaller than its conditioning scale: a cancellation.
CANCELLATION = 8.0
#: Rows at least this long whose worst error is past a few roundings: the sum's errors accumulated.
LONG_ROW = 1024
#: An error is a wrong term only past this many times what rounding the inputs and every intermediate in the dtype
#: can cost (softaudit/budget.py: first order, every rounding at its worst; the margin is for what first order
#: leaves out and for exp and log a few ulps off).
BEYOND_ROUNDING = 4.0
#: Below this share of an error common to the row (metrics._common_share), an error no pairwise sum explains is
#: not called accumulation: a sum's error moves every output of its row alike.
COMMON = 0.5
#: The smallest tile of keys a blocked kernel uses (FlashAttention's are 16 to 128): a row whose first this many keys
#: are masked and a later one kept meets a fully masked first block there.
SMALLEST_TILE = 16


def _g(value: float) -> str:
    return f"{value:.4g}"


def _apart(a: float, b: float) -> tuple[str, str]:
    """a and b with 4 significant digits, or as many more as it takes to read them apart (11.09375 > 11.09035)."""
    digits = next((d for d in range(4, 17) if f"{a:.{d}g}" != f"{b:.{d}g}"), 17)
    form = ".4g" if digits == 4 else f"#.{digits}g"  # (#: the digits asked for, trailing zeros too)
    return f"{a:{form}}", f"{b:{form}}"


def _g6(value: float) -> str:
    """Six digits: a sum just past the dtype's largest value reads apart from it (65536, 65504)."""
    return f"{value:.6g}"


def _sum_past(total: float, fmt: Format, terms: str = "") -> str:
    """The sentence for a row whose exponentials sum past the dtype's largest value; terms: "N " to count them."""
    return (
        f"the row's {terms}exponentials (shifted by its max) sum to {_g6(total)}, past {fmt.name}'s largest value "
        f"{_g6(fmt.max_float)}"
    )


def classify(
    kind: str,
    fmt: Format,
    y: float,
    r: float,
    rounded: float,
    scale: float,
    n: int,
    exp_sum: float | None = None,
    *,
    budget: tuple[float, float] | None = None,
    mask_row=None,
    common: float | None = None,
) -> tuple[str, str]:
    """(cause, sentence) for the worst element: output y, exact value r, its correct rounding, its conditioning
    scale (floored at the smallest normal, as the error measure reads it), n the length of the reduction behind it
    (row length, or keys for attention), exp_sum the exact sum of its row's exponentials shifted by the row's max
    (`exp_sum`; None where the kind has none), budget the element's rounding budget T (softaudit/budget.py) with
    pairwise and with running sums (None: unknown; then only an error past the scale itself, the terms, is a wrong
    term), mask_row the element's row of the mask (keys for attention) or None, and common the share of the error
    one error common to its row explains (metrics._common_share; None or NaN: unknown): a sum's error is common.

    An error is a wrong term only past what rounding the inputs and every intermediate in the dtype can move the
    result by, u (scale + T), `BEYOND_ROUNDING` times over: a standard algorithm in the dtype never gets it."""
    kind = kinds.get(kind)
    u = math.ldexp(1.0, -fmt.precision)
    normal = math.ldexp(1.0, max(fmt.emin, -1074))
    too_big = exp_sum is not None and exp_sum > fmt.max_float  # (past the dtype: no sum in it holds it)
    if budget is None:  # (unknown: K u (scale + T) is the scale itself, where n u < 1 lets a sum keep its terms)
        budget = (scale / (BEYOND_ROUNDING * u) - scale,) * 2 if n * u < 1 else (math.inf, math.inf)
        known = False
    else:
        known = True
    pairwise, running = (u * (scale + t) for t in budget)  # what rounding in the dtype can move r by
    leading = _leading_masked(mask_row)
    if math.isnan(y):
        return "nan", f"NaN where the exact result is {_g(r)}"
    if math.isinf(y):
        return "overflow", f"{y} where the exact result is {_g(r)}"
    if y == 0 and rounded != 0:
        if too_big:  # (every output of such a row is at most 1 / exp_sum: below the normal range in 16 bits)
            return "sum_overflow", (
                f"came out 0: {_sum_past(exp_sum, fmt)}, so a sum kept in {fmt.name} overflows to inf and each "
                "exp / inf is 0 (not a flush)"
            )
        if abs(rounded) < normal:
            return "flushed", (
                f"{_g(r)} is subnormal in {fmt.name} and came out 0 (flushed to zero, or lost to an intermediate "
                "that underflowed)"
            )
        within = known and abs(r) <= BEYOND_ROUNDING * pairwise  # (rounding in the dtype can take all of it)
        if "absorbed" in kind.causes and abs(r) < u:
            return "absorbed", (
                f"the exact result {_g(r)} is below u = {_g(u)} and came out 0: a log of a sum that rounds to 1"
            )
        if "absorbed" in kind.causes and within:
            return "absorbed", (
                f"the exact result {_g(r)} came out 0: a log of a sum that rounds to 1 (the sum's rounding in "
                f"{fmt.name} moves the result by up to u x {_g(scale + budget[0])} = {_g(pairwise)}, "
                f"{_ratio(pairwise, abs(r)):.3g}x the result)"
            )
        if within:
            return "cancellation", (
                f"came out 0 where the exact result is {_g(r)}: {_terms(kind)} and a standard algorithm's "
                f"intermediates in {fmt.name} can move it by up to u x {_g(scale + budget[0])} = {_g(pairwise)}, "
                f"{_ratio(pairwise, abs(r)):.3g}x the result: its terms cancel to 0"
            )
        if leading:
            return "masked_block", f"came out 0 where the exact result is {_g(r)}: {_block(kind, leading)}"
        return (
            "underflow",
            f"came out 0 where the exact result is {_g(r)}: an intermediate underflowed (or a sum overflowed)",
        )
    err = abs(y - r)
    if err == 0:
        return "rounding", "the output is exact"
    relative = _ratio(_ratio(err, abs(r)), u)
    if too_big and relative > 4:  # (a sum in the dtype stalls short of it, or rounds past it: not a subnormal issue)
        return "accumulation", (
            f"{relative:.3g} u relative error: {_sum_past(exp_sum, fmt)}, which a sum kept in {fmt.name} cannot "
            "reach (it stalls or overflows)"
        )
    off = f"the output {_g(y)} is off by {_g(err)} where the exact result is {_g(r)}"
    if err > BEYOND_ROUNDING * running:
        if leading:
            return "masked_block", f"{off}: {_block(kind, leading)}"
        narrower = _narrower(fmt, err, r, scale + budget[1]) if known else None
        if narrower:
            return "downcast", (
                f"{off}, {_ratio(err, running):.3g}x what rounding in {fmt.name} can move it (u x "
                f"{_g(scale + budget[1])}) but within what rounding in {narrower} can: intermediates are kept in "
                f"{narrower}, not {fmt.name}"
            )
        beyond = _beyond(kind, fmt, err, scale, budget[1] if known else None, normal)
        return "wrong_terms", f"{off}, {beyond}; so a term is missing, extra or wrong"
    common = math.nan if common is None else common
    if known and err > BEYOND_ROUNDING * pairwise and not common < COMMON:  # (only a running sum's roundings can)
        return "accumulation", (
            f"{off}, {_ratio(err, pairwise):.3g}x what rounding in {fmt.name} with pairwise sums can move it, within "
            f"what a running sum of {n} terms in {fmt.name} can: the sum's errors accumulated"
        )
    if abs(r) < normal and r != 0 and scale < CANCELLATION * normal and "subnormal" in kind.causes:
        against = (
            f"the smallest normal {_g(normal)}"
            if scale <= normal
            else f"its conditioning scale {_g(scale)}, near the smallest normal {_g(normal)}"
        )
        return "subnormal", (
            f"the exact result {_g(r)} is below {fmt.name}'s normal range, where errors count against {against}; "
            f"the output {_g(y)} is off by {_g(err)}"
        )
    amplified = _ratio(scale, abs(r))
    if amplified >= CANCELLATION:
        why = _cancels(kind, y, r, scale, amplified, _ratio(err, u * scale))
        if known and err > 4 * u * scale:  # (past a few u of the terms: the intermediates' rounding is what moved it)
            why += (
                f"; the intermediates of a standard algorithm, rounded in {fmt.name}, move it by up to "
                f"u x {_g(scale + budget[0])} = {_g(pairwise)}, and the error is {_ratio(err, pairwise):.3g} of that"
            )
        return "cancellation", why
    if known and err > BEYOND_ROUNDING * pairwise:
        return "precision", (
            f"{off}, {_ratio(err, pairwise):.3g}x what rounding in {fmt.name} with pairwise sums can move it, and "
            f"the row's outputs are off each its own way (a sum's error would move them alike: {common:.2g} of it "
            "is common): an approximate function (exp, log, a reciprocal) or more roundings than a standard "
            "algorithm's"
        )
    if n >= LONG_ROW and relative > 4:
        return "accumulation", f"{relative:.3g} u relative error in a reduction over {n} entries"
    if relative <= 2:
        return "rounding", f"{relative:.2g} u relative error: within a rounding or two"
    return "precision", f"{relative:.3g} u relative error: several roundings in the working precision"


#: Narrower working precisions a kernel may compute in without saying so (significand bits, name): float32 for
#: float64 data, TF32 or float16 and bfloat16 (a matmul's default precision) for float32 data.
_NARROWER = ((24, "float32"), (11, "float16 or TF32"), (8, "bfloat16"))


def _narrower(fmt: Format, err: float, r: float, terms: float) -> str:
    """The widest type narrower than fmt whose rounding of the same intermediates explains err ("" if none). A
    16-bit type's budget can reach the result itself (u = 2**-11 of a large T), where a missing term hides too: it
    is named only for an error within 2**-(bits / 2) of the result."""
    for bits, name in _NARROWER:
        within = err <= BEYOND_ROUNDING * math.ldexp(terms, -bits)
        if bits < fmt.precision and within and (bits >= 24 or err <= math.ldexp(abs(r), -bits // 2)):
            return name
    return ""


def _terms(kind) -> str:
    """What rounding the inputs moves, in the cancellation sentences."""
    return f"rounding the inputs ({kind.scale_terms})" if kind.scale_terms else "rounding the inputs"


def _beyond(kind, fmt: Format, err: float, scale: float, terms: float | None, normal: float) -> str:
    """How far past rounding a wrong term's error is: against the scale (the terms themselves) where it passes them,
    and against u (scale + T), what rounding the inputs and every intermediate in the dtype can move the result by."""
    u = math.ldexp(1.0, -fmt.precision)
    what = f" ({kind.scale_terms})" if kind.scale_terms else ""
    if scale <= normal:
        head = "which rounding cannot move: its conditioning scale is below the smallest normal"
    elif err > scale:
        head = f"{err / scale:.3g}x its conditioning scale {_g(scale)}{what}, more than its terms themselves"
    else:
        head = f"{err / (u * scale):.3g} u of its conditioning scale {_g(scale)}{what}"
    if terms is None:
        return head
    return (
        f"{head}: {_ratio(err, u * (scale + terms)):.3g}x what rounding the inputs and every intermediate of a "
        f"standard algorithm in {fmt.name} can move it (u x {_g(scale + terms)})"
    )


def _leading_masked(mask_row) -> int:
    """How many leading keys (or entries) of one row the mask drops before a kept one, where that is at least
    `SMALLEST_TILE`: a kernel that tiles them meets a fully masked first block (0 otherwise)."""
    if mask_row is None:
        return 0
    row = np.asarray(mask_row, bool).reshape(-1)
    if not row.any():
        return 0
    first = int(np.argmax(row))
    return first if first >= SMALLEST_TILE else 0


def _block(kind, leading: int) -> str:
    """The sentence for an error at a row whose first `leading` keys are masked and a later one kept."""
    what, one = ("keys", "key") if kind.reduction[0] == "k" else ("entries", "entry")
    return (
        f"its first {leading} {what} are masked and {one} {leading} is kept: a "
        f"kernel that tiles the {what} meets a fully masked first block, whose running max is -inf, and "
        "exp(-inf - -inf) is NaN (or, with the NaN dropped or the max clamped, the row comes out zeros)"
    )


def budget_at(kind: str, pc, flat: int) -> tuple[float, float] | None:
    """The rounding budget T (softaudit/budget.py) of one element of a prepared case's output (pc: the case, or its
    view through one output), with pairwise and with running sums; None for a kind without a budget (unknown:
    `classify` then calls an error a wrong term only past the conditioning scale itself)."""
    whole, index = getattr(pc, "pc", pc), getattr(pc, "index", 0)
    tiny = math.ldexp(1.0, max(whole.fmt.emin, -1074))
    exact = tuple(ref.hi if ref.lo is None or not ref.lo.any() else ref.hi + ref.lo for ref in whole.references)
    mask, options = whole.problem  # (the declared convention's problem, where the candidate declares one)
    found = [
        budget.of(kind, whole.inputs, mask, exact, sums, tiny, dict(options))
        for sums in (budget.PAIRWISE, budget.RUNNING)
    ]
    if found[0] is None:
        return None
    return tuple(float(np.asarray(t[index]).reshape(-1)[flat]) for t in found)


def _cancels(kind, y: float, r: float, scale: float, amplified: float, cond: float) -> str:
    """The cancellation sentence: how much larger the terms are than the result, and the error against them (the
    cancellation explains a large ULP error, never a large error against the conditioning)."""
    if r == 0:
        if kind.scale_terms:
            return (
                f"the exact result is 0: its terms ({kind.scale_terms}) add up to {_g(scale)} and cancel exactly; "
                f"the output {_g(y)} is what is left, {cond:.3g} u of them"
            )
        return (
            f"the exact result is 0 where its conditioning scale is {_g(scale)}: rounding the inputs alone moves it "
            f"by up to u times that; the output {_g(y)} is {cond:.3g} u of it"
        )
    if kind.scale_terms:
        return (
            f"the output {_g(r)} cancels: its terms ({kind.scale_terms}) add up to {_g(scale)}, {amplified:.3g}x "
            f"larger; the error is {cond:.3g} u of them"
        )
    return (
        f"the result {_g(r)} is {amplified:.3g}x smaller than its conditioning scale: rounding the inputs alone "
        f"moves it that many u; the error is {cond:.3g} u of the scale"
    )


def _ratio(a: float, b: float) -> float:
    """a / b, inf where b is 0 or the quotient overflows (0 / 0 is 0: no error)."""
    if a == 0:
        return 0.0
    try:
        return a / b if b else math.inf
    except OverflowError:
        return math.inf


def exp_sum(inputs: dict, mask) -> float | None:
    """The exact sum (in float64, rounded once per term) of a row's exponentials shifted by its largest kept logit:
    softmax's denominator. None for inputs without a row of logits x (attention), or with nothing finite kept."""
    if "x" not in inputs:
        return None
    x = np.asarray(inputs["x"], dtype=np.float64).reshape(-1)
    kept = np.isfinite(x) if mask is None else np.isfinite(x) & np.asarray(mask).reshape(-1)
    if not kept.any():
        return None
    with np.errstate(under="ignore", over="ignore"):  # (x - max past float64's range: -inf, whose exp is 0)
        return float(np.exp(x[kept] - x[kept].max()).sum())


def nan_everywhere(fmt: Format) -> tuple[str, str]:
    """(note, fix) of a candidate that returned NaN on every family of a dtype: for a format without infinity, the
    -inf that is NaN there (a max started at -inf does it: jax.nn.log_softmax in float8_e4m3fn); else no fix."""
    why, pattern = _without_inf("", fmt)
    fix = _NO_INF.replace("{wide}", wider(fmt)) if pattern == "no_inf" else ""
    return "; ".join(filter(None, ["returned NaN everywhere", why])), fix


def unattending(output: str, mask) -> str:
    """For an error past the whole scale in an attention gradient (dq, dk, dv): the queries of the case that attend
    no key, whose exact gradient is 0 and reaches no dk or dv ("" where there are none, or the kind is another)."""
    if mask is None or output not in ("dq", "dk", "dv"):
        return ""
    none = int((~np.asarray(mask, bool).any(axis=-1)).sum())
    if not none:
        return ""
    return (
        f"{none} queries of this case attend no key: weights given to them (a uniform row from a finite fill) give "
        "them a dq and send their g into dk and dv, terms the exact gradient lacks"
    )


def diagnose(kind: str, fmt: Format, inputs: dict, mask) -> tuple[str, str]:
    """Why a row (for attention: a query with its keys) gave NaN or inf: (the input pattern that explains it, the
    pattern's name where it has a fix of its own, `fix`'s pattern; "" for either where there is none). The kind's
    shape picks the reading: a row of logits x for a row-wise kind, a query's scores with its keys otherwise."""
    entry = kinds.get(kind)
    if entry.row_wise:
        return diagnose_row(fmt, inputs, mask)
    if "q" in entry.inputs and "k" in entry.inputs:
        return diagnose_scores(fmt, inputs, mask)
    return "", ""  # (a kind of another shape, merge_attention's splits: no reading of its own yet)


def diagnose_scores(fmt: Format, inputs: dict, mask) -> tuple[str, str]:
    """Why a query with its keys gave NaN or inf (attention)."""
    big = fmt.max_float
    with np.errstate(all="ignore"):
        masked = _masked_nonfinite(inputs, mask)
        if masked:
            return masked, "masked_nan"
        q, k = inputs["q"].astype(np.float64), inputs["k"].astype(np.float64)
        raw = np.abs(q @ np.swapaxes(k, -1, -2)).max(initial=0.0)
        if raw > big:
            return _without_inf(f"the scores q.k reach {_g(raw)}, past {fmt.name}'s largest value {_g(big)}", fmt)
    return _without_inf("", fmt)


def _masked_nonfinite(inputs: dict, mask) -> str:
    """The sentence for a NaN or inf in the k or v of a key that is masked out ("" where none is): the mask must
    keep it out of the scores and of P V, which an additive -inf bias and P's exact zeros do not."""
    if mask is None:
        return ""
    lk = inputs["k"].shape[-2]
    masked = (~np.asarray(mask, bool)).reshape(-1, lk).any(axis=0)  # (masked for some query)
    for name in ("k", "v"):
        a = np.asarray(inputs[name], dtype=np.float64)
        hit = masked & ~np.isfinite(a).reshape(-1, lk, a.shape[-1]).all(axis=(0, 2))
        if not hit.any():
            continue
        bad = "NaN" if np.isnan(a[..., hit, :]).any() else "inf"
        if name == "k":
            return (
                f"a masked key's k holds {bad}, so its score is not finite: a mask added as a -inf bias keeps it "
                f"({bad} + -inf = NaN), and softmax spreads it over the row"
            )
        return f"a masked key's v holds {bad}: its weight, an exact 0, times {bad} is NaN in P V"
    return ""


def diagnose_row(fmt: Format, inputs: dict, mask) -> tuple[str, str]:
    """Why a row gave NaN or inf (the row kinds)."""
    big = fmt.max_float
    with np.errstate(all="ignore"):
        x = inputs["x"].astype(np.float64).reshape(-1)
        kept = np.isfinite(x) if mask is None else np.isfinite(x) & np.asarray(mask).reshape(-1)
        if not kept.any():
            return "", ""
        top = x[kept].max()
        if top > math.log(big):
            largest, limit = _apart(top, math.log(big))
            why = f"exp overflows: the largest logit, {largest}, is past log({_g(big)}) = {limit}"
            return _without_inf(why, fmt)
        if top < fmt.min_subnormal_exp * math.log(2):
            return f"every exp underflows to 0 (the largest logit is {_g(top)}), and 0 / 0 is NaN", ""
        if (x == -np.inf).any():
            return "a -inf logit: -inf - (-inf) is NaN", ""
        total = exp_sum(inputs, mask)
        if total is not None and total > big:  # (the max is subtracted already: only a wider sum holds it)
            return _without_inf(_sum_past(total, fmt, f"{int(kept.sum())} "), fmt, "sum_past")
        if kept.sum() > big:  # (shifted by the max, each exponential is at most 1)
            why = f"the sum of {int(kept.sum())} exponentials can pass {fmt.name}'s largest value {_g(big)}"
            return _without_inf(why, fmt, "sum_past")
    return _without_inf("", fmt)


def _without_inf(why: str, fmt: Format, pattern: str = "") -> tuple[str, str]:
    """A diagnosis, with what a format without infinity adds (float8_e4m3fn: -inf and an overflow are NaN there)."""
    if fmt.overflow != "nan":
        return why, pattern
    note = (
        f"{fmt.name} has no infinity: a -inf on the way (a max started at -inf, a -inf fill or bias) is NaN in it, as "
        "an overflow is"
    )
    return ("; ".join(filter(None, [why, note])), "no_inf")


#: The common fix per event rule; a kind's own (`Kind.fixes`) takes its place. Every fix names the wider type as
#: {wide} (`wider`): float32 for a 16- or 8-bit dtype, float64 for float32, compensated sums for float64; and a
#: wider exponent range as {in_range} (float64 has none wider: scaling by a power of two there).
_EVENT_FIX = {
    "nan": "subtract the row max before exp (exp overflows to inf, and inf / inf is NaN)",
    "overflow": "subtract the row max before exp, and accumulate in {wide}",
    "wrong_inf": "keep the exact result's infinities: an empty sum's log is -inf (not 0, not +inf), a loss on a "
    "-inf target logit is +inf",
    "mask_leak": "exclude masked entries with where (or a -inf fill): a finite fill such as -1e4 is not far enough "
    "below every kept logit",
    "fully_masked": "give rows with nothing kept zeros: where over the kept entries and a guarded division (PyTorch's "
    "safe softmax, FlashAttention); masked_fill(-inf) gives NaN and a finite fill a uniform row",
    "nan_propagation": "let a NaN input reach the output: no nan_to_num, no max or where that skips it",
    "underflow": "shift by the max and divide once at the end, so small results stay representable",
    "nondeterministic": "fix the order of every reduction: no atomic adds, no split or thread count chosen at run "
    "time (torch.use_deterministic_algorithms(True); a fixed number of splits)",
    "batch_variant": "reduce each row or query in the same order whatever the batch: a split-KV size or block size "
    "fixed, not chosen from the batch size (batch-invariant kernels; Thinking Machines 2025)",
    "split_variant": "pin how the keys are split (num_splits, the block size) rather than letting a heuristic "
    "choose it from the batch or the machine: each split reduces the keys in another order (FlashAttention #1897, "
    "sgl-flash-attn #43)",
    "flushed": "keep results below the normal range: gradual underflow (no FTZ/DAZ mode, no exp that flushes), and no "
    "intermediate that underflows before them: p and its products {in_range}, a small p multiplied last",
}
_CAUSE_FIX = {
    "absorbed": "add log1p of the sum without the largest term to the max (Blanchard, Higham & Higham 2021): "
    "log of a sum near 1 loses results below u",
    "subnormal": "a result below the normal range keeps only the bits above the smallest subnormal: form it from "
    "intermediates {in_range}, a small p multiplied last, round once, and keep gradual underflow (no clamp, no "
    "flush, no approximate exp)",
    "accumulation": "accumulate the sum pairwise or in {wide}: a running sum in the dtype stops growing once it "
    "dwarfs each term",
    "sum_overflow": "accumulate the sum of the exponentials in {wide}: in a 16- or 8-bit dtype it overflows once a "
    "row holds more terms near 1 than the dtype's largest value (65,504 in float16)",
    "wrong_terms": "find the term: an error past what rounding the inputs and every intermediate in the dtype can "
    "cost is no rounding, and no wider type fixes it; replay the worst input (softaudit.worst.replay) against the "
    "formula. For attention, a query with nothing to attend gets P = 0 (where over the kept keys, not a fill), so "
    "its g reaches no dK or dV",
    "downcast": "compute in the audited dtype throughout: some intermediates are kept in a narrower type (a "
    "matmul's default precision such as TF32 or bfloat16 passes, a float32 accumulator, a cast on the way)",
    "masked_block": "guard the running max of a block with nothing kept: where the max is still -inf, subtract 0 "
    "instead (m_safe = where(m == -inf, 0, m)), so the block's exps are exact zeros and the rescale exp(m_old - "
    "m_new) is 0, not NaN, as FlashAttention does; and divide by the sum only where it is > 0 (a query that "
    "attends no key at all gets zeros)",
}
#: What a format without infinity asks: no -inf in the computation.
_NO_INF = (
    "keep -inf out of a format without infinity (float8_e4m3fn), where it is NaN: start the row max from the first "
    "entry, not from -inf, mask with where, or compute in {wide} and round once"
)
#: The fix for a NaN or inf whose diagnosis (`diagnose`) names a pattern with a fix of its own.
_PATTERN_FIX = {
    "sum_past": _CAUSE_FIX["sum_overflow"],
    "masked_nan": "mask by selecting, not by adding: where(mask, scores, -inf) drops a masked key's NaN score, which "
    "a -inf bias keeps (NaN + -inf = NaN); and keep masked keys' values out of P V (zero their rows of V, or select), "
    "since P's exact 0 x NaN is NaN",
    "no_inf": f"subtract the row max before exp and sum in {{wide}}; and {_NO_INF}",
}
#: The wider type a fix names, by the audited dtype's precision: past float32, a compensated (double-double) sum.
_WIDER = ((24, "float32"), (53, "float64"))


def wider(fmt: Format | None) -> str:
    """The type a fix can ask a kernel in `fmt` to work in: float32 for 16- and 8-bit dtypes (None: one of them),
    float64 for float32, and for float64 compensated arithmetic (no wider hardware type)."""
    precision = 11 if fmt is None else fmt.precision
    return next((name for bits, name in _WIDER if precision < bits), "compensated (double-double) arithmetic")


def fix(rule: str, kind: str, cause: str = "", pattern: str = "", fmt: Format | None = None) -> str:
    """The known fix for a broken rule (and, for accuracy, the worst element's cause; for a NaN or inf, the pattern
    its diagnosis names): the kind's own fix for the rule where it has one (`Kind.fixes`), else the common one.
    fmt: the audited dtype (None: a 16-bit one), so that no fix asks a float32 kernel to upcast to float32."""
    kind = kinds.get(kind)
    if rule in ("nan", "overflow") and pattern in _PATTERN_FIX:
        text = _PATTERN_FIX[pattern]
    elif rule in _EVENT_FIX:
        text = kind.fixes.get(rule, _EVENT_FIX[rule])
    elif cause in _CAUSE_FIX:
        text = _CAUSE_FIX[cause]
    elif rule in kind.fixes:
        text = kind.fixes[rule]
    else:
        text = f"best practice: {kind.best_practice}"
    if fmt is not None and fmt.precision >= 24:  # (the best-practice built-in works in the dtype there, not wider)
        text = re.sub(r" \([a-z_]+\.[a-z0-9_]+\)", "", text)
    in_range = "scaled by a power of two (float64 has no wider range)" if wider(fmt).startswith("comp") else "in {wide}"
    return text.replace("{in_range}", in_range).replace("{wide}", wider(fmt))
