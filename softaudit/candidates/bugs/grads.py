"""Bug models of the softmax gradients: softmax_grad f(x, g, axis=-1) -> p (g - <g, p>) and log_softmax_grad
f(x, g, axis=-1) -> g - p sum(g), p = softmax(x) computed as the standard forward does (softaudit.candidates.bugs.rows).

Each model flips one switch of `standard`; the fix is the same call without it.
"""

from __future__ import annotations

import numpy as np

from .._ops import dtype_sum, rowwise, running_sum
from . import Inapplicable, Model, Variant
from .rows import WORK, working
from .rows import standard as forward


def standard(
    kind: str,
    x,
    g,
    *,
    work: str = "wide",
    drop_delta: bool = False,
    sum_g: bool = False,
    swap_formula: bool = False,
    running: bool = False,
    in_dtype: bool = False,
    hide_nan: bool = False,
):
    """The backward with one switch per known mistake: drop_delta forgets the <g, p> (or sum g) term; sum_g uses
    sum g for softmax's <g, p> (log_softmax's term in softmax's place); swap_formula computes the other kind's
    gradient; running sums one term at a time; in_dtype rounds every step to the 16-bit dtype; hide_nan zeroes NaN
    outputs."""
    d = x.dtype
    w = d if in_dtype else working(d, work)
    if in_dtype and working(d, "wide") == d:
        raise Inapplicable("the dtype is its own working precision")
    p = forward("softmax", x.astype(w), work="wide").astype(w)
    gw = g.astype(w)
    total = running_sum if running else dtype_sum
    use = "log_softmax_grad" if (kind == "softmax_grad") == swap_formula else "softmax_grad"
    if use == "softmax_grad":
        delta = total(gw if sum_g else gw * p)
        out = p * gw if drop_delta else p * (gw - delta)
    else:
        out = gw if drop_delta else gw - p * total(gw)
    out = out.astype(d)
    return np.where(np.isnan(out), np.zeros((), d), out) if hide_nan else out


def _model(name: str, kinds: tuple, mistake: str, fix: str, mistakes) -> list[Model]:
    def call(kind, switches):
        def grad(x, g):
            return standard(kind, x, g, **switches)

        return rowwise(grad)

    return [
        Model(name, kind, mistake, fix, tuple(Variant(label, call(kind, b), call(kind, f)) for label, b, f in mistakes))
        for kind in kinds
    ]


def _each_work(bad: dict) -> list:
    return [(label, {"work": work} | bad, {"work": work}) for label, work in WORK]


GRADS = ("softmax_grad", "log_softmax_grad")
MODELS = [
    *_model(
        "missing_delta",
        GRADS,
        "the term subtracted from g is missing: softmax's <g, p>, log_softmax's p sum(g)",
        "subtract the term: softmax's dx = p (g - <g, p>), log_softmax's dx = g - p sum(g)",
        _each_work({"drop_delta": True}),
    ),
    *_model(
        "sum_g_for_dot",
        ("softmax_grad",),
        "sum(g) is used where softmax's backward needs <g, p>",
        "subtract <g, p> = sum(g * p), not sum(g)",
        _each_work({"sum_g": True}),
    ),
    *_model(
        "other_kinds_formula",
        GRADS,
        "the other kind's backward formula is used (softmax's for log_softmax, or the reverse)",
        "softmax's dx = p (g - <g, p>); log_softmax's dx = g - p sum(g)",
        _each_work({"swap_formula": True}),
    ),
    *_model(
        "in_dtype",
        GRADS,
        "every step of the backward is rounded to the 16-bit dtype",
        "compute p, the dot product and dx in float32 and round once",
        [("in the dtype", {"in_dtype": True}, {})],
    ),
    *_model(
        "nan_hidden",
        GRADS,
        "a NaN input does not reach the gradient",
        "let a NaN input give NaN: no nan_to_num on the gradient",
        [("NaN outputs set to 0", {"hide_nan": True}, {})],
    ),
    *_model(
        "running_sum",
        GRADS,
        "the backward's sum is taken one term at a time, whose error grows with the row's length",
        "sum pairwise (a tree reduction) or accumulate in a wider type",
        _each_work({"running": True}),
    ),
]
