"""Tier A of attention through torch, for large inputs on a CUDA GPU: the same float64 arithmetic, the same proven
bound and the same rounding test as `_attention.tier_a`, on any torch device.

Only what the bound needs of the arithmetic is assumed, so the device's summation order does not matter: a dot
product or sum of n terms in any order, with or without FMA, is within gamma_n of the exact one (cuBLAS, MKL and
OpenBLAS alike); float64 exp is within 2**-46 relative (CUDA documents 1 ulp, torch's CPU kernels 1 ulp; tests check
this machine's). Elements this tier cannot decide go on to tiers B and C on the CPU, as from the numpy tier A. The
rounded values are therefore the numpy path's bit for bit (a correctly rounded value is unique); `hi` and `err` are
this tier's own, each within its bound of the exact value. The test suite runs this code on torch's CPU device.
"""

from __future__ import annotations

import importlib.util
import math
import os
import warnings

import numpy as np

from . import _dd
from ._dd import TINY, U
from ._formats import Format
from ._rows import LIBM_EXP_REL, Approx

_SAFE = 2.0**-19  # as in _attention: covers every second-order term once each first-order bound is below 2**-20
#: Scores per block of query rows: each float64 temporary is then 256 MiB on the device.
BLOCK = 1 << 25
#: Attention problems with at least this many scores (batch x Lq x Lk) use CUDA when `device="auto"` finds it:
#: below it, the CPU's numpy tier takes well under a second and starting CUDA costs more.
AUTO_SCORES = 1 << 24
DEVICES = ("auto", "numpy")  # besides any torch device name: "cuda", "cuda:1", "cpu" (torch on the CPU)


def device_for(device: str | None, scores: int):
    """The torch device to run tier A on, or None for the numpy path.

    "auto": CUDA when torch sees a GPU and the problem has at least AUTO_SCORES scores ($SOFTAUDIT_REFERENCE_DEVICE
    overrides "auto"); "numpy" (or None): always numpy; anything else is a torch device name.
    """
    if device is None or device == "numpy":
        return None
    if device == "auto":
        device = os.environ.get("SOFTAUDIT_REFERENCE_DEVICE", "auto")
        if device == "numpy":
            return None
        if device == "auto":
            if scores < AUTO_SCORES or importlib.util.find_spec("torch") is None:
                return None
            import torch

            return torch.device("cuda") if torch.cuda.is_available() else None
    if not isinstance(device, str):
        raise TypeError(f"device must be 'auto', 'numpy' or a torch device name, got {device!r}")
    try:
        import torch
    except ImportError:
        raise ValueError(f"device {device!r} needs PyTorch: pip install torch") from None
    try:
        chosen = torch.device(device)
    except RuntimeError:
        raise ValueError(f"unknown device {device!r}: 'auto', 'numpy' or a torch device ('cuda', 'cpu')") from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: torch sees no CUDA GPU here")
    return chosen


def applies(fmt: Format) -> bool:
    """Tier A serves targets of at most 24 bits whose values all fit a float32 (which carries them back)."""
    return fmt.precision <= 24 and fmt.emin >= -149


def _to_device(arr: np.ndarray, device):
    """A float64 tensor on `device` holding arr's values exactly; float16/32/64 and ml_dtypes move as they are."""
    import torch

    arr = np.ascontiguousarray(arr)
    if arr.dtype in (np.float16, np.float32, np.float64):
        with warnings.catch_warnings():  # a read-only array: torch warns, and nothing here writes to it
            warnings.simplefilter("ignore", UserWarning)
            tensor = torch.from_numpy(arr)
    elif arr.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):  # move the bits, reinterpret there
        bits = torch.from_numpy(arr.view(np.int16 if arr.itemsize == 2 else np.uint8))
        tensor = bits.to(device).view(getattr(torch, arr.dtype.name))
    else:  # other ml_dtypes: exact in float32
        tensor = torch.from_numpy(arr.astype(np.float32))
    return tensor.to(device=device, dtype=torch.float64)


def tier_a(q, k, v, keep, scale):
    """_attention.tier_a in torch: q (R, d), k (Lk, d), v (Lk, dv) float64 tensors, keep (R, Lk) bool or None."""
    import torch

    d, lk = q.shape[1], k.shape[0]
    gamma_d, gamma_k = _dd.gamma(d), _dd.gamma(lk)
    size = (q.abs() @ k.abs().T).mul_(1 + 2 * gamma_d)
    c, c_rel = (scale, 0.0) if scale is not None else (1 / math.sqrt(d), 2 * U)
    s = (q @ k.T).mul_(c)
    ds = size.mul_(abs(c) * gamma_d).add_(s.abs().mul_(c_rel + U)).mul_(1 + _SAFE)
    if keep is not None:
        s.masked_fill_(~keep, -math.inf)
    t = s.sub_(s.amax(dim=1, keepdim=True))
    e = torch.exp(t)
    # Shifting by the computed max is exact in real arithmetic, so t is off by ds + u|t| only.
    first = ds.add_(t.abs_().mul_(U))
    if keep is not None:
        first.masked_fill_(~keep, 0.0)
    eta = first * (1 + _SAFE) + LIBM_EXP_REL
    if keep is not None:
        eta.masked_fill_(~keep, 0.0)
    total = e.sum(dim=1)
    # Any summation order: every term goes through at most lk - 1 additions, so gamma_lk bounds each sum.
    weighted = e * eta
    sigma = (weighted.sum(dim=1) / total + gamma_k + lk * TINY) * (1 + _SAFE)
    v_abs = v.abs()
    o = (e @ v).div_(total[:, None])
    a = (e @ v_abs).mul_(1 + 2 * gamma_k)
    b = (weighted @ v_abs).mul_(1 + 2 * gamma_k).add_(lk * TINY * v_abs.amax(dim=0))
    err = (a * gamma_k).add_(b).add_(sigma[:, None] * (a + b)).div_(total[:, None]).mul_(1 + _SAFE)
    err.add_(o.abs().mul_(U)).add_(TINY)
    unsure = ~(first.amax(dim=1) <= 2.0**-20) | ~(sigma <= 2.0**-20)  # NaN counts as unsure
    err[unsure] = math.inf
    return o, err


def decide(h, err, fmt: Format):
    """_formats.decide_arrays for lo = 0 and an unknown sign, in torch: the rounded values and where decided.

    The general route (value in units of fmt's spacing, rounded to an integer); tier A's err is never 0, so the
    exact-zero and signed-zero cases of decide_arrays never arise here.
    """
    import torch

    p = fmt.precision
    mag = h.abs()
    binade = ((h.view(torch.int64) >> 52) & 0x7FF) - 1023
    qe = binade.clamp_min(fmt.emin) - (p - 1)
    factor = ((1023 - qe) << 52).view(torch.float64)  # 2**-qe, a normal float64 for every format tier A serves
    y = mag * factor
    n = torch.round(y)  # half to even, as np.rint
    diff = y - n  # exact
    y_err = err * factor
    # At the bottom of a normal binade the spacing below is half as wide: the boundary there is a quarter away.
    below = 0.5 - 0.25 * ((n == 2.0 ** (p - 1)) & (binade > fmt.emin)).to(torch.float64)
    ok = (err < mag) & (y_err - diff < below) & (diff + y_err < 0.5)
    rounded = n / factor
    rounded = torch.where(rounded > fmt.max_float, math.inf, rounded)
    return torch.copysign(rounded, h), ok


def run(problem, fmt: Format, device, pending: np.ndarray, out) -> None:
    """Decide what tier A can of every pending output on `device`, into `out`; `pending` loses what was decided."""
    import torch

    nb, lq, _ = problem.q.shape
    lk = problem.k.shape[1]
    if lk == 0:  # no key: every query is undefined
        return
    q, k, v = (_to_device(a, device) for a in (problem.q, problem.k, problem.v))
    rows = max(1, BLOCK // max(lk, 1))
    with torch.no_grad():
        for b in range(nb):
            if not pending[b].any():
                continue
            keep = None if problem.all_kept else torch.from_numpy(np.ascontiguousarray(problem.keep[b])).to(device)
            for start in range(0, lq, rows):
                chunk = slice(start, min(start + rows, lq))
                o, err = tier_a(q[b, chunk], k[b], v[b], None if keep is None else keep[chunk], problem.scale)
                rounded, ok = decide(o, err, fmt)
                decided = ok.cpu().numpy() & pending[b, chunk]
                approx = Approx(o.cpu().numpy(), None, err.cpu().numpy(), 0.0) if out.detail else None
                out.put_block((b, chunk), rounded.float().cpu().numpy(), approx, decided, 1)
                pending[b, chunk] &= ~decided
