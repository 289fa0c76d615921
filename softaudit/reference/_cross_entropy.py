"""Cross-entropy's exact values: the loss and its gradient, correctly rounded to the audited dtype.

For a row of logits x (V of them, target y), with z = x, or z = c tanh(x / c) under a softcap c, eps the label
smoothing, zl the z-loss weight, lse = log sum_j e**z_j, d_j = m - z_j >= 0 (m the row's max) and
rest = sum_{j != top} e**(z_j - m):

    loss = sum_j q_j (lse - z_j) + zl lse**2 = (1 - eps) d_y + eps mean(d) + log1p(rest) + zl lse**2
    dz_j = w ((1 + 2 zl lse) p_j - q_j),      q = (1 - eps) onehot(y) + eps / V,      dx_j = dz_j sech(x_j / c)**2

with w the row's weight (its g; g / n under reduction="mean", n the rows not ignored). Every term of the loss is
at least 0, so its bound is relative; 1 - p_y is the sum of the other p_j, which does not cancel. The fast tiers
are the row reference's (reference/_rows.py: log-softmax and softmax of the row as double-doubles with proven
bounds); what they leave undecided, and every softcapped row, goes to mpmath at rising precision (Ziv). The rational
results (a row whose kept logits are all equal, a row with one kept logit) are rounded exactly. docs/reference.md
("cross_entropy") has the bounds.

(Longer than the house's 400 lines: the loss and its gradient share the row tiers' parts, the Ziv loop and the rational
rows, and linear_cross_entropy builds on all of them.)
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
from mpmath import libmp

from . import _dd, _engine, _exact, _rows
from ._engine import Result
from ._formats import Format, decide_arrays, exact_mpf, format_of, round_fraction

REDUCTIONS = ("none", "mean", "sum")
_SECOND_ORDER = 1 + 2.0**-30
_OPS = 16 * _dd.DD_OP_REL  # the double-double operations after a tier: a few adds and multiplies, rounded up


@dataclasses.dataclass(frozen=True)
class Options:
    """The keywords of a cross_entropy call (PyTorch's names; z_loss and softcap as Liger's and Gemma's)."""

    ignore_index: int = -100
    label_smoothing: float = 0.0
    z_loss: float = 0.0
    softcap: float | None = None
    reduction: str = "none"

    def __post_init__(self):
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {self.reduction!r}")
        if not 0.0 <= self.label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1], got {self.label_smoothing!r}")
        if not 0.0 <= self.z_loss < np.inf:
            raise ValueError(f"z_loss must be finite and at least 0, got {self.z_loss!r}")
        if self.softcap is not None and not 0.0 < self.softcap < np.inf:
            raise ValueError(f"softcap must be positive and finite, got {self.softcap!r}")


@dataclasses.dataclass
class _Rows:
    """One case's rows sorted out: which are ignored, undefined, infinite, and each row's weight."""

    x: np.ndarray  # float64 logits (N, V)
    y: np.ndarray  # int64 targets, 0 where ignored
    ignored: np.ndarray
    undefined: np.ndarray
    removed: np.ndarray  # entries that take no part (-inf logits; none under a softcap)
    infinite: np.ndarray  # rows whose loss is +inf (the target's logit, or under smoothing any logit, is -inf)
    #: Logits known only to within a bound (linear_cross_entropy's x W^T, a double-double): None, or an object with
    #: `delta` (per row, a bound of |exact logit - x| over the row) and `row(i)` (row i's exact logits as libmp
    #: values); the fast tiers widen their bounds by what delta moves the result, tier C reads the exact values.
    exact: object = None


def _sort(logits, target, o: Options, exact=None) -> _Rows:
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"cross_entropy takes logits (N, V), got shape {x.shape}")
    t = np.asarray(target)
    if t.shape != x.shape[:1] or t.dtype.kind not in "iu":
        raise ValueError(f"cross_entropy takes integer targets of shape {x.shape[:1]}, got {t.dtype} {t.shape}")
    t = t.astype(np.int64)
    ignored = t == o.ignore_index
    if ((t < 0) | (t >= x.shape[1]))[~ignored].any():
        raise ValueError(f"a target is outside [0, {x.shape[1]}) and is not ignore_index={o.ignore_index}")
    y = np.where(ignored, 0, t)
    # A -inf logit is a lane outside the vocabulary (padding, a masked token): it stays out under a softcap too,
    # which caps the finite logits only (a cap that makes it -c gives it probability: unsloth PR #10616).
    removed = x == -np.inf
    undefined = (np.isnan(x) | (x == np.inf)).any(axis=1) | removed.all(axis=1)
    undefined &= ~ignored
    rows = np.arange(len(x))
    infinite = removed[rows, y] | (removed.any(axis=1) & (o.label_smoothing > 0))
    return _Rows(x, y, ignored, undefined, removed, infinite & ~undefined & ~ignored, exact)


def _tiers(fmt: Format):
    fast_b = (_rows.tier_b_fast, _rows.tier_b)
    return (_rows.tier_a, *fast_b) if _engine.tier_a_target(fmt) else fast_b


def _target(dtype) -> Format:
    fmt = format_of(dtype)
    if not _engine.fast_target(fmt):
        raise ValueError(f"dtype must be a format of at most 53 bits for the cross_entropy reference, not {fmt.name}")
    return fmt


# ---------------------------------------------------------------------------------------------------- the loss


def loss(logits, target, dtype, options: Options, exact=None) -> Result:
    """The correctly rounded loss: one per row (reduction="none": 0 where ignored) or its mean or sum. exact: see
    `_Rows.exact` (the logits then approximate the exact ones)."""
    fmt, o = _target(dtype), options
    r = _sort(logits, target, o, exact)
    todo = ~r.ignored & ~r.undefined & ~r.infinite
    if o.reduction != "none":
        return _reduced_loss(r, fmt, o, todo)
    n = len(r.x)
    value, hi, lo, err = (np.zeros(n) for _ in range(4))
    tier = np.zeros(n, np.int8)
    pending = todo.copy() if o.softcap is None else np.zeros(n, bool)
    for run in _tiers(fmt):
        for at in _blocks(np.flatnonzero(pending), r.x.shape[1]):
            h, lw, e = _loss_approx(run, r, at, o)
            rounded, ok = decide_arrays(h, lw, e, 1.0, fmt)
            at = at[ok]
            value[at], hi[at], lo[at], err[at], tier[at] = rounded[ok], h[ok], lw[ok], e[ok], _tier_index(run)
            pending[at] = False
    for i in np.flatnonzero(todo & (pending | (o.softcap is not None))):
        (rounded, negative), v, e = _ziv(lambda wp, i=i: _row_loss(r, i, o, wp), fmt, 1)
        value[i] = -libmp.to_float(rounded) if negative else libmp.to_float(rounded)
        hi[i], lo[i], err[i] = _parts(v, e)
        tier[i] = 3
    value[r.infinite] = hi[r.infinite] = np.inf
    value[r.undefined] = hi[r.undefined] = np.nan
    return Result(value.astype(fmt.dtype), hi, lo, err, tier, r.undefined)


def _blocks(rows: np.ndarray, width: int):
    """`rows` in blocks of about _engine.BLOCK elements, each an index array."""
    for block in _engine.row_blocks(rows, width):
        yield np.arange(block.start, block.stop) if isinstance(block, slice) else block


def _tier_index(run) -> int:
    return 1 if run is _rows.tier_a else 2


def _loss_approx(run, r: _Rows, rows, o: Options):
    """(hi, lo, err) of the loss of `rows` from a row tier's log-softmax (every term >= 0: relative bounds)."""
    x, removed, y = r.x[rows], r.removed[rows], r.y[rows]
    with np.errstate(all="ignore"):
        a = run(_rows.LOG_SOFTMAX, x, removed)
        at = np.arange(len(rows))
        lo_all = np.zeros_like(a.hi) if a.lo is None else a.lo
        h, lw, e = -a.hi[at, y], -lo_all[at, y], a.err[at, y].copy()
        eps, zl = o.label_smoothing, o.z_loss
        if eps:  # every entry is kept here (a -inf logit made the loss +inf)
            sh, sl = _dd.pairwise_sum(-a.hi, -lo_all, one_sign=True)
            v = float(x.shape[1])
            s_err = (
                _dd.pairwise_sum(a.err)[0] * (1 + _dd.gamma(_dd.depth(x.shape[1])))
                + sh * _dd.depth(x.shape[1], 2) * _dd.DD_OP_REL
            )
            mh, ml = _dd.div(sh, sl, np.full_like(sh, v), np.zeros_like(sh))
            keep_h, keep_l = _dd.two_sum(1.0, -eps)
            ah, al = _dd.mul(h, lw, np.full_like(h, keep_h), np.full_like(h, keep_l))
            bh, bl = _dd.mul_d(mh, ml, eps)
            h, lw = _dd.add_same_sign(ah, al, bh, bl)
            e = (1 - eps) * e + eps * s_err / v
        if zl:
            top = np.where(removed, -np.inf, x).argmax(axis=1)
            lse_h, lse_l = _dd.add(x[at, top], np.zeros(len(rows)), -a.hi[at, top], -lo_all[at, top])
            lse_err = a.err[at, top] + np.abs(lse_h) * _dd.DD_OP_REL
            qh, ql = _dd.mul(lse_h, lse_l, lse_h, lse_l)
            zh, zl_lo = _dd.mul_d(qh, ql, zl)
            e = e + zl * (2 * np.abs(lse_h) * lse_err + lse_err**2)
            h, lw = _dd.add_same_sign(h, lw, zh, zl_lo)
        if r.exact is not None:  # the exact logits are x + lo (within err): the loss's change to first order
            p = np.exp(np.where(removed, -np.inf, a.hi))
            lo, s, delta, off = _shift(r, rows, p)
            m = np.where(removed, -np.inf, x).max(axis=1)
            big = np.abs(m) + np.log(x.shape[1]) + 1 + delta  # |lse| at most
            mean_lo = lo.sum(axis=1) / x.shape[1]
            lse_h = -a.hi[at, y] + x[at, y]  # lse (within its tier's bound: the product below is first order)
            d = s - (1 - eps) * lo[at, y] - eps * mean_lo + 2 * zl * lse_h * s
            # second order: lse's curvature is a variance of lo under p (<= delta**2), zl lse**2's 2 zl (s**2 + lse
            # delta**2); the correction's own roundings; the part err not corrected moves the loss by at most
            # (2 + 2 zl |lse|) err (the gradient's l1 norm)
            extra = delta**2 * (1 + 2 * zl * (big + 2)) + np.abs(d) * 2.0**-48 + 2 * zl * np.abs(s) * e
            extra = extra + off * (2 + 2 * zl * big)
            h, lw = _dd.add(h, lw, d, np.zeros_like(d))
            e = e + extra
        e = (e + np.abs(h) * _OPS) * _SECOND_ORDER
    return h, lw, e


def _reduced_loss(r: _Rows, fmt: Format, o: Options, todo) -> Result:
    """The mean or sum of the rows' losses: each fast tier's rows summed and decided, else every row in mpmath."""
    count = int((~r.ignored).sum())
    undefined = np.array(bool(r.undefined.any()) or (o.reduction == "mean" and count == 0))
    if undefined or r.infinite.any():
        v = np.nan if undefined else np.inf
        return _scalar(v, fmt, v, 0.0, 0.0, 0, undefined)
    if not todo.any():
        return _scalar(0.0, fmt, 0.0, 0.0, 0.0, 0, undefined)
    div = count if o.reduction == "mean" else 1
    rows = np.flatnonzero(todo)
    for run in _tiers(fmt) if o.softcap is None else ():
        parts = [_loss_approx(run, r, at, o) for at in _blocks(rows, r.x.shape[1])]
        h, lw, e = (np.concatenate(a) for a in zip(*parts))
        with np.errstate(all="ignore"):  # (a sum near float64's largest: inf or NaN bounds, which decide nothing)
            sh, sl = _dd.pairwise_sum(h[None, :], lw[None, :], one_sign=True)
            grow = 1 + _dd.gamma(_dd.depth(len(h)))
            total_err = float(_dd.pairwise_sum(e)[0]) * grow + float(sh[0]) * _OPS * len(h)
            mh, ml = _dd.div(sh, sl, np.array([float(div)]), np.zeros(1))
            me = np.array([(total_err / div + abs(float(mh[0])) * _OPS) * _SECOND_ORDER])
        rounded, ok = decide_arrays(mh, ml, me, 1.0, fmt)
        if ok[0]:
            return _scalar(
                float(rounded[0]), fmt, float(mh[0]), float(ml[0]), float(me[0]), _tier_index(run), undefined
            )

    def total(wp):
        found = [_row_loss(r, i, o, wp) for i in rows]
        exact = sum((f for f in found if isinstance(f, Fraction)), Fraction(0))
        approx = [f for f in found if not isinstance(f, Fraction)]
        if not approx:
            return exact / div
        s = libmp.mpf_add(
            libmp.mpf_sum([a[0] for a in approx], wp), libmp.from_rational(exact.numerator, exact.denominator, wp), wp
        )
        e = libmp.mpf_sum([a[1] for a in approx] + [libmp.mpf_mul(libmp.mpf_abs(s), _pow2(2 - wp))], 30, _UP)
        return libmp.mpf_div(s, libmp.from_int(div), wp), libmp.mpf_div(e, libmp.from_int(div), 30, _UP)

    (rounded, negative), v, e = _ziv(total, fmt, 1)
    value = -libmp.to_float(rounded) if negative else libmp.to_float(rounded)
    return _scalar(value, fmt, *_parts(v, e), 3, undefined)


def _scalar(value, fmt, hi, lo, err, tier, undefined) -> Result:
    """A mean or sum as a Result of shape (1,) (the audit's measures take arrays; `cross_entropy` returns it 0-d)."""
    return Result(
        np.array([value], dtype=fmt.dtype),
        np.array([hi], float),
        np.array([lo], float),
        np.array([err], float),
        np.array([tier], np.int8),
        np.array([undefined], bool),
    )


# ---------------------------------------------------------------------------------------------- the gradient


def gradient(logits, target, g, dtype, options: Options) -> Result:
    """The correctly rounded gradient of the loss with respect to the logits, for the upstream gradient g (one per
    row for reduction="none", a scalar otherwise); exactly +0 for ignored rows."""
    fmt, o = _target(dtype), options
    r = _sort(logits, target, o)
    n, v = r.x.shape
    w = _row_weights(g, r, o)
    undefined = r.undefined | (np.array([wi is None for wi in w], bool) & ~r.ignored)
    value, hi, lo, err = (np.zeros((n, v)) for _ in range(4))
    tier = np.zeros((n, v), np.int8)
    todo = ~r.ignored & ~undefined
    pending = np.zeros((n, v), bool)
    if o.softcap is None:
        pending[todo] = True
        wh, wl = _weights(w, todo)
        for run in _tiers(fmt):
            rows = np.flatnonzero(pending.any(axis=1))
            if not len(rows):
                break
            for at in _blocks(rows, v):
                h, lw, e, sign = _gradient_approx(run, r, at, wh[at], wl[at], o)
                rounded, ok = decide_arrays(h, lw, e, sign, fmt)
                ok &= pending[at]
                value[at] = np.where(ok, rounded, value[at])
                hi[at], lo[at], err[at] = np.where(ok, h, hi[at]), np.where(ok, lw, lo[at]), np.where(ok, e, err[at])
                tier[at] = np.where(ok, _tier_index(run), tier[at])
                pending[at] &= ~ok
    else:
        pending[todo] = True
    for i in np.flatnonzero(pending.any(axis=1)):
        cols = np.flatnonzero(pending[i])
        found = _ziv_row(lambda wp, i=i: _row_gradient(r, i, w[i], o, wp), cols, fmt)
        for j, ((rounded, negative), vv, e) in zip(cols, found):
            value[i, j] = -libmp.to_float(rounded) if negative else libmp.to_float(rounded)
            hi[i, j], lo[i, j], err[i, j] = _parts(vv, e)
            tier[i, j] = 3
    value[undefined] = np.nan
    hi[undefined] = np.nan
    return Result(value.astype(fmt.dtype), hi, lo, err, tier, undefined)


def _row_weights(g, r: _Rows, o: Options) -> list:
    """Each row's weight exactly: g per row (reduction="none"), or g over the rows not ignored for a mean; None
    where g is not finite. ValueError in one line for g of the wrong shape."""
    n = len(r.x)
    g = np.asarray(g, dtype=np.float64)
    count = int((~r.ignored).sum())
    if o.reduction == "none":
        if g.shape != (n,):
            raise ValueError(f"reduction='none' takes g of shape ({n},), got {g.shape}")
        return [Fraction(float(gi)) if np.isfinite(gi) else None for gi in g]
    if g.shape != ():
        raise ValueError(f"reduction={o.reduction!r} takes a scalar g, got shape {g.shape}")
    ok = bool(np.isfinite(g))
    return [(Fraction(float(g)) / (count if o.reduction == "mean" else 1)) if ok and count else None] * n


def _weights(w: list, todo) -> tuple[np.ndarray, np.ndarray]:
    """Each row's weight as a double-double (g, or g / n: within 2**-106 relative)."""
    wh, wl = np.zeros(len(w)), np.zeros(len(w))
    for i in np.flatnonzero(todo):
        exact = w[i]
        wh[i] = float(exact)
        wl[i] = float(exact - Fraction(wh[i]))
    return wh, wl


def _gradient_approx(run, r: _Rows, rows, wh, wl, o: Options):
    """(hi, lo, err, sign) of the gradient of `rows` from a row tier's softmax: 1 - p_y is the sum of the others."""
    x, removed, y = r.x[rows], r.removed[rows], r.y[rows]
    at = np.arange(len(rows))
    eps, zl = o.label_smoothing, o.z_loss
    v = x.shape[1]
    with np.errstate(all="ignore"):
        a = run(_rows.SOFTMAX, x, removed)
        ph = np.where(removed, 0.0, a.hi)
        pl = np.zeros_like(ph) if a.lo is None else np.where(removed, 0.0, a.lo)
        pe = np.where(removed, 0.0, a.err)
        p0 = ph.copy() if r.exact is not None else None  # (ph is a's below, changed at y)
        others_h, others_l = ph.copy(), pl.copy()
        others_h[at, y] = others_l[at, y] = 0.0
        om_h, om_l = _dd.pairwise_sum(others_h, others_l, one_sign=True)
        others_e = pe.copy()
        others_e[at, y] = 0.0
        om_e = _dd.pairwise_sum(others_e)[0] * (1 + _dd.gamma(_dd.depth(v))) + om_h * _dd.depth(v, 2) * _dd.DD_OP_REL
        if not eps and not zl:
            ah, al, ae = ph, pl, pe
            ah[at, y], al[at, y], ae[at, y] = -om_h, -om_l, om_e
            sign = np.where(np.arange(v)[None, :] == y[:, None], -1.0, 1.0) * np.sign(wh)[:, None]
        else:
            lse = run(_rows.LOGSUMEXP, x, removed)
            t_h, t_l = _dd.mul_d(lse.hi, np.zeros_like(lse.hi) if lse.lo is None else lse.lo, 2 * zl)  # 2 zl lse
            c_h, c_l = _dd.add_d(t_h, t_l, 1.0)
            c_e = 2 * zl * lse.err
            q_h, q_l = _dd.div(np.full(1, eps), np.zeros(1), np.full(1, float(v)), np.zeros(1))
            ah, al = _dd.mul(ph, pl, c_h[:, None], c_l[:, None])
            ah, al = _dd.add(ah, al, -q_h, -q_l)
            ae = np.abs(c_h)[:, None] * pe + ph * c_e[:, None] + abs(float(q_h[0])) * _OPS
            # at y: -(1 - p_y) + 2 zl lse p_y + eps (V - 1) / V
            k_h, k_l = _dd.div(np.full(1, eps * (v - 1)), np.zeros(1), np.full(1, float(v)), np.zeros(1))
            yh, yl = _dd.mul(ph[at, y], pl[at, y], t_h, t_l)
            yh, yl = _dd.add(yh, yl, -om_h, -om_l)
            yh, yl = _dd.add(yh, yl, np.full_like(yh, k_h[0]), np.full_like(yh, k_l[0]))
            ah[at, y], al[at, y] = yh, yl
            ae[at, y] = om_e + np.abs(t_h) * pe[at, y] + ph[at, y] * c_e + (abs(float(k_h[0])) + 1) * _OPS
            sign = 0.0
        if r.exact is not None:  # the exact logits are x + lo (within err): a's change to first order
            lo, s, delta, off = _shift(r, rows, p0)
            lse_h = run(_rows.LOGSUMEXP, x, removed).hi if zl else np.zeros(len(rows))
            c = (1 + 2 * zl * lse_h)[:, None]
            d = c * p0 * (lo - s[:, None]) + 2 * zl * s[:, None] * p0
            ah, al = _dd.add(ah, al, d, np.zeros_like(d))
            # second order: p_j's curvature along lo is p_j ((lo_j - s)**2 - var) <= 5 delta**2 p_j, c's 2 zl
            # delta**2, their product's cross term 8 zl delta**2 p_j; the correction's roundings; err's part
            # uncorrected (`_perturbed`)
            d2 = (delta**2 * (1 + 4 * delta))[:, None]
            ae = ae + p0 * d2 * (3 * np.abs(c) + 10 * zl) + np.abs(d) * 2.0**-48
            ae = ae + _perturbed(off, p0, om_h, at, y, zl, x, removed)
        h, lw = _dd.mul(ah, al, wh[:, None], wl[:, None])
        e = (np.abs(wh)[:, None] * (ae + np.abs(ah) * _OPS) + np.abs(h) * _OPS) * _SECOND_ORDER + 4 * _dd.TINY
        e[h == 0] = np.where((ae[h == 0] == 0), 0.0, e[h == 0])  # an exact zero (w = 0, or p = 0) stays exact
    return h, lw, e, sign


def _shift(r: _Rows, rows, p):
    """For exact logits x + lo within err (`_Rows.exact`): lo on `rows` (0 where removed), s = sum_k p_k lo_k (the
    first-order change of lse), each row's bound delta of |lo| + err and its largest err (what is not corrected)."""
    lo = np.where(r.removed[rows], 0.0, r.exact.lo[rows])
    return lo, (p * lo).sum(axis=1), r.exact.delta[rows], r.exact.err[rows].max(axis=1, initial=0.0)


def _perturbed(delta, p, others, at, y, zl, x, removed):
    """What logits off by at most delta (per row) move a = (1 + 2 zl lse) p - q by: every p_j and 1 - p_y by a
    factor within e**(+-2 delta) (rho), lse by delta; so |da_j| <= (|c| + 1) p_j rho + 2 zl delta p_j (1 + rho),
    and at y (1 - p_y + |c - 1| p_y) rho + 2 zl delta p_y (1 + rho), c = 1 + 2 zl lse."""
    rho = (np.expm1(2 * delta) * (1 + 2.0**-40))[:, None]
    m = np.where(removed, -np.inf, x).max(axis=1)
    lse = (np.abs(m) + np.log(x.shape[1]) + 1 + delta)[:, None]  # |lse| at most
    c = 1 + 2 * zl * lse
    out = (c + 1) * p * rho + 2 * zl * delta[:, None] * p * (1 + rho)
    out[at, y] = (others + (c[:, 0] - 1) * p[at, y]) * rho[:, 0] + 2 * zl * delta * p[at, y] * (1 + rho[:, 0])
    return out


# -------------------------------------------------------------------------------------------- tier C (mpmath)

_UP = libmp.round_up


def _pow2(e: int) -> tuple:
    return libmp.from_man_exp(1, e)


def _parts(value: tuple, err: tuple) -> tuple[float, float, float]:
    hi = libmp.to_float(value)
    lo = libmp.to_float(libmp.mpf_sub(value, libmp.from_float(hi), 60)) if np.isfinite(hi) else 0.0
    return hi, lo, libmp.to_float(err, rnd=_UP)


def _ziv(compute, fmt: Format, sign: int):
    """(rounding, value, err) of what compute(wp) -> (value, err) approximates, at rising precision; compute may
    return a Fraction when the result is rational (rounded exactly)."""
    wp = fmt.precision + 40
    while True:
        got = compute(wp)
        if isinstance(got, Fraction):
            approx = libmp.from_rational(got.numerator, got.denominator, 200)
            return round_fraction(got, fmt), approx, libmp.fzero
        found = _exact.decide(*got, sign, fmt)
        if found is not None:
            return (found, *got)
        wp = _exact._refine(wp)


def _ziv_row(compute, cols, fmt: Format) -> list:
    """Like _ziv for several entries of one row: compute(wp) -> per entry (value, err), or a Fraction each."""
    done: dict[int, tuple] = {}
    wp = fmt.precision + 40
    while True:
        got = compute(wp)
        for j in cols:
            if j in done:
                continue
            if isinstance(got[j], Fraction):
                f = got[j]
                done[j] = round_fraction(f, fmt), libmp.from_rational(f.numerator, f.denominator, 200), libmp.fzero
                continue
            found = _exact.decide(*got[j], 0, fmt)
            if found is not None:
                done[j] = (found, *got[j])
        if len(done) == len(cols):
            return [done[j] for j in cols]
        wp = _exact._refine(wp)


def _setting(r: _Rows, i: int, o: Options, wp: int):
    """Row i at precision wp: z (libmp), their max's index, the unit of relative error of what follows, and for a
    softcap the sech(x / c)**2 factors."""
    xs = _exact_row(r, i)
    keep = [j for j in range(len(xs)) if not r.removed[i, j]]
    if o.softcap is None:
        zs, factors, unit = xs, None, 0
    else:  # (the removed entries' z and factor are never read)
        cap = exact_mpf(o.softcap)
        scaled = [libmp.mpf_div(x, cap, wp + 10) if j in keep else libmp.fzero for j, x in enumerate(xs)]
        zs = [libmp.mpf_mul(cap, libmp.mpf_tanh(s, wp + 10), wp + 10) for s in scaled]
        factors = [_sech2(s, wp + 10) for s in scaled]
        unit = 2 * o.softcap
    top = max(keep, key=lambda j: (libmp.to_float(zs[j]), -j))
    for j in keep:
        if libmp.mpf_cmp(zs[j], zs[top]) > 0:
            top = j
    rel = _pow2(8 - wp + (len(keep) + 8).bit_length())
    rel = libmp.mpf_mul(rel, libmp.from_float(1 + unit), 30, _UP)
    return zs, keep, top, rel, factors


def _sech2(s: tuple, wp: int) -> tuple:
    cosh, _ = libmp.mpf_cosh_sinh(s, wp)
    return libmp.mpf_div(libmp.fone, libmp.mpf_mul(cosh, cosh, wp), wp)


def _exps(zs, keep, top, wp):
    return {j: libmp.mpf_exp(libmp.mpf_sub(zs[j], zs[top], wp + 10), wp + 10) for j in keep if j != top}


def _exact_row(r: _Rows, i: int) -> list:
    """Row i's exact logits as libmp values."""
    return r.exact.row(i) if r.exact is not None else [exact_mpf(v) for v in r.x[i]]


def _logit(r: _Rows, i: int, j: int) -> Fraction:
    """Logit (i, j) exactly, as a Fraction."""
    return Fraction(float(r.x[i, j])) if r.exact is None else _exact._fraction(r.exact.row(i)[j])


def _rational_row(r: _Rows, i: int, o: Options):
    """k, the kept count, when the row's kept logits are all equal and there is no softcap (p = 1/k), else None."""
    if o.softcap is not None:
        return None
    if r.exact is not None:
        kept = [v for v, gone in zip(r.exact.row(i), r.removed[i]) if not gone]
        return len(kept) if all(libmp.mpf_eq(v, kept[0]) for v in kept) else None
    kept = r.x[i][~r.removed[i]]
    return len(kept) if (kept == kept[0]).all() else None


def _row_loss(r: _Rows, i: int, o: Options, wp: int):
    """Row i's loss at precision wp: (value, err), or a Fraction where it is rational (one kept logit)."""
    eps, zl = o.label_smoothing, o.z_loss
    k = _rational_row(r, i, o)
    if k == 1:  # loss = (1 - eps) d_y + eps mean(d) + zl m**2, d_y = 0 (the target is the only kept logit)
        m = _logit(r, i, int(r.y[i]))
        mean_d = sum((m - _logit(r, i, j) for j in range(r.x.shape[1])), Fraction(0)) / r.x.shape[1]
        return Fraction(eps) * mean_d + Fraction(zl) * m * m
    if o.softcap is not None and (~r.removed[i]).sum() == 1 and (zl == 0 or _logit(r, i, int(r.y[i])) == 0):
        return Fraction(0)  # one kept logit, the target's: d = 0 and log1p(0) = 0
    zs, keep, top, rel, _ = _setting(r, i, o, wp)
    rest = libmp.mpf_sum(list(_exps(zs, keep, top, wp).values()), wp + 10)
    # 1 + rest rounded at wp + 10 (its exact sum can need 2**1000 bits and more: a rest of e**-1.7e308, found by the
    # hunt), within 2**-(wp + 10) relative, which moves the log by as much: far inside rel
    l1p = libmp.mpf_log(libmp.mpf_add(libmp.fone, rest, wp + 10), wp + 10)
    d = [libmp.mpf_sub(zs[top], zs[j], 0 if o.softcap is None else wp + 10) for j in keep]
    d_y = d[keep.index(int(r.y[i]))]
    one_minus = libmp.mpf_sub(libmp.fone, libmp.from_float(eps), 0)  # exact, as is (1 - eps) d_y
    parts = [libmp.mpf_mul(d_y, one_minus, 0 if o.softcap is None else wp + 10), l1p]
    if eps:
        mean = libmp.mpf_div(libmp.mpf_sum(d, 0), libmp.from_int(len(d)), wp + 10)  # every entry kept here
        parts.append(libmp.mpf_mul(mean, libmp.from_float(eps), wp + 10))
    lse = libmp.mpf_add(zs[top], l1p, wp + 10)
    if zl:
        parts.append(libmp.mpf_mul(libmp.from_float(zl), libmp.mpf_mul(lse, lse, wp + 10), wp + 10))
    value = libmp.mpf_sum(parts, wp)
    scale = libmp.mpf_add(libmp.mpf_abs(value), libmp.fone, 30, _UP)
    if zl:  # lse's absolute error moves zl lse**2 by about 2 zl |lse| times it
        grow = libmp.from_float(1 + 2 * zl * (abs(libmp.to_float(lse)) + 1))
        scale = libmp.mpf_mul(scale, grow, 30, _UP)
    return value, libmp.mpf_mul(scale, rel, 30, _UP)


def _row_gradient(r: _Rows, i: int, w: Fraction, o: Options, wp: int) -> list:
    """Row i's gradient at precision wp: per entry (value, err), or a Fraction where it is rational."""
    eps, zl = o.label_smoothing, o.z_loss
    v, y = r.x.shape[1], int(r.y[i])
    q_other = Fraction(eps) / v
    q_y = 1 - Fraction(eps) + q_other
    k = _rational_row(r, i, o)
    if k is not None and (zl == 0 or k == 1):
        c = 1 + 2 * Fraction(zl) * _logit(r, i, y) if k == 1 else Fraction(1)
        share = c / k
        return [w * ((0 if r.removed[i, j] else share) - (q_y if j == y else q_other)) for j in range(v)]
    if w == 0:
        return [Fraction(0)] * v
    zs, keep, top, rel, factors = _setting(r, i, o, wp)
    p = _exps(zs, keep, top, wp)
    p[top] = libmp.fone
    total = libmp.mpf_sum(list(p.values()), wp + 10)
    others = libmp.mpf_sum([e for j, e in p.items() if j != y], wp + 10)
    lse = libmp.mpf_add(zs[top], libmp.mpf_log(total, wp + 10), wp + 10)
    two_zl_lse = libmp.mpf_mul(libmp.from_float(2 * zl), lse, wp + 10)
    c = libmp.mpf_add(libmp.fone, two_zl_lse, wp + 10)
    wm = libmp.from_rational(w.numerator, w.denominator, wp + 10)
    eps_mp = libmp.from_rational(Fraction(eps).numerator, Fraction(eps).denominator, wp + 10)
    qo = libmp.mpf_div(eps_mp, libmp.from_int(v), wp + 10)
    out = []
    for j in range(v):
        pj = libmp.mpf_div(p.get(j, libmp.fzero), total, wp + 10)
        if j == y:  # -(1 - p_y) + 2 zl lse p_y + eps (V - 1) / V, with 1 - p_y the others' share
            terms = [
                libmp.mpf_neg(libmp.mpf_div(others, total, wp + 10)),
                libmp.mpf_mul(two_zl_lse, pj, wp + 10),
                libmp.mpf_sub(eps_mp, qo, wp + 10),
            ]
        else:
            terms = [libmp.mpf_mul(c, pj, wp + 10), libmp.mpf_neg(qo)]
        size = libmp.mpf_sum([libmp.mpf_abs(t) for t in terms], 30, _UP)
        a = libmp.mpf_sum(terms, wp + 10)
        value = libmp.mpf_mul(wm, a, wp + 10)
        err = libmp.mpf_mul(libmp.mpf_mul(libmp.mpf_abs(wm), size, 30, _UP), rel, 30, _UP)
        if zl:
            grow = libmp.from_float(1 + 2 * zl * (abs(libmp.to_float(lse)) + 1))
            err = libmp.mpf_mul(err, grow, 30, _UP)
        if factors is not None:
            value = libmp.mpf_mul(value, factors[j], wp + 10)
            err = libmp.mpf_mul(err, factors[j], 30, _UP)
        out.append((value, libmp.mpf_add(err, libmp.mpf_mul(libmp.mpf_abs(value), _pow2(-wp), 30, _UP), 30, _UP)))
    return out
