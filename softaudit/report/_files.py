"""What every report (and baseline) says about where it was made: versions, machine, platform key, accelerator."""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from importlib import metadata

from .. import _platform


def versions() -> dict:
    found = {"python": sys.version.split()[0]}
    for name in ("softaudit", "numpy", "mpmath", "pandas", "ml_dtypes", "hypothesis", "click"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpus": os.cpu_count(),
    }


def platform_key(frameworks: dict | None = None) -> dict:
    """What decides the bits numeric code gives on this machine: the CPU features numpy dispatches its SIMD loops
    to, the BLAS with the kernels it chose for this CPU, the numeric libraries' versions, and the frameworks the
    candidates loaded with the GPU they ran on. Equal keys give equal bits; across keys, SIMD functions and BLAS
    kernels may round otherwise.

    frameworks: a run's `AuditResult.frameworks`, what its candidates' processes had loaded (torch, JAX, SciPy,
    Triton versions and the GPU: softaudit/_platform.py), wherever they ran; None: this process's own."""
    key = {"machine": platform.machine(), "python": sys.version.split()[0]} | _platform.cpu()
    for name in ("numpy", "ml_dtypes"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            key[name] = metadata.version(name)
    return key | (_platform.frameworks() if frameworks is None else frameworks)


def accelerator_line(devices, frameworks: dict) -> str:
    """One line naming the GPU and the libraries that ran on it, or "" where no row ran on one. `devices`: where
    the rows ran (WorstInput.device: None or "cpu" for the CPU); frameworks: the run's (AuditResult.frameworks)."""
    if all(device in (None, "cpu") for device in devices):
        return ""
    key = platform_key(frameworks)  # the accelerator's fields included
    gpu = key.get("gpu") or ", ".join(key.get("jax_devices", []))
    if not gpu:
        return ""
    libraries = ", ".join(f"{name} {key[name]}" for name in ("torch", "triton", "jax", "jaxlib") if name in key)
    cuda = f"CUDA {key['cuda']}, cuDNN {key['cudnn']}; " if "cuda" in key else ""
    return f"Ran on {gpu} ({cuda}{libraries})."
