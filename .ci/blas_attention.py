"""A user's attention as people write it in numpy: float32 scores and P V through BLAS (`@`), masked keys filled
with -inf. The flake matrix audits it because its bits depend on the BLAS's thread count unless softaudit pins it
(issue 24: 3.22e4 -> 1.22e5 ulp between a Dask and a serial run)."""

import numpy as np

import softaudit


@softaudit.candidate(kind="attention")
def attn_masked_fill_neginf(q, k, v, mask=None):
    with np.errstate(all="ignore"):
        s = (q @ np.swapaxes(k, -1, -2)) / np.sqrt(np.float32(q.shape[-1])).astype(q.dtype)
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return ((e / e.sum(axis=-1, keepdims=True)) @ v).astype(q.dtype)
