"""The row kinds' parts of the loop (softmax, log_softmax, logsumexp, masked_softmax): x of rows x n.

The row kind modules (softmax.py, log_softmax.py, logsumexp.py, masked_softmax.py) import these and `ROW_FIELDS`,
what they share as kinds; each part imports the reference where it uses it, since marking a candidate loads the
registry and must not load the reference (softaudit/adapters).
"""

from __future__ import annotations

import numpy as np

from .. import conditioning as _conditioning


def reference(kind, inputs: dict, mask, dtype) -> tuple:
    from ..reference import evaluate

    return (evaluate(kind.name, inputs["x"], mask, dtype=dtype),)


def conditioning(kind, inputs: dict, mask, references) -> tuple[dict]:
    """What the measures need beyond the reference: undefined rows, NaN rows, the scale, masked entries."""
    from ..reference import undefined_rows

    (ref,) = references
    exact = ref.hi if not ref.lo.any() else ref.hi + ref.lo
    x = inputs["x"].astype(np.float64)
    # The policy's undefined rows for every row kind (log-sum-exp included): a NaN or +inf logit, nothing kept.
    undefined = undefined_rows(x, mask)
    kept_nan = (np.isnan(x) & (True if mask is None else mask)).any(axis=-1)
    scale = _conditioning.sum_rounding(kind, _conditioning.rows(kind, x, mask, exact))
    if kind.masked:
        masked = ~np.broadcast_to(mask, x.shape)
        return (
            {
                "undefined": undefined,
                "nothing_kept": masked.all(axis=-1),
                "masked": masked,
                "kept_nan_rows": kept_nan,
                "scale": scale,
            },
        )
    return ({"undefined": undefined, "kept_nan_rows": kept_nan, "scale": scale},)


def element_inputs(kind, pc, position: tuple) -> tuple[dict, np.ndarray | None]:
    """The row (and mask row) behind one output element."""
    row = position if kind.reduces else position[:-1]
    x = pc.inputs["x"]
    mask = None if pc.mask is None else np.broadcast_to(pc.mask, x.shape)[row]
    return {"x": x[row]}, mask


#: What the row kinds share: x of rows x n, reduced along its last axis (each kind module adds the rest).
ROW_FIELDS = {
    "reference": reference,
    "conditioning": conditioning,
    "element_inputs": element_inputs,
    "reduction": ("x", -1),
    "row_wise": True,
}
#: The measures of the kinds whose outputs are probabilities (softmax, masked_softmax).
PROBABILITIES = ("negative", "sum_err", "argmax_flips")
