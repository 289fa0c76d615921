"""A dtype's values in order: a value's magnitude as an integer key (its bits without the sign) and back.

For every IEEE-like binary format (float64 down to the float8 types) the bits of a magnitude, read as an unsigned
integer, grow with the magnitude, and the next key is the next representable value (inf after the largest finite).
That is what lets the hunt step one value at a time and bisect between two values of the dtype.
"""

from __future__ import annotations

import math

import numpy as np

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def ordered(dtype) -> bool:
    """Whether the dtype's values can be stepped through by key (a 1, 2, 4 or 8 byte binary float: not an integer
    array, a cross-entropy's targets, nor a boolean one)."""
    return np.dtype(dtype).itemsize in _UINT and np.dtype(dtype).kind not in "biu"


def _sign_bit(dtype) -> int:
    return 1 << (8 * np.dtype(dtype).itemsize - 1)


def top_key(dtype) -> int:
    """The largest key: all the bits but the sign's (a NaN)."""
    return _sign_bit(dtype) - 1


def key(value, dtype) -> int:
    """The magnitude of `value` (a value of the dtype) as an integer: 0 for zero, growing with |value|."""
    dtype = np.dtype(dtype)
    bits = int(np.array(value, dtype).view(_UINT[dtype.itemsize]))
    return bits & (_sign_bit(dtype) - 1)


def with_key(k: int, negative: bool, dtype):
    """The value of the dtype with magnitude key `k` and the given sign (zero is always +0: -0 is NaN in the
    float8 fnuz types)."""
    dtype = np.dtype(dtype)
    bits = k | (_sign_bit(dtype) if negative and k else 0)
    return np.array(bits, _UINT[dtype.itemsize]).view(dtype)[()]


def first_above(t: float, dtype):
    """The smallest value of the dtype above t (t >= 0 and finite), or None past the dtype's largest."""
    dtype = np.dtype(dtype)
    with np.errstate(over="ignore"):
        near = np.array(t).astype(dtype)
    if not math.isfinite(float(near)):
        return None
    k = key(near, dtype) + (float(near) <= t)
    found = with_key(k, False, dtype)
    return found if math.isfinite(float(found)) else None
