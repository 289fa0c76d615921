"""The platform facts a candidate's own process decides: which numeric frameworks it loaded (their versions) and the
GPU they ran on. Asked where the candidates ran (softaudit/execute/: this process, an isolated worker, a pool's or a
Dask cluster's worker) and carried back with their rows (AuditResult.frameworks), so a run's platform key
(softaudit.report.platform_key) names them though softaudit's own process never imports them.

Nothing is imported or initialised here that was not already: a framework counts once something in the process
imported it, the GPU once its framework started using it.
"""

from __future__ import annotations

import contextlib
import sys
from importlib import metadata

#: The frameworks whose versions decide a candidate's bits beyond numpy's, recorded where they are loaded.
FRAMEWORKS = ("torch", "jax", "jaxlib", "scipy", "triton")

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
    with contextlib.suppress(metadata.PackageNotFoundError):
        return metadata.version(name)
    return None
