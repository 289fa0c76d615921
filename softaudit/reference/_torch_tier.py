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


def device_for(device: str | None, scores: int):
    """The torch device to run tier A on, or None for the numpy path.

    "auto": CUDA when torch sees a GPU and the problem has at least AUTO_SCORES scores ($SOFTAUDIT_REFERENCE_DEVICE
    overrides "auto"); "numpy" (or None): always numpy; anything else is a torch device name.
    """
    if device == "auto":
        device = os.environ.get("SOFTAUDIT_REFERENCE_DEVICE", "auto")
    if device is None or device == "numpy":
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
    return tensor.to(device).to(torch.float64)  # moved as it is, widened on the device


def tier_a(q, k, v, keep, scale):
    """Attention of queries q (R, d) over k (Lk, d), v (Lk, dv), float64 tensors, keep (R, Lk) bool or None:
    the outputs and an absolute error bound (inf where the bound's first-order terms exceed 2**-20).

    The bound is _attention.tier_a's with per-row terms in place of per-score ones, so that no (R, Lk) array
    beyond the scores and their exps is made: by Cauchy-Schwarz sum_l |q_l| |k_jl| <= |q| |k_j| <= |q| max_j |k_j|
    (2-norms), which bounds every score's error and size in the row (docs/reference.md, "The torch tier").
    """
    import torch

    d, lk = q.shape[1], k.shape[0]
    gamma_d, gamma_k = _dd.gamma(d), _dd.gamma(lk)
    c, c_rel = (scale, 0.0) if scale is not None else (1 / math.sqrt(d), 2 * U)
    # Norms within (1 + gamma_d + 2u) of the exact ones, so this R bounds sum_l |q_il| |k_jl| for every j.
    size = torch.linalg.vector_norm(q, dim=1) * torch.linalg.vector_norm(k, dim=1).amax()
    size = size * (1 + 4 * gamma_d + 8 * U) * (1 + _SAFE)
    # s = fl(c q) k^T: c's own error, its product with q and the dot product, each against |c| size.
    s = (q * c) @ k.T
    ds = (gamma_d + c_rel + U) * abs(c) * size * (1 + _SAFE)  # per row, for every score (run() rules out underflow)
    bigs = abs(c) * size * (1 + _SAFE)  # |s_j| <= bigs, so |s_j - m| <= 2 bigs
    if keep is not None:
        s.masked_fill_(~keep, -math.inf)
    e = s.sub_(s.amax(dim=1, keepdim=True)).exp_()  # in place: the shifted scores are not needed again
    # Shifting by the computed max is exact in real arithmetic, so each exp's argument is off by ds + u|t| only.
    first = ds + 2 * U * bigs
    eta = first * (1 + _SAFE) + LIBM_EXP_REL  # relative error of every e_j, per row
    total = e.sum(dim=1)
    # Any summation order: every term goes through at most lk - 1 additions, so gamma_lk bounds each sum.
    sigma = (eta * (1 + 2 * gamma_k) + gamma_k + lk * TINY) * (1 + _SAFE)
    v_abs = v.abs()
    both = e @ torch.cat([v, v_abs], dim=1)  # one product for the numerators and their size
    dv = v.shape[1]
    o = both[:, :dv] / total[:, None]
    a = both[:, dv:] * (1 + 2 * gamma_k)
    b = a * eta[:, None] + lk * TINY * v_abs.amax(dim=0)
    err = (a * gamma_k).add_(b).add_(sigma[:, None] * (a + b)).div_(total[:, None]).mul_(1 + _SAFE)
    err.add_(o.abs().mul_(U)).add_(TINY)
    unsure = ~(first <= 2.0**-20) | ~(sigma <= 2.0**-20)  # NaN counts as unsure
    err[unsure] = math.inf
    return o, err


def _pairwise(t):
    """Sum over the last axis in levels of 8 terms, as _dd.pairwise_sum: whatever order torch sums 8 terms in,
    each term goes through at most _dd.depth(n) additions."""
    import torch

    while t.shape[-1] > 1:
        n = t.shape[-1]
        group = min(8, n)
        m = n // group
        total = t[..., : m * group].reshape(t.shape[:-1] + (group, m)).sum(dim=-2)
        t = torch.cat([total, t[..., m * group :]], dim=-1) if n % group else total
    return t[..., 0] if t.shape[-1] else t.new_zeros(t.shape[:-1])


def tier_a_per_score(q, k, v, keep, scale):
    """_attention.tier_a with every product formed and summed pairwise, for the rows the per-row bound left:
    a bound per score, and gamma of the summation depth (28 additions for 4096 keys) in place of gamma_n. Memory
    is (R, Lk, max(d, dv)) per call, so run() gives it few rows at a time."""
    import torch

    d, lk = q.shape[1], k.shape[0]
    gamma_d, gamma_k = _dd.gamma(_dd.depth(d) + 1), _dd.gamma(_dd.depth(lk) + 1)  # + 1: the products' rounding
    products = q[:, None, :] * k[None, :, :]
    scores = _pairwise(products)
    size = _pairwise(products.abs()) * (1 + 2 * gamma_d)  # not in place: with d = 1 the scores are a view
    c, c_rel = (scale, 0.0) if scale is not None else (1 / math.sqrt(d), 2 * U)
    s = c * scores
    ds = (abs(c) * gamma_d * size + s.abs() * (c_rel + U)) * (1 + _SAFE)
    if keep is not None:
        s = s.masked_fill(~keep, -math.inf)
    t = s - s.amax(dim=1, keepdim=True)
    e = torch.exp(t)
    first = ds + U * t.abs()
    eta = first * (1 + _SAFE) + LIBM_EXP_REL
    if keep is not None:
        first, eta = first.masked_fill(~keep, 0.0), eta.masked_fill(~keep, 0.0)
    total = _pairwise(e)
    sigma = (_pairwise(e * eta) / total + _dd.gamma(_dd.depth(lk)) + lk * TINY) * (1 + _SAFE)
    v_abs = v.abs().T  # (dv, Lk): each output column sums over the keys, the last axis
    o = _pairwise(e[:, None, :] * v.T) / total[:, None]
    a = _pairwise(e[:, None, :] * v_abs) * (1 + 2 * gamma_k)
    b = _pairwise((e * eta)[:, None, :] * v_abs) * (1 + 2 * gamma_k) + lk * TINY * v_abs.amax(dim=1)
    err = (gamma_k * a + b + sigma[:, None] * (a + b)) / total[:, None] * (1 + _SAFE) + U * o.abs() + TINY
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


#: Inputs and scales whose nonzero magnitudes lie within [2**-_RANGE, 2**_RANGE]: then no square in a norm and no
#: product in a score under- or overflows, which the per-row bound needs. Every float dtype of at most 32 bits does.
_RANGE = 300


def _in_range(t) -> bool:
    import torch

    mag = t.abs()
    return bool(mag.amax() <= 2.0**_RANGE) and bool(torch.where(mag == 0, math.inf, mag).amin() >= 2.0**-_RANGE)


def run(problem, fmt: Format, device, pending: np.ndarray, out) -> bool:
    """Decide what tier A can of every pending output on `device`, into `out`; `pending` loses what was decided.

    False (nothing done) where the inputs or the scale lie outside the range the bound covers (float64 inputs
    beyond 2**+-300, a scale beyond 2**+-200): numpy's tier A, whose bound is per score, takes them.
    """
    import torch

    nb, lq, _ = problem.q.shape
    lk = problem.k.shape[1]
    if lk == 0:  # no key: every query is undefined
        return True
    scale = problem.scale
    if scale is not None and scale != 0 and not 2.0**-200 <= abs(scale) <= 2.0**200:
        return False
    q, k = (_to_device(a, device) for a in (problem.q, problem.k))
    if problem.q.itemsize > 4 and not (_in_range(q) and _in_range(k)):
        return False
    v = _to_device(problem.v, device)
    dv = v.shape[2]
    rounded = torch.empty((nb, lq, dv), dtype=torch.float32, device=device)  # exact: tier_a_target's formats fit
    ok = torch.empty((nb, lq, dv), dtype=torch.bool, device=device)
    hi = torch.empty((nb, lq, dv), dtype=torch.float64, device=device) if out.detail else None
    err = torch.empty_like(hi) if out.detail else None
    step = max(1, BLOCK // lk)  # query rows per call
    with torch.no_grad():  # queued without a sync until the results come back at the end
        for b in range(nb):
            keep = None if problem.all_kept else torch.from_numpy(np.ascontiguousarray(problem.keep[b])).to(device)
            for start in range(0, lq, step):
                chunk = slice(start, min(start + step, lq))
                o, bound = tier_a(q[b, chunk], k[b], v[b], None if keep is None else keep[chunk], scale)
                value, decided = decide(o, bound, fmt)
                rounded[b, chunk], ok[b, chunk] = value, decided
                if out.detail:
                    hi[b, chunk], err[b, chunk] = o, bound
    decided = ok.cpu().numpy() & pending
    approx = Approx(hi.cpu().numpy(), None, err.cpu().numpy(), 0.0) if out.detail else None
    out.put_block(slice(None), rounded.cpu().numpy(), approx, decided, 1)
    pending &= ~decided
    # What the per-row bound left (about one output in a million for float16): per-score bounds, still on the
    # device, so that tier B on the CPU (a tenth of a second per query row of 4096 keys) gets next to nothing.
    step = max(1, PER_SCORE_BLOCK // (lk * max(q.shape[2], dv)))
    for b, index in _rows_of(pending):
        keep = None if problem.all_kept else torch.from_numpy(problem.keep[b][index]).to(device)
        with torch.no_grad():
            for start in range(0, len(index), step):
                chunk = slice(start, start + step)
                queries = q[b, torch.from_numpy(index[chunk]).to(device)]
                o, bound = tier_a_per_score(queries, k[b], v[b], None if keep is None else keep[chunk], scale)
                value, ok = decide(o, bound, fmt)
                where = (b, index[chunk])
                decided = ok.cpu().numpy() & pending[where]
                approx = Approx(o.cpu().numpy(), None, bound.cpu().numpy(), 0.0) if out.detail else None
                out.put_block(where, value.float().cpu().numpy(), approx, decided, 1)
                pending[where] &= ~decided
    return True


#: Products per call of tier_a_per_score (each float64 temporary then 128 MiB).
PER_SCORE_BLOCK = 1 << 24


def _rows_of(pending: np.ndarray):
    """(batch entry, its query rows with an output still pending) for every batch entry that has one."""
    entries, rows = np.nonzero(pending.any(axis=2))
    for b in np.unique(entries):
        yield int(b), rows[entries == b]
