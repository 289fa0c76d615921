"""log_softmax_grad: log_softmax's vector-Jacobian product dx = g - p sum(g) for an upstream gradient g of x's
shape, along the last axis of x (rows x n), `f(x, g, axis=-1) -> dx`.

Its parts are the row gradient kinds' (kinds/_grads.py): the exact VJP softaudit.reference evaluates, the
conditioning scale `conditioning.log_softmax_grad`, a Gaussian g where a family gives none; its families are the
row families, the undefined rows and the structured upstream gradients (kinds/_families.py).
"""

from __future__ import annotations

from . import _families, _grads
from ._kind import Kind

LOG_SOFTMAX_GRAD = Kind(
    "log_softmax_grad",
    "f(x, g, axis=-1) -> dx",
    arguments=("x", "g"),
    keywords=("axis",),
    outputs=("dx",),
    plain="log_softmax_grad.in_dtype",
    standard=("log_softmax_grad.in_dtype",),
    best="log_softmax_grad.f32acc",
    best_practice="p and g - p sum(g) in {wide}, round once (log_softmax_grad.f32acc)",
    families=_families.ROWS + _families.UNDEFINED + _families.UPSTREAM,
    scale_terms="the terms of g - p sum(g)",
    **_grads.ROW_GRAD_FIELDS,
)
