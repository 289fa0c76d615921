"""softmax_grad: softmax's vector-Jacobian product dx = p (g - <g, p>) for an upstream gradient g of x's shape,
along the last axis of x (rows x n), `f(x, g, axis=-1) -> dx`.

Its parts are the row gradient kinds' (kinds/_grads.py): the exact VJP softaudit.reference evaluates, the
conditioning scale `conditioning.softmax_grad`, a Gaussian g where a family gives none; its families are the row
families, the undefined rows and the structured upstream gradients (kinds/_families.py).
"""

from __future__ import annotations

from . import _families, _grads
from ._kind import Kind

SOFTMAX_GRAD = Kind(
    "softmax_grad",
    "f(x, g, axis=-1) -> dx",
    arguments=("x", "g"),
    keywords=("axis",),
    outputs=("dx",),
    plain="softmax_grad.in_dtype",
    # saved_output: what autograd does (the forward's output rounded to the dtype, the backward in float32)
    standard=("softmax_grad.in_dtype", "softmax_grad.from_logp", "softmax_grad.saved_output"),
    best="softmax_grad.f32acc",
    best_practice="p, <g, p> and p (g - <g, p>) in {wide}, round once (softmax_grad.f32acc)",
    families=_families.ROWS + _families.UNDEFINED + _families.UPSTREAM,
    scale_terms=_grads.SOFTMAX_GRAD_TERMS,
    measures=("sum_zero",),
    **_grads.ROW_GRAD_FIELDS,
)
