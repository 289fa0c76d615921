"""Tiers A and B of attention through torch, for large inputs on a CUDA GPU: the same float64 and double-double
arithmetic, the same proven bounds and the same rounding test as `_attention.tier_a` and `tier_b`, on any torch
device.

Only what the bound needs of the arithmetic is assumed, so the device's summation order does not matter: a dot
product or sum of n terms in any order, with or without FMA, is within gamma_n of the exact one (cuBLAS, MKL and
OpenBLAS alike); float64 exp is within 2**-46 relative (CUDA documents 1 ulp, torch's CPU kernels 1 ulp; tests check
this machine's). Tier B uses IEEE basic operations only. What neither decides goes to tier C (mpmath) on the CPU.
The rounded values are therefore the numpy path's bit for bit (a correctly rounded value is unique); `hi` and `err`
are this tier's own, each within its bound of the exact value. The test suite runs this code on torch's CPU device.

(Longer than the house's 400 lines: tiers A and B on torch follow _attention.tier_a and tier_b function for function, so
that the two paths read side by side, and each bound sits beside the arithmetic it bounds.)
"""

from __future__ import annotations

import importlib.util
import math
import os
import warnings

import numpy as np

from . import _dd
from ._dd import TINY, U
from ._formats import Format, decide_arrays
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
    return o, None, err


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
    # As decide_arrays: where the interval reaches past a power of two that changes the spacing, the exact result's
    # binade (its ulp in the error measures) is unknown, and tier B's hi + lo says it.
    ok &= ~(((y - y_err < 2.0 ** (p - 1)) & (binade > fmt.emin)) | ((y + y_err >= 2.0**p) & (binade >= fmt.emin)))
    rounded = n / factor
    rounded = torch.where(rounded > fmt.max_float, math.inf, rounded)
    return torch.copysign(rounded, h), ok


def _pairwise_dd(h, lo, one_sign=False):
    """_dd.pairwise_sum of a double-double over the last axis (halving per level, the same additions), in torch."""
    import torch

    plus = _dd.add_same_sign if one_sign else _dd.add
    while h.shape[-1] > 1:
        n = h.shape[-1]
        m = n // 2
        s, sl = plus(h[..., :m], lo[..., :m], h[..., m : 2 * m], lo[..., m : 2 * m])
        h, lo = (
            (torch.cat([s, h[..., 2 * m :]], dim=-1), torch.cat([sl, lo[..., 2 * m :]], dim=-1)) if n % 2 else (s, sl)
        )
    if h.shape[-1] == 0:
        return h.new_zeros(h.shape[:-1]), h.new_zeros(h.shape[:-1])
    return h[..., 0], lo[..., 0]


_TABLES: dict = {}


def _exp_dd(th, tl):
    """_dd.exp_dd in torch, step for step: the same IEEE operations on the same table, so the same bits (tested)."""
    import torch

    if th.device not in _TABLES:
        _TABLES[th.device] = tuple(torch.from_numpy(t).to(th.device) for t in _dd._table())
    clamped = ~(th >= _dd.EXP_ARG_MIN)
    th = th.masked_fill(clamped, _dd.EXP_ARG_MIN)
    tl = tl.masked_fill(clamped, 0.0)
    k = torch.round(th * _dd._INV_LN2)  # half to even, as np.rint
    rh, rl = _dd.two_sum(th - k * _dd._LN2_1, -(k * _dd._LN2_2))
    j = torch.round(rh * _dd._STEPS)
    rh, rl = _dd.fast_two_sum(rh - j / _dd._STEPS, rl + (tl - k * _dd._LN2_3))
    square, square_err = _dd.two_square(rh)
    square_err = square_err + 2 * rh * rl
    tail = square * rh * (1 / 6 + rh * (1 / 24 + rh * (1 / 120 + rh / 720)))
    ph, pl = _dd.two_sum(1.0, rh)
    ph, e = _dd.two_sum(ph, 0.5 * square)
    ph, pl = _dd.fast_two_sum(ph, (pl + e) + ((0.5 * square_err + rl) + tail))
    table_h, table_l = _TABLES[th.device]
    index = j.to(torch.int64) + _dd._REACH
    eh, el = _dd.mul(table_h[index], table_l[index], ph, pl)
    k = k.clamp_min(-2044).to(torch.int64)
    half = k >> 1
    scale1, scale2 = ((half + 1023) << 52).view(torch.float64), ((k - half + 1023) << 52).view(torch.float64)
    return eh * scale1 * scale2, el * scale1 * scale2


def tier_b(q, k, v, keep, scale):
    """_attention.tier_b in torch: scores as exact products summed in double-double, exp_dd, numerators in
    double-double, and the same bound. Returns (hi, lo, err). Memory is (R, Lk, max(d, dv)) per call."""
    import torch

    d, lk = q.shape[1], k.shape[0]
    if keep is None:
        keep = torch.ones((q.shape[0], lk), dtype=torch.bool, device=q.device)
    ph, pl = _dd.two_prod(q[:, None, :], k[None, :, :])
    size = _pairwise(ph.abs()) * (1 + 2 * _dd.gamma(d))
    sh, sl = _pairwise_dd(ph, pl)
    s_err = (_dd.depth(d, 2) + 1) * _dd.DD_OP_REL * size + d * 2.0**-1070
    ch, cl, c_rel = _dd.scale_dd(scale, d)
    sh, sl = _dd.mul(sh, sl, torch.full_like(sh, ch), torch.full_like(sh, cl))
    ds = (abs(ch) * s_err + sh.abs() * (c_rel + 2 * _dd.DD_OP_REL)) * (1 + _SAFE)
    kept_h = sh.masked_fill(~keep, -math.inf)
    mh = kept_h.amax(dim=1, keepdim=True)
    ml = torch.where(kept_h == mh, sl, -math.inf).amax(dim=1, keepdim=True)
    th, tl = _dd.add(torch.where(keep, sh, mh), torch.where(keep, sl, ml), -mh, -ml)
    eh, el = _exp_dd(th, tl)
    eh, el = eh.masked_fill(~keep, 0.0), el.masked_fill(~keep, 0.0)
    first = (ds + _dd.DD_OP_REL * th.abs()).masked_fill(~keep, 0.0)
    eta = (first * (1 + _SAFE) + _dd.EXP_DD_REL).masked_fill(~keep, 0.0)
    total_h, total_l = _pairwise_dd(eh, el, one_sign=True)
    depth = _dd.depth(lk, 2) + 1
    sigma = (_pairwise(eh * eta) / total_h + depth * _dd.DD_OP_REL + lk * 2 * TINY) * (1 + _SAFE)
    nh, nl = _dd.two_prod(eh[:, :, None], v[None, :, :])
    nh, nl = _pairwise_dd(nh.transpose(1, 2), (nl + el[:, :, None] * v[None, :, :]).transpose(1, 2))
    oh, ol = _dd.div(nh, nl, total_h[:, None], total_l[:, None])
    v_abs = v.abs()
    a = (eh @ v_abs) * (1 + 2 * _dd.gamma(lk))
    b = ((eh * eta) @ v_abs) * (1 + 2 * _dd.gamma(lk)) + lk * 2 * TINY * v_abs.amax(dim=0)
    err = (depth * _dd.DD_OP_REL * a + b + sigma[:, None] * (a + b)) / total_h[:, None] * (1 + _SAFE)
    err = err + 2 * _dd.DD_OP_REL * oh.abs() + 2 * TINY
    unsure = ~(first.amax(dim=1) <= 2.0**-20) | ~(sigma <= 2.0**-20)  # NaN counts as unsure
    err[unsure] = math.inf
    return oh, ol, err


#: Inputs and scales whose nonzero magnitudes lie within [2**-_RANGE, 2**_RANGE]: then no square in a norm and no
#: product in a score under- or overflows, which the per-row bound needs (and tier B's, below 2**500). Every float
#: dtype of at most 32 bits does.
_RANGE = 300


def _in_range(t) -> bool:
    import torch

    mag = t.abs()
    return bool(mag.amax() <= 2.0**_RANGE) and bool(torch.where(mag == 0, math.inf, mag).amin() >= 2.0**-_RANGE)


#: Target dtypes torch converts to on the device (exactly, as every rounded value is representable); results in
#: other formats come back as float32 and numpy converts them.
_ON_DEVICE = ("float16", "bfloat16", "float32")


def run(problem, fmt: Format, device, pending: np.ndarray, out) -> bool:
    """Decide every pending output that tiers A and B can, on `device`, into `out`; `pending` loses what was decided.
    run is the first tier: on entry `pending` holds every defined output.

    False (nothing done) where the inputs or the scale lie outside the range the bounds cover (float64 inputs
    beyond 2**+-300, a scale beyond 2**+-200): numpy's tiers A and B take them.
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
    kept = torch.from_numpy(~problem.undefined.reshape(nb, lq)).to(device)[:, :, None]
    name = fmt.dtype.name if fmt.dtype.name in _ON_DEVICE else "float32"
    rounded = torch.empty((nb, lq, dv), dtype=getattr(torch, name), device=device)
    ok = torch.empty((nb, lq, dv), dtype=torch.bool, device=device)
    hi = torch.empty((nb, lq, dv), dtype=torch.float64, device=device) if out.detail else None
    err = torch.empty_like(hi) if out.detail else None
    step = max(1, BLOCK // lk)  # query rows per call
    with torch.no_grad():  # queued without a sync until the results come back
        for b in range(nb):
            keep = None if problem.all_kept else torch.from_numpy(np.ascontiguousarray(problem.keep[b])).to(device)
            for start in range(0, lq, step):
                chunk = slice(start, min(start + step, lq))
                o, bound = tier_a(q[b, chunk], k[b], v[b], None if keep is None else keep[chunk], scale)
                rounded[b, chunk], ok[b, chunk] = decide(o, bound, fmt)
                if out.detail:
                    hi[b, chunk], err[b, chunk] = o, bound
        ok &= kept
        left = ~ok & kept  # defined outputs tier A did not decide: about one in a million for float16
        rows = left.any(dim=2)
        approx = Approx(_to_host(hi), None, _to_host(err), 0.0) if out.detail else None
        # Every output at once: the undecided ones get later tiers' values, the undefined ones NaN again below.
        values = _to_host(rounded)
        values = values.view(fmt.dtype) if name == fmt.dtype.name else values.astype(fmt.dtype)
        out.put_all(values, approx, _to_host(ok.to(torch.int8)))
        rows_host = _to_host(rows)
        pending &= rows_host[:, :, None]
        pending[rows_host] &= _to_host(left[rows])
    if problem.undefined.any():
        out.fill(np.broadcast_to(problem.undefined.reshape(nb, lq)[:, :, None], (nb, lq, dv)), np.nan)
    # What tier A's per-row bound left: per-score bounds; then tier B for what they left, all on the device.
    step = max(1, PER_SCORE_BLOCK // (lk * max(q.shape[2], dv)))
    for tier, rows_fn in ((1, tier_a_per_score), (2, tier_b)):
        _rows_pass(problem, (q, k, v), fmt, pending, out, rows_fn, tier, step)
    return True


def _to_host(t) -> np.ndarray:
    """A tensor's values as a numpy array, through pinned memory from a GPU (twice as fast as pageable)."""
    import torch

    if t.device.type != "cuda":
        return t.cpu().numpy() if t.dtype != torch.bfloat16 else t.view(torch.int16).numpy()
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t)
    return (host if t.dtype != torch.bfloat16 else host.view(torch.int16)).numpy()


def _rows_pass(problem, tensors, fmt: Format, pending: np.ndarray, out, rows_fn, tier: int, step: int):
    """Run `rows_fn` (tier_a_per_score or tier_b) on every query row with a pending output, `step` rows per call,
    and decide on the CPU (few rows reach here)."""
    import torch

    q, k, v = tensors
    device = q.device
    for b, index in _rows_of(pending):
        for start in range(0, len(index), step):
            rows = index[start : start + step]
            keep = None if problem.all_kept else torch.from_numpy(problem.keep[b][rows]).to(device)
            with torch.no_grad():
                parts = rows_fn(q[b, torch.from_numpy(rows).to(device)], k[b], v[b], keep, problem.scale)
            hi, lo, err = (None if p is None else p.cpu().numpy() for p in parts)
            with np.errstate(all="ignore"):
                rounded, ok = decide_arrays(hi, lo, err, 0.0, fmt)
            where = (b, rows)
            decided = ok & pending[where]
            out.put_block(where, rounded, Approx(hi, lo, err, 0.0), decided, tier)
            pending[where] &= ~decided


#: Products per call of tier_a_per_score and tier_b (each float64 temporary then 128 MiB).
PER_SCORE_BLOCK = 1 << 24


def _rows_of(pending: np.ndarray):
    """(batch entry, its query rows with an output still pending) for every batch entry that has one."""
    entries, rows = np.nonzero(pending.any(axis=2))
    for b in np.unique(entries):
        yield int(b), rows[entries == b]
