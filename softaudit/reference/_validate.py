"""Checks on the arguments of the reference functions: one clear TypeError or ValueError naming the argument."""

from __future__ import annotations

import numbers

import numpy as np

from ._formats import Format, format_of, is_float_dtype, mp_format


def float_array(value, name: str, *, min_ndim: int = 1) -> np.ndarray:
    """`value` as a floating-point array of at least min_ndim dimensions, its dtype unchanged."""
    arr = np.asarray(value)
    if not is_float_dtype(arr.dtype):
        raise TypeError(f"{name} must be a floating-point array, got dtype {arr.dtype}")
    if arr.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimension(s), got shape {arr.shape}")
    return arr


def bool_mask(value, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """`value` as a boolean array broadcast to `shape`."""
    arr = np.asarray(value)
    if arr.dtype != np.bool_:
        raise TypeError(f"{name} must be a boolean array (True = keep), got dtype {arr.dtype}")
    try:
        return np.broadcast_to(arr, shape)
    except ValueError:
        raise ValueError(f"{name} of shape {arr.shape} does not broadcast to {shape}") from None


def axis_index(axis, ndim: int) -> int:
    if not isinstance(axis, numbers.Integral) or isinstance(axis, bool):
        raise TypeError(f"axis must be an integer, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for x with {ndim} dimension(s)")
    return int(axis) % ndim


def target(dtype, prec: int) -> Format:
    """The format results are rounded to: `dtype`, or mpmath values at `prec` bits when dtype is None."""
    return mp_format(prec) if dtype is None else format_of(dtype)


def scale_value(scale) -> float | None:
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number or None, got {scale!r}")
    if isinstance(scale, np.longdouble) and np.longdouble(float(scale)) != scale:
        raise ValueError("scale must be exactly representable as a float64")
    value = float(scale)
    if not np.isfinite(value):
        raise ValueError(f"scale must be finite, got {scale!r}")
    return value
