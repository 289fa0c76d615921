"""logsumexp: y = log sum_k e**x_k along the last axis of x (rows x n), one value per row, `f(x, axis=-1)`.

Its parts are the row kinds' (kinds/_rows.py): the exact reference is softaudit.reference's row formula, the
conditioning scale `conditioning.rows` (|y| + sum_k p_k |x_k|, plus 1 for rounding the sum once); its families are
the row families, the undefined rows and the reported row bugs (kinds/_families.py).
"""

from __future__ import annotations

from . import _families, _rows
from ._kind import Kind

LOGSUMEXP = Kind(
    "logsumexp",
    "f(x, axis=-1)",
    arguments=("x",),
    keywords=("axis",),
    outputs=("y",),
    plain="logsumexp.shifted",
    standard=("logsumexp.shifted", "logsumexp.log1p_form"),
    best="logsumexp.log1p_form_f32acc",
    best_practice="max + log1p(sum of the others) in {wide}, round once (logsumexp.log1p_form_f32acc)",
    # (no subnormal cause: a result below the normal range is judged as any other)
    families=_families.ROWS + _families.UNDEFINED + _families.REPORTED_ROWS,
    reduces=True,
    logarithmic=True,
    invariants=("permutation", "lse_below_max"),
    causes=("absorbed",),
    **_rows.ROW_FIELDS,
)
