"""Bug models of cross-entropy, f(logits, target, *, ignore_index, label_smoothing, z_loss, softcap, reduction).

The standard algorithm (`standard`): per row lse = m + log(sum exp(x - m)) in the working precision, the loss
lse - x_y with label smoothing and z-loss as softaudit.candidates.cross_entropy forms them, ignored rows 0 and left
out of a mean. Each model flips one switch; the fix is the same call without it.
"""

from __future__ import annotations

import numpy as np

from .._ops import dtype_sum, exp, log, row_max, work_dtype
from ..cross_entropy import capped, from_log_softmax, reduce, targets
from ._model import Inapplicable, Model, Variant
from .rows import NARROWER, each_work, working


def standard(
    logits,
    target,
    *,
    ignore_index=-100,
    label_smoothing=0.0,
    z_loss=0.0,
    softcap=None,
    reduction="none",
    work: str = "wide",
    shift: bool = True,
    sum_in_dtype: bool = False,
    mean_over_all: bool = False,
    mean_is_sum: bool = False,
):
    """Cross-entropy with one switch per known mistake: shift=False drops the max; sum_in_dtype sums the
    exponentials in the 16-bit dtype; mean_over_all divides a mean by every row, ignored ones included;
    mean_is_sum returns the sum for reduction="mean"."""
    d = logits.dtype
    w = working(d, work)
    if sum_in_dtype and work_dtype(d) == d:
        raise Inapplicable("the dtype is its own working precision")
    ignored, y = targets(logits, target, ignore_index)
    with np.errstate(all="ignore"):
        x = capped(logits.astype(w), softcap)
        m = row_max(x) if shift else np.zeros((len(x), 1), w)
        m = np.where(np.isneginf(m), np.zeros((), w), m)
        e = exp(x - m)
        s = dtype_sum(e.astype(d) if sum_in_dtype else e).astype(w)
        lse = m + log(s)
        loss = from_log_softmax(x - lse, lse[:, 0], y, label_smoothing, z_loss)
        if reduction == "mean" and mean_is_sum:
            reduction = "sum"
        out = reduce(loss, ignored, reduction)
        if reduction == "mean" and mean_over_all:
            out = dtype_sum(np.where(ignored, np.zeros((), w), loss))[0] / w.type(len(loss))
        return np.asarray(out).astype(d)


def _model(name: str, mistake: str, fix: str, mistakes, events: bool = True) -> Model:
    def call(switches):
        def loss(logits, target, **options):
            return standard(logits, target, **options, **switches)

        return loss

    variants = tuple(Variant(label, call(bad), call(good)) for label, bad, good in mistakes)
    return Model(name, "cross_entropy", mistake, fix, variants, events)


MODELS = [
    _model(
        "mean_over_all_rows",
        "the mean divides by every row, ignored rows included",
        "divide the mean by the number of rows whose target is not ignore_index",
        each_work({"mean_over_all": True}),
    ),
    _model(
        "mean_is_sum",
        'reduction="mean" returns the sum of the rows\' losses',
        "divide the sum by the number of rows not ignored",
        each_work({"mean_is_sum": True}),
    ),
    _model(
        "no_max_shift",
        "log(sum(exp(x))) is taken without subtracting the row max, so exp overflows",
        "subtract the row max before exp and add it back: lse = m + log(sum(exp(x - m)))",
        each_work({"shift": False}),
    ),
    _model(
        "sum_in_dtype",
        "the exponentials are summed in the 16-bit dtype",
        "accumulate the sum in float32",
        [("sum in the dtype", {"sum_in_dtype": True}, {})],
    ),
    _model(
        "downcast",
        "the computation runs in a narrower type than the audited dtype",
        "compute in the audited dtype (no cast to a narrower type on the way)",
        [(f"in {narrow}", {"work": narrow}, {}) for narrow in sorted({n for ns in NARROWER.values() for n in ns})],
        events=False,
    ),
]
