"""Causes in plain words: what happened at a row's worst element, why an event happened, and the known fix.

Everything here reads numbers the audit already has (the output, the exact value, its conditioning scale, the
inputs of the row); nothing calls a candidate. docs/policy.md lists the causes and the fixes.
"""

from __future__ import annotations

import math

import numpy as np

from . import kinds
from .reference import Format

#: The worst element's result is this many times smaller than its conditioning scale: a cancellation.
CANCELLATION = 8.0
#: Rows at least this long whose worst error is past a few roundings: the sum's errors accumulated.
LONG_ROW = 1024


def _g(value: float) -> str:
    return f"{value:.4g}"


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
    kind: str, fmt: Format, y: float, r: float, rounded: float, scale: float, n: int, exp_sum: float | None = None
) -> tuple[str, str]:
    """(cause, sentence) for the worst element: output y, exact value r, its correct rounding, its conditioning
    scale, n the length of the reduction behind it (row length, or keys for attention), and exp_sum the exact sum
    of its row's exponentials shifted by the row's max (`exp_sum`; None where the kind has none)."""
    kind = kinds.get(kind)
    u = math.ldexp(1.0, -fmt.precision)
    normal = math.ldexp(1.0, max(fmt.emin, -1074))
    too_big = exp_sum is not None and exp_sum > fmt.max_float  # (past the dtype: no sum in it holds it)
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
            return "flushed", f"{_g(r)} is subnormal in {fmt.name} and came out 0 (flushed to zero)"
        if "absorbed" in kind.causes and abs(r) < u:
            return "absorbed", (
                f"the exact result {_g(r)} is below u = {_g(u)} and came out 0: a log of a sum that rounds to 1"
            )
        return (
            "underflow",
            f"came out 0 where the exact result is {_g(r)}: an intermediate underflowed (or a sum overflowed)",
        )
    relative = _ratio(_ratio(abs(y - r), abs(r)), u)
    if too_big and relative > 4:  # (a sum in the dtype stalls short of it, or rounds past it: not a subnormal issue)
        return "accumulation", (
            f"{relative:.3g} u relative error: {_sum_past(exp_sum, fmt)}, which a sum kept in {fmt.name} cannot "
            "reach (it stalls or overflows)"
        )
    if abs(r) < normal and "subnormal" in kind.causes:
        return "subnormal", (
            f"the exact result {_g(r)} is below {fmt.name}'s normal range, where errors count against "
            f"the smallest normal {_g(normal)}; the output {_g(y)} is off by {_g(abs(y - r))}"
        )
    amplified = _ratio(scale, abs(r))
    if amplified >= CANCELLATION:
        if kind.scale_terms:
            return "cancellation", (
                f"the output {_g(r)} cancels: its terms ({kind.scale_terms}) add up to "
                f"{_g(scale)}, {amplified:.3g}x larger"
            )
        return "cancellation", (
            f"the result {_g(r)} is {amplified:.3g}x smaller than its conditioning scale: rounding "
            "the inputs alone moves it that many u"
        )
    if n >= LONG_ROW and relative > 4:
        return "accumulation", f"{relative:.3g} u relative error in a reduction over {n} entries"
    if relative <= 2:
        return "rounding", f"{relative:.2g} u relative error: within a rounding or two"
    return "precision", f"{relative:.3g} u relative error: several roundings in the working precision"


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
    with np.errstate(under="ignore"):
        return float(np.exp(x[kept] - x[kept].max()).sum())


def diagnose(kind: str, fmt: Format, inputs: dict, mask) -> str:
    """Why a row (for attention: a query with its keys) gave NaN or inf: the input pattern that explains it."""
    return kinds.get(kind).part("diagnose")(fmt, inputs, mask)


def diagnose_scores(fmt: Format, inputs: dict, mask) -> str:
    """Why a query with its keys gave NaN or inf (attention)."""
    big = fmt.max_float
    with np.errstate(all="ignore"):
        q, k = inputs["q"].astype(np.float64), inputs["k"].astype(np.float64)
        raw = np.abs(q @ np.swapaxes(k, -1, -2)).max(initial=0.0)
        if raw > big:
            return f"the scores q.k reach {_g(raw)}, past {fmt.name}'s largest value {_g(big)}"
    return ""


def diagnose_row(fmt: Format, inputs: dict, mask) -> str:
    """Why a row gave NaN or inf (the row kinds)."""
    big = fmt.max_float
    with np.errstate(all="ignore"):
        x = inputs["x"].astype(np.float64).reshape(-1)
        kept = np.isfinite(x) if mask is None else np.isfinite(x) & np.asarray(mask).reshape(-1)
        if not kept.any():
            return ""
        top = x[kept].max()
        if top > math.log(big):
            return f"exp overflows: the largest logit, {_g(top)}, is past log({_g(big)}) = {_g(math.log(big))}"
        if top < fmt.min_subnormal_exp * math.log(2):
            return f"every exp underflows to 0 (the largest logit is {_g(top)}), and 0 / 0 is NaN"
        if (x == -np.inf).any():
            return "a -inf logit: -inf - (-inf) is NaN"
        total = exp_sum(inputs, mask)
        if total is not None and total > big:
            return _sum_past(total, fmt, f"{int(kept.sum())} ")
        if kept.sum() > big:  # (shifted by the max, each exponential is at most 1)
            return f"the sum of {int(kept.sum())} exponentials can pass {fmt.name}'s largest value {_g(big)}"
    return ""


#: The common fix per event rule; a kind's own (`Kind.fixes`) takes its place.
_EVENT_FIX = {
    "nan": "subtract the row max before exp (exp overflows to inf, and inf / inf is NaN)",
    "overflow": "subtract the row max before exp, and accumulate in float32",
    "mask_leak": "exclude masked entries with where (or a -inf fill): a finite fill such as -1e4 is not far enough "
    "below every kept logit",
    "fully_masked": "give rows with nothing kept zeros: where over the kept entries and a guarded division (PyTorch's "
    "safe softmax, FlashAttention); masked_fill(-inf) gives NaN and a finite fill a uniform row",
    "nan_propagation": "let a NaN input reach the output: no nan_to_num, no max or where that skips it",
    "underflow": "shift by the max and divide once at the end, so small results stay representable",
    "flushed": "subnormal results are flushed to zero (an FTZ/DAZ mode or a flushing exp); IEEE gradual underflow "
    "keeps them",
}
_CAUSE_FIX = {
    "absorbed": "add log1p of the sum without the largest term to the max (Blanchard, Higham & Higham 2021): "
    "log of a sum near 1 loses results below u",
    "subnormal": "keep results below the normal range as IEEE arithmetic rounds them (gradual underflow): no clamp, no "
    "approximate exp, no flush",
    "accumulation": "accumulate the sum in float32 (or pairwise): a sum in the dtype stops growing once it dwarfs "
    "each term",
    "sum_overflow": "accumulate the sum of the exponentials in float32: in a 16- or 8-bit dtype it overflows once a "
    "row holds more terms near 1 than the dtype's largest value (65,504 in float16)",
}


def fix(rule: str, kind: str, cause: str = "") -> str:
    """The known fix for a broken rule (and, for accuracy, the worst element's cause): the kind's own fix for the
    rule where it has one (`Kind.fixes`), else the common one."""
    kind = kinds.get(kind)
    if rule in _EVENT_FIX:
        return kind.fixes.get(rule, _EVENT_FIX[rule])
    if cause in _CAUSE_FIX:
        return _CAUSE_FIX[cause]
    if rule in kind.fixes:
        return kind.fixes[rule]
    return f"best practice: {kind.best_practice}"
