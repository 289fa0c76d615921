"""Attention's parts of the loop: q (..., Lq, d), k (..., Lk, d), v (..., Lk, dv), a mask (..., Lq, Lk) or None.

The registry imports these; each imports the reference where it uses it, since marking a candidate loads the
registry and must not load the reference (softaudit/adapters).
"""

from __future__ import annotations

import numpy as np

from .. import conditioning as _conditioning


def reference(kind, inputs: dict, mask, dtype) -> tuple:
    from ..reference import evaluate_attention

    return (evaluate_attention(inputs["q"], inputs["k"], inputs["v"], mask, dtype=dtype),)


def conditioning(kind, inputs: dict, mask, references) -> tuple[dict]:
    """What the measures need beyond the reference: undefined queries, queries with nothing kept, sum p|v|, the
    scale."""
    (ref,) = references
    exact = ref.hi if not ref.lo.any() else ref.hi + ref.lo
    q, k, v = (inputs[n] for n in ("q", "k", "v"))
    scores_shape = np.broadcast_shapes(q.shape[:-1] + (k.shape[-2],), k.shape[:-2] + (1, 1))
    keep = np.broadcast_to(True if mask is None else mask, scores_shape)
    scale, vsum = _conditioning.attention(q, k, v, keep, exact, 1 / np.sqrt(q.shape[-1]))
    nothing_kept = ~keep.any(axis=-1) if mask is not None else None
    return ({"undefined": ref.undefined, "nothing_kept": nothing_kept, "vsum": vsum, "scale": scale},)


def element_inputs(kind, pc, position: tuple) -> tuple[dict, np.ndarray | None]:
    """The query behind one output element, with the keys and values of its batch entry (and its mask row)."""
    shape = pc.output_shape
    lead, query = position[:-2], position[-2]
    batch = shape[:-2]
    q, k, v = (np.broadcast_to(pc.inputs[n], batch + pc.inputs[n].shape[-2:])[lead] for n in ("q", "k", "v"))
    mask = None
    if pc.mask is not None:
        mask = np.broadcast_to(pc.mask, batch + (shape[-2], k.shape[-2]))[lead][query]
    return {"q": q[query][None, :], "k": k, "v": v}, mask
