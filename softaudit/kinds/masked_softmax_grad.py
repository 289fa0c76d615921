"""masked_softmax_grad: masked_softmax's vector-Jacobian product, softmax's over the kept entries and exactly 0 at
the masked ones (and in a row with nothing kept), `f(x, mask, g, axis=-1) -> dx`.

Its parts are the row gradient kinds' (kinds/_grads.py): the exact VJP softaudit.reference evaluates, the
conditioning scale `conditioning.softmax_grad` over the kept entries, the masked entries, a Gaussian g where a
family gives none; its families are the row families, the undefined rows, the mask families and the structured
upstream gradients (kinds/_families.py).
"""

from __future__ import annotations

from . import _families, _grads
from ._kind import Kind

MASKED_SOFTMAX_GRAD = Kind(
    "masked_softmax_grad",
    "f(x, mask, g, axis=-1) -> dx",
    arguments=("x", "mask", "g"),
    keywords=("axis",),
    outputs=("dx",),
    plain="masked_softmax_grad.where_in_dtype",
    standard=("masked_softmax_grad.where_in_dtype", "masked_softmax_grad.where_saved_output"),
    best="masked_softmax_grad.where",
    best_practice=(
        "where over the kept entries in {wide}, exact zeros elsewhere, round once (masked_softmax_grad.where)"
    ),
    families=_families.ROWS + _families.UNDEFINED + _families.MASKED + _families.UPSTREAM,
    scale_terms=_grads.SOFTMAX_GRAD_TERMS,
    measures=("sum_zero",),
    leak="masked entries get a gradient",
    fixes={
        "nan": "give rows with nothing kept a zero gradient: where over the kept entries, not a -inf fill",
        "mask_leak": "multiply the gradient by the mask (or use where): a masked entry's gradient is exactly 0",
    },
    **_grads.ROW_GRAD_FIELDS,
)
