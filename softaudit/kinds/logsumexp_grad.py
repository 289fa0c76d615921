"""logsumexp_grad: logsumexp's vector-Jacobian product dx = p g for an upstream gradient g of one value per row,
along the last axis of x (rows x n), `f(x, g, axis=-1) -> dx`.

Its parts are the row gradient kinds' (kinds/_grads.py): the exact VJP softaudit.reference evaluates, the
conditioning scale `conditioning.logsumexp_grad`, a Gaussian g per row where a family gives none; its families are
the row families and the undefined rows (kinds/_families.py).
"""

from __future__ import annotations

from . import _families, _grads
from ._kind import Kind

LOGSUMEXP_GRAD = Kind(
    "logsumexp_grad",
    "f(x, g, axis=-1) -> dx (g: x's shape without the axis)",
    arguments=("x", "g"),
    keywords=("axis",),
    outputs=("dx",),
    plain="logsumexp_grad.exp_minus_lse",
    standard=("logsumexp_grad.exp_minus_lse", "logsumexp_grad.softmax_in_dtype"),
    best="logsumexp_grad.f32acc",
    best_practice="p g with p in {wide}, round once (logsumexp_grad.f32acc)",
    families=_families.ROWS + _families.UNDEFINED,
    scale_terms="p g and the logits' share in p",
    **_grads.ROW_GRAD_FIELDS,
)
