"""masked_softmax: softmax over the entries the boolean mask keeps (True = keep), 0 elsewhere, along the last axis
of x (rows x n), `f(x, mask, axis=-1)`; a row with nothing kept is the policy's fully masked rule's.

Its parts are the row kinds' (kinds/_rows.py): the exact reference is softaudit.reference's row formula over the
kept entries, the conditioning scale `conditioning.rows` as softmax's over them, and the masked entries for the
masked values invariant; its families are the row families, the undefined rows, the mask families, its mask grid
and the reported row bugs (kinds/_families.py).
"""

from __future__ import annotations

from . import _families, _rows
from ._kind import Kind

#: The mask x score-regime x length grid (softaudit/cases/_grid.py), 144 cases: the forward kind only (the gradient
#: kind's time in the main job).
_GRID = ("mask_grid",)

MASKED_SOFTMAX = Kind(
    "masked_softmax",
    "f(x, mask, axis=-1)",
    arguments=("x", "mask"),
    keywords=("axis",),
    outputs=("y",),
    plain="masked_softmax.where_in_dtype",
    standard=("masked_softmax.where_in_dtype",),
    best="masked_softmax.where",
    best_practice="where over the kept entries in {wide}, round once (masked_softmax.where)",
    families=_families.ROWS + _families.UNDEFINED + _families.MASKED + _GRID + _families.REPORTED_ROWS,
    reduces=False,
    logarithmic=False,
    invariants=("shift", "permutation", "monotonic", "masked_values", "masked_equals_kept"),
    measures=_rows.PROBABILITIES,
    causes=("subnormal",),
    fixes={"nan": "take the max over the kept entries only and exclude masked ones with where"},
    **_rows.ROW_FIELDS,
)
