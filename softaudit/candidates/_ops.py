"""Arithmetic in the audited dtype, as kernels do it, for the built-in candidates: the same bits on every CPU.

numpy's own np.sum accumulates float16 in float32, which would hide exactly the stalls a float16 kernel has; so
`dtype_sum` adds pairwise with every addition rounded to the dtype, as a tree reduction on a GPU does. Matrix
products form each product in the working dtype (float32 for 16-bit and 8-bit dtypes, where those products are
exact) and add them pairwise in it, rounding once to the dtype, as tensor cores and cuBLAS do by default.

Everything here, and in the built-ins, uses IEEE basic operations only (+ - * /, sqrt, comparisons, casts, rint,
frexp, ldexp), whose results every CPU agrees on; exp, exp2, log and log1p come from `_libm` (computed in float64,
rounded once), not from numpy's SIMD- and SVML-dispatched ufuncs, and matrix products from `matmul`, not from BLAS,
whose kernels differ per CPU. So a built-in gives the same bits on every x86-64 machine.
"""

from __future__ import annotations

import functools
import math

import ml_dtypes
import numpy as np

from .._libm import exp as exp
from .._libm import exp2 as exp2
from .._libm import log as log
from .._libm import log1p as log1p

#: Largest number of elements `matmul` holds in its product temporary (2 MiB in float64): the pairwise sum then
#: works in the CPU's cache. On attention's shapes (16 queries x 64 or 128 x 4,096 keys) larger chunks leave the
#: cache and smaller ones pay Python's loop over more chunks; the order of the additions, and so the bits, do not
#: depend on it.
MATMUL_CHUNK = 2**18


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


def running_sum(x: np.ndarray) -> np.ndarray:
    """Sum along the last axis one term at a time (recursive summation), each partial sum rounded to x's dtype, as
    a loop kernel does and as numpy reduces bfloat16 and float8; keeps the axis (length 1)."""
    if x.shape[-1] == 0:
        return np.zeros(x.shape[:-1] + (1,), x.dtype)
    with np.errstate(all="ignore"):
        return np.add.accumulate(x, axis=-1)[..., -1:]


def row_max(x: np.ndarray) -> np.ndarray:
    """The maximum along the last axis (keeps the axis). No -inf initial: float8_e4m3fn has no -inf (it is NaN)."""
    if x.shape[-1] == 0:
        return np.full(x.shape[:-1] + (1,), -np.inf).astype(x.dtype)
    return x.max(axis=-1, keepdims=True)


def matmul(a, b, dtype, *, chunk: int = MATMUL_CHUNK) -> np.ndarray:
    """a @ b (batch axes broadcast, 1-D operands as `@` treats them), the same bits on every CPU.

    Each product is formed in work_dtype(dtype) (exact there for 16-bit and 8-bit inputs), the products are added
    pairwise along the contraction axis in the order `dtype_sum` uses, every addition rounded to the working dtype,
    and the sums are rounded once to dtype. The (rows, K, columns) products are formed `chunk` elements at a time (at
    least one column of K), so memory stays bounded whatever the shapes.
    """
    w = work_dtype(dtype)
    a, b = np.asarray(a).astype(w, copy=False), np.asarray(b).astype(w, copy=False)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: operands must have at least one dimension")
    a2, b2 = (a[None, :] if a.ndim == 1 else a), (b[:, None] if b.ndim == 1 else b)
    (m, k), (k_b, n) = a2.shape[-2:], b2.shape[-2:]
    if k != k_b:
        raise ValueError(f"matmul: contraction dimensions differ ({k} and {k_b}) for shapes {a.shape} and {b.shape}")
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    count = math.prod(batch)
    lefts = np.broadcast_to(a2, batch + (m, k)).reshape(count, m, k)
    # Contiguous along the columns: the products' inner loop then reads b in order (attention's k^T, a transposed
    # view, read with a stride of d, is an order of magnitude slower).
    rights = np.ascontiguousarray(np.broadcast_to(b2, batch + (k, n)).reshape(count, k, n))
    out = np.empty((count, m, n), w)
    # A step: several batch entries where whole ones fit in a chunk, else rows and columns of one; each entry's
    # right operand is read in place (gathering it for every row, as before, cost more on attention's heads).
    step_n = max(1, min(n, chunk // max(k, 1)))
    step_r = max(1, min(m, chunk // (max(k, 1) * step_n)))
    step_e = max(1, chunk // (max(k, 1) * step_n * step_r)) if step_r == m else 1
    with np.errstate(all="ignore"):
        for e0 in range(0, count, step_e):
            for r0 in range(0, m, step_r):
                left = lefts[e0 : e0 + step_e, r0 : r0 + step_r].transpose(2, 0, 1)[:, :, :, None]
                for c0 in range(0, n, step_n):
                    right = rights[e0 : e0 + step_e, :, c0 : c0 + step_n].transpose(1, 0, 2)[:, :, None, :]
                    # (contraction axis first: contiguous halves for the pairwise sum)
                    products = np.empty((k, left.shape[1], left.shape[2], right.shape[-1]), w)
                    np.multiply(left, right, out=products)
                    out[e0 : e0 + step_e, r0 : r0 + step_r, c0 : c0 + step_n] = _pairwise_sum_leading(products)
    out = out.reshape(batch + (m, n))
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return out.astype(dtype, copy=False)


def running_matmul(a, b, dtype) -> np.ndarray:
    """a @ b (both at least 2-D, batch axes broadcast) with each product formed in work_dtype(dtype) and the
    products added one term at a time along the contraction axis (recursive summation, as a loop kernel adds them),
    every addition rounded to the working dtype; rounded once to dtype."""
    w = work_dtype(dtype)
    a, b = np.asarray(a).astype(w, copy=False), np.asarray(b).astype(w, copy=False)
    out = np.zeros(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]), w)
    with np.errstate(all="ignore"):
        for j in range(a.shape[-1]):
            out += a[..., :, j : j + 1] * b[..., j : j + 1, :]
    return out.astype(dtype, copy=False)


def _pairwise_sum_leading(x: np.ndarray) -> np.ndarray:
    """Sum over the first axis in dtype_sum's order (entry i plus entry i + n // 2, the odd last one carried),
    every addition rounded to x's dtype; x is overwritten (it is matmul's own temporary)."""
    if x.shape[0] == 0:
        return np.zeros(x.shape[1:], x.dtype)
    while x.shape[0] > 1:
        n = x.shape[0]
        half = n // 2
        np.add(x[:half], x[half : 2 * half], out=x[:half])
        if n % 2:
            x[half] = x[n - 1]
        x = x[: half + n % 2]
    return x[0]


def rowwise(fn):
    """Give fn(x) / fn(x, mask) the calling convention f(x, axis=-1) / f(x, mask, axis=-1) (axis moved last)."""

    @functools.wraps(fn)
    def wrapper(x, *rest, axis=-1):
        x = np.asarray(x)
        # (the usual last axis is not moved there and back: those moves showed in a profile of the warm main job)
        moved = not (x.ndim and axis in (-1, x.ndim - 1))
        shape = x.shape
        if moved:
            x = np.moveaxis(x, axis, -1)
        rest = tuple(np.broadcast_to(np.asarray(m), shape) for m in rest)
        if moved:
            rest = tuple(np.moveaxis(m, axis, -1) for m in rest)
        with np.errstate(all="ignore"):
            out = fn(x, *rest)
        return np.moveaxis(out, -1, axis) if moved and out.ndim == x.ndim else out

    return wrapper
