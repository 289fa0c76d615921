"""Bug models of the row kinds' gradients: softmax_grad f(x, g, axis=-1) -> p (g - <g, p>), log_softmax_grad
f(x, g, axis=-1) -> g - p sum(g), logsumexp_grad f(x, g, axis=-1) -> p g (g one value per row) and
masked_softmax_grad f(x, mask, g, axis=-1) -> p (g - <g, p>) over the kept entries, 0 on the masked ones; p the
softmax as the standard forward computes it (softaudit.candidates.bugs.rows).

Each model flips one switch of `standard`; the fix is the same call without it.
"""

from __future__ import annotations

import functools

import numpy as np

from .._ops import const, dtype_sum, exp, log, running_sum
from ._model import Inapplicable, Model, Variant
from .rows import FILLS, each_work, working
from .rows import standard as forward


def standard(
    kind: str,
    x,
    g,
    mask=None,
    *,
    work: str = "wide",
    drop_delta: bool = False,
    sum_g: bool = False,
    swap_formula: bool = False,
    running: bool = False,
    in_dtype: bool = False,
    hide_nan: bool = False,
    shift: bool = True,
    unnormalised: bool = False,
    fill=None,
    dot_over_all: bool = False,
    p_wide: bool = False,
    via_lse: bool = False,
    uniform_p: bool = False,
):
    """The backward on rows x (the last axis) with one switch per known mistake: drop_delta forgets the <g, p> (or
    p sum g) term; sum_g uses sum g for softmax's <g, p>; swap_formula computes softmax's gradient for log_softmax or
    the reverse; running sums one term at a time; in_dtype rounds every step to the 16-bit dtype; hide_nan zeroes
    NaN outputs; shift=False forms p without the max; unnormalised forgets p's division by the sum; fill forms a
    masked p from where(mask, x, fill) with the result not masked; dot_over_all takes <g, p> with the unmasked p;
    p_wide forms p in float32 and rounds it to the working precision (as a framework's softmax hands it over);
    via_lse forms p as exp(x - lse), lse = m + log(sum exp(x - m)) in the working precision (autograd's form);
    uniform_p takes log_softmax's p sum(g) with p = 1 / n, as g - mean(g)."""
    d = x.dtype
    w = d if in_dtype else working(d, work)
    if in_dtype and working(d, "wide") == d:
        raise Inapplicable("the dtype is its own working precision")
    if fill is not None and mask is not None:  # (the fill written in the dtype, the result left unmasked)
        x, mask = np.where(mask, x, const(fill, d)), None
    xw, gw = x.astype(w), g.astype(w)
    total = running_sum if running else dtype_sum
    if unnormalised:
        p = exp(xw - xw.max(axis=-1, keepdims=True))
    elif via_lse:
        m = xw.max(axis=-1, keepdims=True)
        p = exp(xw - (m + log(total(exp(xw - m)))))
    else:  # (p in the backward's own precision: the dtype's where the backward works in the dtype)
        within = "dtype" if w != working(d, "wide") and not p_wide else "wide"
        p = forward("masked_softmax" if mask is not None else "softmax", x, mask, shift=shift, work=within).astype(w)
    if kind == "logsumexp_grad":
        out = p * gw[..., None]
    elif (kind == "log_softmax_grad") != swap_formula:
        out = gw if drop_delta else gw - (total(gw) / w.type(x.shape[-1]) if uniform_p else p * total(gw))
    else:
        weights = forward("softmax", np.where(np.isfinite(xw), xw, 0)).astype(w) if dot_over_all else p
        delta = total(gw if sum_g else gw * weights)
        out = p * gw if drop_delta else p * (gw - delta)
    if mask is not None:
        out = np.where(mask, out, np.zeros((), w))
    out = out.astype(d)
    return np.where(np.isnan(out), np.zeros((), d), out) if hide_nan else out


@functools.cache
def _made(kind: str, items: tuple):
    """A function with the kind's calling convention running `standard` with these switches."""
    switches = dict(items)

    def grad(x, *rest, axis=-1):
        x = np.moveaxis(np.asarray(x), axis, -1)
        if kind == "masked_softmax_grad":
            mask, g = (np.moveaxis(np.broadcast_to(a, np.shape(x)), axis, -1) for a in rest)
        else:
            mask, g = None, np.asarray(rest[0])
            g = g if kind == "logsumexp_grad" else np.moveaxis(np.broadcast_to(g, x.shape), axis, -1)
        with np.errstate(all="ignore"):
            out = standard(kind, x, g, mask, **switches)
        return np.moveaxis(out, -1, axis)

    return grad


def _model(name: str, kinds: tuple, mistake: str, fix: str, mistakes) -> list[Model]:
    def call(kind, switches):
        return _made(kind, tuple(sorted(switches.items())))

    return [
        Model(name, kind, mistake, fix, tuple(Variant(label, call(kind, b), call(kind, f)) for label, b, f in mistakes))
        for kind in kinds
    ]


GRADS = ("softmax_grad", "log_softmax_grad", "masked_softmax_grad")
ALL = (*GRADS, "logsumexp_grad")
MODELS = [
    *_model(
        "missing_delta",
        GRADS,
        "the term subtracted from g is missing: softmax's <g, p>, log_softmax's p sum(g)",
        "subtract the term: softmax's dx = p (g - <g, p>), log_softmax's dx = g - p sum(g)",
        each_work({"drop_delta": True}),
    ),
    *_model(
        "mean_for_p_sum",
        ("log_softmax_grad",),
        "the term subtracted from g is mean(g): log_softmax's p sum(g) with p taken as uniform, 1 / n",
        "subtract p sum(g), p the softmax of x: dx = g - softmax(x) sum(g)",
        each_work({"uniform_p": True}),
    ),
    *_model(
        "sum_g_for_dot",
        ("softmax_grad", "masked_softmax_grad"),
        "sum(g) is used where softmax's backward needs <g, p>",
        "subtract <g, p> = sum(g * p), not sum(g)",
        each_work({"sum_g": True}),
    ),
    *_model(
        "other_kinds_formula",
        ("softmax_grad", "log_softmax_grad"),
        "the other kind's backward formula is used (softmax's for log_softmax, or the reverse)",
        "softmax's dx = p (g - <g, p>); log_softmax's dx = g - p sum(g)",
        each_work({"swap_formula": True}),
    ),
    *_model(
        "in_dtype",
        ALL,
        "every step of the backward is rounded to the 16-bit dtype",
        "compute p, the dot product and dx in float32 and round once",
        [
            ("in the dtype", {"in_dtype": True}, {}),
            ("in the dtype, p from a float32 softmax", {"in_dtype": True, "p_wide": True}, {}),
            ("in the dtype, p as exp(x - lse)", {"in_dtype": True, "via_lse": True}, {}),
            (
                "in the dtype, p as exp(x - lse), lse's sum one term at a time",
                {"in_dtype": True, "via_lse": True, "running": True},
                {},
            ),
        ],
    ),
    *_model(
        "no_max_shift",
        ALL,
        "p is formed as exp(x) / sum(exp(x)) without subtracting the row max, so it overflows",
        "subtract the row max before exp when forming p",
        each_work({"shift": False}),
    ),
    *_model(
        "p_not_normalised",
        ("logsumexp_grad",),
        "p is exp(x - max) not divided by its sum",
        "divide by the sum: dx = g exp(x - max) / sum(exp(x - max)), or g exp(x - lse)",
        each_work({"unnormalised": True}),
    ),
    *_model(
        "finite_fill_unmasked_result",
        ("masked_softmax_grad",),
        "p is formed from masked entries filled with a finite value and the gradient is not masked, so masked "
        "entries (and rows with nothing kept) get a gradient",
        "form p with where over the kept entries and give masked entries a gradient of exactly 0",
        [(f"fill {fill}", {"fill": fill}, {}) for fill in FILLS],
    ),
    *_model(
        "dot_over_all",
        ("masked_softmax_grad",),
        "<g, p> is taken with p the softmax over every entry, masked ones included",
        "take <g, p> with the masked p, 0 on masked entries",
        each_work({"dot_over_all": True}),
    ),
    *_model(
        "nan_hidden",
        ALL,
        "a NaN input does not reach the gradient",
        "let a NaN input give NaN: no nan_to_num on the gradient",
        [("NaN outputs set to 0", {"hide_nan": True}, {})],
    ),
    *_model(
        "running_sum",
        GRADS,
        "the backward's sum is taken one term at a time, whose error grows with the row's length",
        "sum pairwise (a tree reduction) or accumulate in {wide}",
        [("float32 for 16-bit inputs", {"running": True}, {})],  # (in the dtype, that is in_dtype's)
    ),
]
