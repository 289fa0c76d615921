"""Bug models of cross-entropy, f(logits, target, *, ignore_index, label_smoothing, z_loss, softcap, reduction),
and of its gradient f(logits, target, g, *, the same options).

The standard algorithm (`standard`): per row lse = m + log(sum exp(x - m)) in the working precision, the loss
lse - x_y with label smoothing and z-loss as softaudit.candidates.cross_entropy forms them, ignored rows 0 and left
out of a mean; the gradient's (`standard_grad`) w (p - q) per row, times sech(x / c)**2 under a softcap. Each model
flips one switch; the fix is the same call without it.
"""

from __future__ import annotations

import numpy as np

from .._ops import dtype_sum, exp, log, row_max, work_dtype
from ..cross_entropy import capped, from_log_softmax, reduce, tanh, targets
from ..cross_entropy_grad import _finish, _p_minus_q, _weights
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
    cap_every_lane: bool = False,
    pad_to_block: bool = False,
    z_loss_when_off: float = 0.0,
):
    """Cross-entropy with one switch per known mistake: shift=False drops the max; sum_in_dtype sums the
    exponentials in the 16-bit dtype; mean_over_all divides a mean by every row, ignored ones included;
    mean_is_sum returns the sum for reduction="mean"; cap_every_lane applies the softcap to -inf lanes too (and,
    with pad_to_block, to a kernel's block padding read as -inf: `_lanes`); z_loss_when_off adds a z-loss of that
    coefficient where the call's z_loss is 0."""
    d = logits.dtype
    w = working(d, work)
    if sum_in_dtype and work_dtype(d) == d:
        raise Inapplicable("the dtype is its own working precision")
    z_loss = _z_loss(z_loss, z_loss_when_off)
    ignored, y = targets(logits, target, ignore_index)
    with np.errstate(all="ignore"):
        x = _lanes(logits.astype(w), softcap, cap_every_lane, pad_to_block)
        m = row_max(x) if shift else np.zeros((len(x), 1), w)
        m = np.where(np.isneginf(m), np.zeros((), w), m)
        e = exp(x - m)
        s = dtype_sum(e.astype(d) if sum_in_dtype else e).astype(w)
        lse = m + log(s)
        loss = from_log_softmax(x[:, : logits.shape[1]] - lse, lse[:, 0], y, label_smoothing, z_loss)
        if reduction == "mean" and mean_is_sum:
            reduction = "sum"
        out = reduce(loss, ignored, reduction)
        if reduction == "mean" and mean_over_all:
            out = dtype_sum(np.where(ignored, np.zeros((), w), loss))[0] / w.type(len(loss))
        return np.asarray(out).astype(d)


def _lanes(x, softcap, cap_every_lane: bool, pad_to_block: bool):
    """The row's lanes as the exponentials see them: capped on the finite logits (the standard), or on every lane,
    -inf ones becoming -c (cap_every_lane), after padding the row with -inf to the next power of two (pad_to_block:
    a kernel's one block per row, loaded with other=-inf)."""
    if not cap_every_lane:
        return capped(x, softcap)
    if softcap is None:
        raise Inapplicable("no softcap")
    if pad_to_block:
        width = 1 << max(int(x.shape[1]) - 1, 0).bit_length()
        x = np.concatenate([x, np.full((len(x), width - x.shape[1]), -np.inf, x.dtype)], axis=1)
    if not np.isneginf(x).any():
        raise Inapplicable("no -inf lane for the softcap to make finite")
    c = np.array(softcap, x.dtype)
    return c * tanh(x / c)


def standard_grad(
    logits,
    target,
    g,
    *,
    ignore_index=-100,
    label_smoothing=0.0,
    z_loss=0.0,
    softcap=None,
    reduction="none",
    work: str = "wide",
    cap_every_lane: bool = False,
    pad_to_block: bool = False,
    z_loss_when_off: float = 0.0,
    p_in_dtype: bool = False,
):
    """The gradient w (p - q), p over the lanes as `_lanes` makes them (the switches as in `standard`), times
    sech(x / c)**2 of the logits themselves (0 on a -inf lane), rounded to the dtype. p_in_dtype: p rounded to
    the 16-bit dtype before q is subtracted (1 - p_y then cancels in the dtype where p_y is near 1)."""
    d = logits.dtype
    w = working(d, work)
    if p_in_dtype and w == d:
        raise Inapplicable("the dtype is its own working precision")
    z_loss = _z_loss(z_loss, z_loss_when_off)
    ignored, y = targets(logits, target, ignore_index)
    v = logits.shape[1]
    with np.errstate(all="ignore"):
        x = _lanes(logits.astype(w), softcap, cap_every_lane, pad_to_block)
        m = row_max(x)
        m = np.where(np.isneginf(m), np.zeros((), w), m)
        e = exp(x - m)
        s = dtype_sum(e)
        p = (e / s)[:, :v]
        if p_in_dtype:
            p = p.astype(d).astype(w)
        a = _p_minus_q(p, y, v, label_smoothing, z_loss, (m + log(s))[:, 0])
        out = _finish(a, logits, _weights(g, ignored, reduction, w), softcap, d)
        return np.where(ignored[:, None], np.zeros((), d), out)


def _z_loss(z_loss: float, when_off: float) -> float:
    """The z-loss coefficient a kernel uses: the call's, or `when_off` where the call's is 0 (Inapplicable where
    it is not 0, or no coefficient leaks in)."""
    if not when_off:
        return z_loss
    if z_loss:
        raise Inapplicable("the call asks for a z-loss")
    return when_off


#: The z-loss coefficient a kernel adds when z-loss is off: the one PaLM trained with (arXiv 2204.02311, 1e-4),
#: which training code sets as its default (OLMo-core PR #702 added it where the config said 0).
_DEFAULT_Z_LOSS = 1e-4
_GRAD = "cross_entropy_grad"
_Z_LOSS_ADDED = f"z-loss of {_DEFAULT_Z_LOSS:g} lse**2 is added though the call's z_loss is 0"
_Z_LOSS_FIX = "add the z-loss term only where the z_loss coefficient passed is not 0"
_Z_LOSS_VARIANTS = [(f"z-loss {_DEFAULT_Z_LOSS:g} when off", {"z_loss_when_off": _DEFAULT_Z_LOSS}, {})]


def _model(
    name: str, mistake: str, fix: str, mistakes, events: bool = True, kind: str = "cross_entropy", cause=None
) -> Model:
    run = standard if kind == "cross_entropy" else standard_grad

    def call(switches):
        def loss(logits, target, *rest, **options):
            return run(logits, target, *rest, **options, **switches)

        return loss

    variants = tuple(Variant(label, call(bad), call(good)) for label, bad, good in mistakes)
    return Model(name, kind, mistake, fix, variants, events, cause)


#: A transform applied to every lane, the masked ones too: Liger-Kernel's softcap on vocabulary padding.
_LEAK = (
    "a leak: the softcap c tanh(x / c) is applied to the masked (-inf) lanes too, which become -c and take "
    "probability from the kept ones"
)
_LEAK_FIX = "apply the softcap to the kept lanes only, leaving -inf lanes at -inf: where(x == -inf, x, c tanh(x / c))"
_LEAK_VARIANTS = [
    ("the row's -inf lanes capped", {"cap_every_lane": True}, {}),
    (
        "the row's -inf lanes and a power-of-2 block's padding capped",
        {"cap_every_lane": True, "pad_to_block": True},
        {},
    ),
]


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
    _model("z_loss_when_off", f"a {_Z_LOSS_ADDED}", _Z_LOSS_FIX, _Z_LOSS_VARIANTS),
    _model("z_loss_when_off", f"the gradient of a {_Z_LOSS_ADDED}", _Z_LOSS_FIX, _Z_LOSS_VARIANTS, kind=_GRAD),
    _model(
        "p_in_dtype",
        "p is rounded to the 16-bit dtype before the target's 1 is subtracted, so p_y - 1 cancels in the dtype",
        "form p - q in float32 (1 - p_y as the sum of the other lanes' p) and round the gradient once",
        [("p in the dtype", {"p_in_dtype": True}, {})],
        kind="cross_entropy_grad",
    ),
    _model("masked_lanes_made_finite", _LEAK, _LEAK_FIX, _LEAK_VARIANTS, cause="mask_leak"),
    _model("masked_lanes_made_finite", _LEAK, _LEAK_FIX, _LEAK_VARIANTS, kind="cross_entropy_grad", cause="mask_leak"),
]
