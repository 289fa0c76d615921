"""Arithmetic in the audited dtype, as kernels do it, for the built-in candidates.

numpy's own np.sum accumulates float16 in float32, which would hide exactly the stalls a float16 kernel has; so
`dtype_sum` adds pairwise with every addition rounded to the dtype, as a tree reduction on a GPU does. Matrix
products accumulate in float32 and round once to a 16-bit dtype, as tensor cores and cuBLAS do by default.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np


def work_dtype(dtype) -> np.dtype:
    """float32 for dtypes narrower than it (the usual upcast), otherwise the dtype itself."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.itemsize < 4 else dtype


def const(value, dtype):
    """A constant rounded to the dtype, as a kernel written for that dtype holds it (-1e9 is -inf in float16).

    value "finfo_min" is the dtype's most negative finite value.
    """
    if value == "finfo_min":
        return np.array(ml_dtypes.finfo(dtype).min).astype(dtype)
    with np.errstate(over="ignore"):
        return np.array(value).astype(dtype)


def dtype_sum(x: np.ndarray) -> np.ndarray:
    """Sum along the last axis, pairwise, each addition rounded to x's dtype; keeps the axis (length 1)."""
    if x.shape[-1] == 0:
        return np.zeros(x.shape[:-1] + (1,), x.dtype)
    with np.errstate(all="ignore"):
        while x.shape[-1] > 1:
            n = x.shape[-1]
            half = n // 2
            s = x[..., :half] + x[..., half : 2 * half]
            x = np.concatenate([s, x[..., 2 * half :]], axis=-1) if n % 2 else s
    return x


def row_max(x: np.ndarray) -> np.ndarray:
    """The maximum along the last axis (keeps the axis). No -inf initial: float8_e4m3fn has no -inf (it is NaN)."""
    if x.shape[-1] == 0:
        return np.full(x.shape[:-1] + (1,), -np.inf).astype(x.dtype)
    return x.max(axis=-1, keepdims=True)


def matmul(a: np.ndarray, b: np.ndarray, dtype) -> np.ndarray:
    """a @ b accumulated in work_dtype and rounded once to dtype."""
    w = work_dtype(dtype)
    with np.errstate(all="ignore"):
        return (a.astype(w) @ b.astype(w)).astype(dtype)


def rowwise(fn):
    """Give fn(x) / fn(x, mask) the calling convention f(x, axis=-1) / f(x, mask, axis=-1) (axis moved last)."""

    @functools.wraps(fn)
    def wrapper(x, *rest, axis=-1):
        x = np.moveaxis(np.asarray(x), axis, -1)
        rest = tuple(np.moveaxis(np.broadcast_to(np.asarray(m), np.moveaxis(x, -1, axis).shape), axis, -1) for m in rest)
        with np.errstate(all="ignore"):
            out = fn(x, *rest)
        return out if out.ndim < x.ndim else np.moveaxis(out, -1, axis)

    return wrapper
