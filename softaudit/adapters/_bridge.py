"""Framework bridges: the audited numpy arrays into a framework's tensors of the same dtype, bit for bit, and back.

bfloat16 and the float8 types go through an integer view of their bits, so nothing is ever rounded on the way.
A dtype a framework cannot hold raises CandidateSkip, which the audit reports as a `skip` row with the reason.
Tensors are placed on the candidate's device: None or "cpu" the CPU (JAX's CPU device too, even where JAX sees a
GPU), "cuda", "cuda:N" or "gpu" a GPU.
"""

from __future__ import annotations

import contextlib
import re

import numpy as np

#: What a candidate's `framework` may be: the arrays it is given (a triton candidate gets torch tensors).
FRAMEWORKS = ("numpy", "torch", "jax", "triton")

INSTALL = {
    "torch": "PyTorch is not installed: pip install 'softaudit[torch]'",
    "jax": "JAX is not installed: pip install 'softaudit[jax]'",
}


class CandidateSkip(Exception):
    """Raised by a candidate that cannot run this dtype, shape or input (`raise softaudit.CandidateSkip("no
    float8")`): the audit reports a `skip` row with the message as its reason, and goes on."""


def parse_device(device: str | None) -> tuple[str, int]:
    """("cpu", 0) or ("cuda", N) for None, "cpu", "cuda", "cuda:N" or "gpu"; ValueError naming those otherwise."""
    found = re.fullmatch(r"(cpu|cuda|gpu)(?::(\d+))?", "cpu" if device is None else device)
    if found is None or (found[1] == "cpu" and found[2]):
        raise ValueError(f"unknown device {device!r}; known: cpu, cuda, cuda:N, gpu")
    return ("cpu" if found[1] == "cpu" else "cuda"), int(found[2] or 0)


def check_device(framework: str, device: str | None) -> None:
    """ValueError, one line, when `framework` cannot place tensors on `device` here (no GPU, or not that one)."""
    kind, index = parse_device(device)
    if kind == "cpu" or framework == "numpy":
        return
    if framework in ("torch", "triton"):
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    else:
        count = len(_jax_gpus())
    if index >= count:
        seen = f"{count} CUDA GPU{'s' if count > 1 else ''}" if count else "no CUDA GPU"
        raise ValueError(f"device {device!r} is not available: {framework} sees {seen}")


def _jax_gpus() -> list:
    import jax

    try:
        return jax.devices("gpu")
    except RuntimeError:  # no GPU backend
        return []


def _torch_dtype(torch, dtype: np.dtype):
    names = {
        "float16": "float16",
        "float32": "float32",
        "float64": "float64",
        "bfloat16": "bfloat16",
        "float8_e4m3fn": "float8_e4m3fn",
        "float8_e5m2": "float8_e5m2",
        "bool": "bool",
        "int64": "int64",  # cross_entropy's targets
    }
    found = getattr(torch, names.get(dtype.name, "-"), None)
    if found is None:
        raise CandidateSkip(f"torch has no {dtype.name}")
    return found


def to_torch(arr: np.ndarray, device: str | None):
    import torch

    arr = np.asarray(arr, order="C")  # (not ascontiguousarray, which makes a 0-d array, a reduced loss's g, 1-d)
    target = _torch_dtype(torch, arr.dtype)
    if arr.dtype.type.__module__ == "numpy":  # float16/32/64, bool and int64 (float8_e5m2 also claims kind "f")
        tensor = torch.from_numpy(arr.copy())
    else:  # ml_dtypes: move the bits, then reinterpret them
        bits = {1: np.uint8, 2: np.int16}[arr.dtype.itemsize]
        tensor = torch.from_numpy(arr.view(bits).copy()).view(target)
    kind, index = parse_device(device)
    return tensor if kind == "cpu" else tensor.to(f"cuda:{index}")


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
    import jax

    kind, index = parse_device(device)
    return jax.device_put(arr, jax.devices("cpu")[0] if kind == "cpu" else _jax_gpus()[index])


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
    if framework in ("torch", "triton"):  # (a Triton kernel takes torch tensors)
        return to_torch, from_torch
    if framework == "jax":
        return to_jax, from_jax
    raise ValueError(f"unknown framework {framework!r}; known: {', '.join(FRAMEWORKS)}")
