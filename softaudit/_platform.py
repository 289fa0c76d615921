"""The platform facts a candidate's own process decides: which numeric frameworks it loaded (their versions) and the
GPU they ran on. Asked where the candidates ran (softaudit/execute/: this process, an isolated worker, a pool's or a
Dask cluster's worker) and carried back with their rows (AuditResult.frameworks), so a run's platform key
(softaudit.report.platform_key) names them though softaudit's own process never imports them.

Nothing is imported or initialised here that was not already: a framework counts once something in the process
imported it, the GPU once its framework started using it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import sys
from pathlib import Path

#: The frameworks whose versions decide a candidate's bits beyond numpy's, recorded where they are loaded.
FRAMEWORKS = ("torch", "jax", "jaxlib", "scipy", "triton", "liger_kernel", "flag_gems")

_versions: dict[str, str | None] = {}  # name -> its installed version, read once per process


def frameworks() -> dict:
    """The FRAMEWORKS in this process's sys.modules, name -> version, and the accelerator they use (`accelerator`).
    Cheap enough to ask after every call (a worker answers it with each)."""
    found = {}
    for name in FRAMEWORKS:
        if name in sys.modules:
            if name not in _versions:
                _versions[name] = _version(name)
            if _versions[name] is not None:
                found[name] = _versions[name]
    return found | accelerator()


@functools.cache
def cpu() -> dict:
    """What this process's numpy computes with on this CPU: the SIMD targets its loops dispatch to ("numpy_simd")
    and the BLAS with the kernel set it picked ("blas"). Both change bits (NPY_DISABLE_CPU_FEATURES and
    OPENBLAS_CORETYPE change them too), so both are in the platform key and in the cache's fingerprint."""
    from numpy._core import _multiarray_umath as umath

    return {"numpy_simd": [f for f in umath.__cpu_dispatch__ if umath.__cpu_features__.get(f)], "blas": _blas()}


def _blas() -> str | None:
    """numpy's BLAS, its version and, for OpenBLAS, the kernel set it picked for this CPU ("Haswell", ...)."""
    import numpy

    try:
        info = numpy.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except Exception:  # (a numpy built without this information)
        return None
    name = f"{info.get('name')} {info.get('version')}"
    folder = Path(numpy.__file__).parent.parent / "numpy.libs"
    for path in glob.glob(str(folder / "*openblas*")):
        library = ctypes.CDLL(path)  # already loaded by numpy: this finds the same copy
        for symbol in ("scipy_openblas_get_corename64_", "openblas_get_corename64_", "openblas_get_corename"):
            corename = getattr(library, symbol, None)
            if corename is not None:
                corename.restype = ctypes.c_char_p
                return f"{name} {corename().decode()}"
    return name


def accelerator() -> dict:
    """The GPU this process's frameworks use: its model, CUDA and cuDNN versions (torch, once it has started CUDA:
    a CPU candidate on a GPU machine starts no CUDA context just to be named), JAX's devices. Empty where none."""
    found = {}
    # (asked after a candidate's call, in its process: a framework that cannot say leaves its facts out, never
    # turns the call into an error)
    torch = sys.modules.get("torch")
    with contextlib.suppress(Exception):
        if torch is not None and torch.cuda.is_initialized():
            found |= {
                "gpu": torch.cuda.get_device_name(),
                "cuda": torch.version.cuda,
                "cudnn": torch.backends.cudnn.version(),
            }
    jax = sys.modules.get("jax")
    with contextlib.suppress(Exception):
        gpus = [] if jax is None else [str(d.device_kind) for d in jax.devices() if d.platform != "cpu"]
        if gpus:
            found["jax_devices"] = gpus
    return found


def _version(name: str) -> str | None:
    from importlib import metadata  # (here: every worker's start would pay for it, and most never ask)

    with contextlib.suppress(metadata.PackageNotFoundError):
        return metadata.version(name)
    return None
