"""What the corpus's implementations share: the working precision and rounding once."""

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)


def wide(dtype):
    """float32 for a 16-bit dtype, the dtype itself otherwise: where sound code does its arithmetic."""
    return np.dtype(np.float32) if np.dtype(dtype).itemsize < 4 else np.dtype(dtype)


def up(*arrays):
    """The arrays in their dtype's working precision (wide)."""
    return [np.asarray(a).astype(wide(a.dtype)) for a in arrays]


def f64(*arrays):
    return [np.asarray(a).astype(np.float64) for a in arrays]


def keep_of(mask, shape):
    """The mask broadcast to the scores' shape (all kept when there is none)."""
    return np.ones(shape, bool) if mask is None else np.broadcast_to(mask, shape)


def guarded_max(t, axis=-1):
    """The row max, 0 where the row is all -inf (nothing kept), so exp(t - m) is 0 there and not NaN (a NaN or +inf
    max stays: such a row's result is undefined and must come out NaN)."""
    m = t.max(axis=axis, keepdims=True)
    return np.where(m == -np.inf, 0, m).astype(t.dtype)


def safe_divide(e, s):
    """e / s, 0 where s is 0 (a row with nothing kept); a NaN s stays NaN."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s == 0, 0, e / np.where(s == 0, 1, s)).astype(e.dtype)


def unbroadcast(grad, shape):
    """grad summed over the axes along which an input of `shape` was broadcast (a gradient of that input)."""
    extra = grad.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(extra + i for i, n in enumerate(shape) if n == 1 and grad.shape[extra + i] != 1)
    return grad.sum(axis=axes).reshape(shape) if axes else grad
