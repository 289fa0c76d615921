"""Framework bridges: the audited numpy arrays into a framework's tensors of the same dtype, bit for bit, and back.

bfloat16 and the float8 types go through an integer view of their bits, so nothing is ever rounded on the way.
A dtype a framework cannot hold raises CandidateSkip, which the audit reports as a `skip` row with the reason.
"""

from __future__ import annotations

import contextlib

import numpy as np

INSTALL = {
    "torch": "PyTorch is not installed: pip install 'softaudit[torch]'",
    "jax": "JAX is not installed: pip install 'softaudit[jax]'",
}


class CandidateSkip(Exception):
    """The candidate cannot run in this dtype (or on these inputs); the message says why."""


def _torch_dtype(torch, dtype: np.dtype):
    names = {"float16": "float16", "float32": "float32", "float64": "float64", "bfloat16": "bfloat16",
             "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2", "bool": "bool"}  # fmt: skip
    found = getattr(torch, names.get(dtype.name, "-"), None)
    if found is None:
        raise CandidateSkip(f"torch has no {dtype.name}")
    return found


def to_torch(arr: np.ndarray, device: str | None):
    import torch

    arr = np.ascontiguousarray(arr)
    target = _torch_dtype(torch, arr.dtype)
    if arr.dtype.type.__module__ == "numpy":  # float16/32/64 and bool (float8_e5m2 also claims kind "f")
        tensor = torch.from_numpy(arr.copy())
    else:  # ml_dtypes: move the bits, then reinterpret them
        bits = {1: np.uint8, 2: np.int16}[arr.dtype.itemsize]
        tensor = torch.from_numpy(arr.view(bits).copy()).view(target)
    return tensor.to(device) if device else tensor


def from_torch(tensor) -> np.ndarray:
    import ml_dtypes
    import torch

    tensor = tensor.detach().cpu()
    name = str(tensor.dtype).removeprefix("torch.")
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        bits = torch.int16 if name == "bfloat16" else torch.uint8
        return tensor.view(bits).numpy().view(getattr(ml_dtypes, name))
    return tensor.numpy()


def to_jax(arr: np.ndarray, device: str | None):
    import jax.numpy as jnp

    return jnp.asarray(arr)


def from_jax(array) -> np.ndarray:
    return np.asarray(array)


def context(framework: str):
    """What a framework's call runs inside: for JAX, 64-bit mode (scoped), or float64 would become float32."""
    if framework == "jax":
        import jax

        if hasattr(jax, "enable_x64"):  # JAX >= 0.5: a context manager taking the value
            return jax.enable_x64(True)
        from jax.experimental import enable_x64

        return enable_x64()
    return contextlib.nullcontext()


def converters(framework: str):
    if framework == "torch":
        return to_torch, from_torch
    if framework == "jax":
        return to_jax, from_jax
    raise ValueError(f"unknown framework {framework!r}; known: numpy, torch, jax")
