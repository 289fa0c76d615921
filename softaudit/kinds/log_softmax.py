"""log_softmax: y_i = x_i - log sum_k e**x_k along the last axis of x (rows x n), `f(x, axis=-1)`.

Its parts are the row kinds' (kinds/_rows.py): the exact reference is softaudit.reference's row formula, the
conditioning scale `conditioning.rows` (|y_i| + sum_k |delta_ik - p_k| |x_k|, plus 1 for rounding the sum once);
its families are the row families, the undefined rows and the reported row bugs (kinds/_families.py).
"""

from __future__ import annotations

from . import _families, _rows
from ._kind import Kind

LOG_SOFTMAX = Kind(
    "log_softmax",
    "f(x, axis=-1)",
    arguments=("x",),
    keywords=("axis",),
    outputs=("y",),
    plain="log_softmax.shifted",
    standard=("log_softmax.shifted", "log_softmax.log1p_form"),
    best="log_softmax.log1p_form_f32acc",
    best_practice="x - max - log1p(sum of the others) in {wide}, round once (log_softmax.log1p_form_f32acc)",
    families=_families.ROWS + _families.UNDEFINED + _families.REPORTED_ROWS,
    reduces=False,
    logarithmic=True,
    invariants=("shift", "permutation", "monotonic"),
    measures=("argmax_flips",),
    causes=("absorbed", "subnormal"),
    **_rows.ROW_FIELDS,
)
