"""softmax: y_i = e**x_i / sum_k e**x_k along the last axis of x (rows x n), `f(x, axis=-1)`.

Its parts are the row kinds' (kinds/_rows.py): the exact reference is softaudit.reference's row formula, the
conditioning scale `conditioning.rows` (p_i (1 + sum_k |delta_ik - p_k| |x_k|)); its families are the row families,
the undefined rows and the reported row bugs (kinds/_families.py).
"""

from __future__ import annotations

from . import _families, _rows
from ._kind import Kind

SOFTMAX = Kind(
    "softmax",
    "f(x, axis=-1)",
    arguments=("x",),
    keywords=("axis",),
    outputs=("y",),
    plain="softmax.max_shifted",
    standard=(
        "softmax.max_shifted",
        "softmax.online_b128",
        "softmax.exp2",
        "softmax.division_free",
        "softmax.log1p_form",
    ),
    best="softmax.max_shifted_f32acc",
    best_practice="max-shift and sum in {wide}, round once (softmax.max_shifted_f32acc)",
    families=_families.ROWS + _families.UNDEFINED + _families.REPORTED_ROWS,
    reduces=False,
    logarithmic=False,
    invariants=("shift", "permutation", "monotonic"),
    measures=_rows.PROBABILITIES,
    causes=("subnormal",),
    **_rows.ROW_FIELDS,
)
