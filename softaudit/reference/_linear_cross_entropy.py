"""linear_cross_entropy's exact values: the loss of logits x W^T + b that are never rounded, and its gradients.

For hidden states x (N, H), a weight W (V, H) and a bias b (V,) or none, the logits L = x W^T + b are computed
exactly as a double-double (hi + lo) by the Ozaki scheme (_ozaki.py: slices whose BLAS products are exact), with a
bound of what the double-double leaves out (0 where it holds L whole, the usual case). The loss is cross-entropy's
of L with every option (_cross_entropy.py): its fast tiers run on hi and widen their bounds by what |L - hi| can
move the result (the loss's gradient has an l1 norm of at most 2 + 2 zl |lse|); tier C reads L exactly (hi + lo, or
an exact integer sum where the double-double does not hold it).

The gradients, for the upstream g (one per row, or a scalar for a mean or sum), with dz = dloss/dL (N, V):
dx = dz W, dW = dz^T x, db = sum_n dz_n (the bias's gradient, the gradient at a zero bias where the case has none).
dz comes from cross-entropy's tier B as double-doubles within proven bounds; each product is an Ozaki product of
those double-doubles with the exact inputs, plus the bound's product with |W| or |x|, and is rounded where that
interval decides it. What stays undecided is summed in mpmath from dz at rising precision (tier C), with exact
zeros certified where classes whose logits are exactly equal sum their weights to zero; past CAP_BITS an interval
that still holds 0 is given +0 (presumed zero). docs/reference.md ("linear_cross_entropy") has the bounds.

(Longer than the house's 400 lines: the exact logits, the loss and the three gradients share the Ozaki products of the
double-doubles and the bound of what the double-double leaves out.)
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
from mpmath import libmp

from . import _cross_entropy as _ce
from . import _dd, _exact, _ozaki, _rows
from ._engine import Result
from ._formats import Format, decide_arrays, exact_mpf, round_fraction

#: Slices per operand at most (each holds beta bits: about 20): inputs spread over more binades in a row keep a
#: bounded remainder, and tier C then sums their logits exactly.
MAX_SLICES = 8
#: Precision past which a gradient entry whose interval still holds 0 is given +0 (presumed zero).
CAP_BITS = 1024
#: The largest input magnitude the exact product takes (the Ozaki slices need sums below 2**900).
MAX_INPUT = 2.0**400
_UP = libmp.round_up


def check(x, weight, bias=None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """x (N, H), weight (V, H) and bias (V,) or None as float64; ValueError in one line otherwise."""
    x, weight = np.asarray(x, dtype=np.float64), np.asarray(weight, dtype=np.float64)
    if x.ndim != 2 or weight.ndim != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"linear_cross_entropy takes x (N, H) and weight (V, H), got {x.shape} and {weight.shape}")
    if bias is not None:
        bias = np.asarray(bias, dtype=np.float64)
        if bias.shape != weight.shape[:1]:
            raise ValueError(f"linear_cross_entropy takes a bias of shape ({weight.shape[0]},), got {bias.shape}")
    for name, a in (("x", x), ("weight", weight), ("bias", bias)):
        if a is not None and (np.abs(np.where(np.isfinite(a), a, 0.0)) > MAX_INPUT).any():
            raise ValueError(f"linear_cross_entropy's reference takes finite inputs below 2**400; {name} has larger")
    return x, weight, bias


@dataclasses.dataclass
class Logits:
    """The exact logits x W^T + b: hi + lo within err (0 where exact), and what tier C needs to form them exactly.
    Entries formed from a non-finite input are NaN (err 0)."""

    hi: np.ndarray
    lo: np.ndarray
    err: np.ndarray
    x: np.ndarray
    weight: np.ndarray
    bias: np.ndarray | None

    def __post_init__(self):
        self._rows: dict = {}
        with np.errstate(invalid="ignore"):
            self.delta = np.where(np.isfinite(self.hi), np.abs(self.lo) + self.err, 0.0).max(axis=1, initial=0.0)

    def row(self, i: int) -> list:
        """Row i's exact logits as libmp values (cached)."""
        if i not in self._rows:
            if not self.err[i].any():
                found = [
                    libmp.mpf_add(exact_mpf(h), exact_mpf(lo), 0) if np.isfinite(h) else exact_mpf(h)
                    for h, lo in zip(self.hi[i], self.lo[i])
                ]
            else:
                found = _integer_row(self.x[i], self.weight, self.bias)
            self._rows = {i: found}  # (one row at a time: tier C works row by row)
        return self._rows[i]


def _integer_row(x: np.ndarray, weight: np.ndarray, bias) -> list:
    """One row's logits exactly from Python integers: every input m 2**e with one common e per operand."""
    mx, ex = _integers(x)
    mw, ew = _integers(weight)
    sums = mw.dot(mx)  # (V,) object: exact
    out = []
    for v, s in enumerate(sums):
        value = libmp.from_man_exp(int(s), ex + ew)
        if bias is not None:
            value = libmp.mpf_add(value, exact_mpf(bias[v]), 0)
        out.append(value)
    return out


def _integers(a: np.ndarray) -> tuple[np.ndarray, int]:
    """(M, e) with a = M 2**e exactly, M an object array of Python ints."""
    finite = np.where(np.isfinite(a), a, 0.0)
    mant, exp = np.frexp(finite)
    scaled = np.ldexp(mant, 53).astype(np.int64)  # exact: 53-bit integers
    shift = exp - 53
    low = int(shift[finite != 0].min(initial=0))
    ints = np.empty(a.shape, dtype=object)
    for index, (m, s) in enumerate(zip(scaled.flat, shift.flat)):
        ints.flat[index] = int(m) << int(s - low) if m else 0
    return ints, low


def logits(x, weight, bias=None) -> Logits:
    """x W^T + b exactly as a double-double within a bound (`Logits`); NaN where a term is not finite (a row of x
    with a NaN or an infinity, or a class whose weights or bias have one: its logits are no numbers)."""
    x, weight, bias = check(x, weight, bias)
    fx = np.where(np.isfinite(x), x, 0.0)
    fw = np.where(np.isfinite(weight), weight, 0.0)
    total = _ozaki.ExactSum((len(x), len(weight)))
    err = _ozaki.product(_ozaki.slice_rows([fx], MAX_SLICES), _ozaki.slice_rows([fw], MAX_SLICES), total)
    if bias is not None:
        total.add(np.broadcast_to(np.where(np.isfinite(bias), bias, 0.0), total.hi.shape))
    hi, lo, lost = total.result()
    err = err + lost
    bad = ~np.isfinite(x).all(axis=1)[:, None] | ~np.isfinite(weight).all(axis=1)[None, :]
    if bias is not None:
        bad = bad | ~np.isfinite(bias)[None, :]
    if bad.any():  # (a logit formed from a NaN or an infinity is no number: NaN, its row undefined)
        hi, lo, err = np.where(bad, np.nan, hi), np.where(bad, 0.0, lo), np.where(bad, 0.0, err)
    return Logits(hi, lo, err, x, weight, bias)


# ---------------------------------------------------------------------------------------------------- the loss


def loss(x, weight, target, dtype, options: _ce.Options, bias=None) -> Result:
    """The correctly rounded loss of the exact logits: one per row (reduction="none") or its mean or sum."""
    found = logits(x, weight, bias)
    return _ce.loss(found.hi, target, dtype, options, exact=found)


# ---------------------------------------------------------------------------------------------- the gradient


def gradient(x, weight, target, g, dtype, options: _ce.Options, bias=None) -> tuple[Result, Result, Result]:
    """(dx, dweight, dbias), each correctly rounded: dz = the loss's gradient in the exact logits (g per row, or a
    scalar g for a mean or sum), dx = dz W, dweight = dz^T x, dbias = sum over the rows of dz. Ignored rows give
    exactly 0 to each; a row that is undefined (a NaN or infinite input in it) makes its dx row, and all of dweight
    and dbias, NaN; a weight or bias that is not finite makes everything NaN."""
    fmt, o = _ce._target(dtype), options
    found = logits(x, weight, bias)
    r = _ce._sort(found.hi, target, o, found)
    n = len(found.hi)
    w = _ce._row_weights(g, r, o)
    undefined = r.undefined | (np.array([wi is None for wi in w], bool) & ~r.ignored)
    if not np.isfinite(found.weight).all() or (bias is not None and not np.isfinite(found.bias).all()):
        undefined[:] = True  # (dx = dz W and dW's rows hold such a weight whatever dz is)
    todo = ~r.ignored & ~undefined
    dz = _Dz(r, w, todo, o)
    # (rows whose dz is exactly 0 give nothing, whatever their x; a non-finite input leaves every row it reaches
    # undefined, and its NaN is written below)
    x64 = np.where(np.isfinite(found.x), found.x, 0.0)
    w64 = np.where(np.isfinite(found.weight), found.weight, 0.0)
    xs = np.where(todo[:, None], x64, 0.0)
    products = (
        ("dx", lambda parts: list(parts), w64.T),
        ("dweight", lambda parts: [p.T for p in parts], xs.T),
        ("dbias", lambda parts: [p.T for p in parts], np.ones((1, n))),
    )
    out = []
    for name, left, right in products:
        h, lo, err = _product(left(dz.parts), right, left([dz.err])[0])
        rounded, ok = decide_arrays(h, lo, err, 0.0, fmt)
        value, tier = rounded.copy(), np.where(ok, 2, 3).astype(np.int8)
        if not ok.all():
            _tier_c(name, dz, x64, w64, xs, ~ok, value, h, lo, err, fmt)
        out.append((name, value, h, lo, err, tier))
    bad_any = bool(undefined.any())
    results = []
    for name, value, h, lo, err, tier in out:
        if name == "dx":
            rows_undefined = undefined
            value[undefined], h[undefined] = np.nan, np.nan
        else:
            rows_undefined = np.full(len(value), bad_any)
            if bad_any:
                value[:], h[:] = np.nan, np.nan
        if name == "dbias":
            value, h, lo, err, tier = (a[:, 0] for a in (value, h, lo, err, tier))
        results.append(Result(value.astype(fmt.dtype), h, lo, err, tier, rows_undefined))
    return tuple(results)


#: Inner dimensions up to this are summed term by term with exact products (two_prod) rather than Ozaki slices:
#: dweight's and dbias's sums over a few rows, whose slices would each cost a pass over V x H outputs.
OUTER_MAX = 64


def _product(parts: list, right: np.ndarray, err: np.ndarray):
    """(hi, lo, bound) of (sum of parts) @ right.T plus the bound err @ |right|.T: Ozaki products, exact but for
    the slices' remainders, which the bound counts; for a short inner dimension, exact products (two_prod, within
    2**-1074 each where one underflows) summed with every rounding error kept."""
    total = _ozaki.ExactSum((parts[0].shape[0], right.shape[0]))
    n = right.shape[1]
    if n <= OUTER_MAX:
        products = np.zeros(total.hi.shape)  # (nonzero products, each of which may underflow)
        for k in range(n):
            column = right[:, k][None, :]
            for part in parts:
                p, e = _dd.two_prod(part[:, k][:, None], column)
                total.add(p)
                total.add(e)
                products += (part[:, k] != 0)[:, None] & (column != 0)
        extra = 4 * _dd.TINY * products
    else:
        extra = _ozaki.product(_ozaki.slice_rows(parts, MAX_SLICES), _ozaki.slice_rows([right], MAX_SLICES), total)
    hi, lo, lost = total.result()
    return hi, lo, extra + lost + _ozaki.spread(err, np.abs(right).T)


class _Dz:
    """dz = dloss/dL (N, V) as double-double parts within err, from cross-entropy's tier B on the exact logits
    (tier C, mpmath, for softcapped rows), and at any precision on request (`at`)."""

    def __init__(self, r, w: list, todo: np.ndarray, o: _ce.Options):
        self.r, self.w, self.todo, self.o = r, w, todo, o
        self._memo: dict = {}
        n, v = r.x.shape
        hi, lo, err = np.zeros((n, v)), np.zeros((n, v)), np.zeros((n, v))
        wh, wl = _ce._weights(w, todo)
        fast = todo & (o.softcap is None)
        for at in _ce._blocks(np.flatnonzero(fast), v):
            h, lw, e, _ = _ce._gradient_approx(_rows.tier_b, r, at, wh[at], wl[at], o)
            hi[at], lo[at], err[at] = h, lw, e
        for i in np.flatnonzero(todo & ~fast):
            hi[i], lo[i], err[i] = _limbs(self.at(int(i), 160), 2)
        self.parts, self.err = [hi, lo], err

    def at(self, i: int, wp: int) -> list:
        """Row i's dz at precision wp: per entry (value, err) as libmp values."""
        if wp not in self._memo:
            self._memo = {wp: {}}  # (the rows at one precision at a time: tier C rises through them)
        if i not in self._memo[wp]:
            got = _ce._row_gradient(self.r, i, self.w[i], self.o, wp)
            exact = [
                (libmp.from_rational(f.numerator, f.denominator, wp + 20), libmp.fzero)
                if not isinstance(f, tuple)
                else f
                for f in got
            ]
            self._memo[wp][i] = exact
        return self._memo[wp][i]


def _limbs(entries: list, count: int) -> tuple:
    """count float64 limbs of each libmp value (their sum within the value's err plus what they leave) and the
    bound: (limb_0, ..., limb_{count-1}, err) as arrays."""
    limbs = [np.zeros(len(entries)) for _ in range(count)]
    err = np.zeros(len(entries))
    for j, (value, e) in enumerate(entries):
        left = value
        for k in range(count):
            limbs[k][j] = libmp.to_float(left)
            left = libmp.mpf_sub(left, libmp.from_float(limbs[k][j]), 0)
        err[j] = libmp.to_float(libmp.mpf_add(e, libmp.mpf_abs(left), 30, _UP), rnd=_UP)
    return (*limbs, err)


def _tier_c(name, dz: _Dz, x, weight, xs, pending, value, h, lo, err, fmt: Format) -> None:
    """Decide the pending entries of one output by summing dz (mpmath, rising precision) with the exact inputs."""
    rows = np.flatnonzero(dz.todo)
    for index in zip(*np.nonzero(pending)):
        if name == "dx" and _dx_zero(dz, x, weight, *index):
            value[index], h[index], lo[index], err[index] = 0.0, 0.0, 0.0, 0.0
            continue
        exact = _rational_entry(name, dz, weight, xs, rows, index)
        if exact is not None:  # (a rational result, which refining would never decide at a midpoint)
            rounded, negative = round_fraction(exact, fmt)
            value[index] = -libmp.to_float(rounded) if negative else libmp.to_float(rounded)
            h[index], lo[index], err[index] = float(exact), float(exact - Fraction(float(exact))), 0.0
            continue
        wp = fmt.precision + 40
        while True:
            if name == "dx" and dz.o.softcap is None:
                total, bound = _dx_by_p(dz, weight, *(int(a) for a in index), wp)
            elif name == "dx":
                n, k = (int(a) for a in index)
                total, bound = _sum([(e, weight[j, k]) for j, e in enumerate(dz.at(n, wp))], wp)
            else:
                j, k = (int(a) for a in index)
                other = xs[:, k] if name == "dweight" else np.ones(len(xs))
                total, bound = _sum([(dz.at(int(i), wp)[j], other[i]) for i in rows], wp)
            tiny = _below(total, bound, fmt)
            found = _exact.decide(total, bound, 0, fmt) if tiny is None else tiny or None
            if found is None and wp >= CAP_BITS and libmp.mpf_cmp(libmp.mpf_abs(total), bound) <= 0:
                found = (libmp.fzero, False)  # presumed zero (module docstring)
            if found is not None:
                rounded, negative = found
                value[index] = -libmp.to_float(rounded) if negative else libmp.to_float(rounded)
                hi, low, e = _ce._parts(total, bound)
                h[index], lo[index], err[index] = hi, low, e
                break
            wp = _exact._refine(wp)


def _rational_entry(name, dz: _Dz, weight, xs, rows, index):
    """The exact value of an output entry as a Fraction where every dz it sums is rational (rows whose kept logits
    are all equal: cross_entropy's rational rows), else None."""
    if name == "dx":
        n, k = (int(a) for a in index)
        terms = [(n, j, weight[j, k]) for j in range(weight.shape[0])]
        needed = [n]
    else:
        j, k = (int(a) for a in index)
        other = xs[:, k] if name == "dweight" else np.ones(len(xs))
        terms = [(int(i), j, other[i]) for i in rows]
        needed = [int(i) for i in rows]
    o = dz.o
    if any(_ce._rational_row(dz.r, i, o) is None or (o.z_loss and _ce._rational_row(dz.r, i, o) != 1) for i in needed):
        return None
    found = {i: _ce._row_gradient(dz.r, i, dz.w[i], o, 64) for i in needed}
    return sum((found[i][j] * Fraction(float(c)) for i, j, c in terms), Fraction(0))


def _below(total, bound, fmt: Format):
    """None where total +- bound reaches half the format's smallest subnormal; else it rounds to a zero: its sign
    where the interval excludes 0, () where that is still unknown (exp's of logits far apart reach 2**-(2**100),
    where the exact subtractions of `decide` would not end)."""
    top = libmp.mpf_add(libmp.mpf_abs(total), bound, 30, _UP)
    if top != libmp.fzero:
        _, _, exp, bc = top
        if exp + bc >= fmt.min_subnormal_exp - 1:
            return None
    if libmp.mpf_cmp(libmp.mpf_abs(total), bound) <= 0:
        return () if top != libmp.fzero else (libmp.fzero, False)
    return libmp.fzero, libmp.mpf_sign(total) < 0


def _dx_by_p(dz: _Dz, weight, n: int, k: int, wp: int) -> tuple:
    """dx_nk without a softcap at precision wp, as w sum_j p_j D_j with D_j = c W_jk - (1 - eps) W_yk - eps
    mean(W_k) (sum_j p_j = 1 and sum_j q_j = 1): no term cancels against 1 - p_y, so a dx far below its terms (a
    class of p = e**-60000 alone moving it) is found at any precision. (value, bound)."""
    r, o = dz.r, dz.o
    w = dz.w[n]
    zs, keep, top, rel, _ = _ce._setting(r, n, o, wp)
    e = _ce._exps(zs, keep, top, wp)
    e[top] = libmp.fone
    total = libmp.mpf_sum(list(e.values()), wp + 10)
    p = {j: libmp.mpf_div(ej, total, wp + 10) for j, ej in e.items()}
    c = libmp.fone
    if o.z_loss:
        lse = libmp.mpf_add(zs[top], libmp.mpf_log(total, wp + 10), wp + 10)
        c = libmp.mpf_add(libmp.fone, libmp.mpf_mul(libmp.from_float(2 * o.z_loss), lse, wp + 10), wp + 10)
    y = int(r.y[n])
    eps = libmp.from_float(o.label_smoothing)
    column = [exact_mpf(weight[j, k]) for j in range(weight.shape[0])]
    base = libmp.mpf_mul(libmp.mpf_sub(libmp.fone, eps, 0), column[y], 0)
    if o.label_smoothing:
        mean = libmp.mpf_div(libmp.mpf_sum(column, 0), libmp.from_int(len(column)), wp + 10)
        base = libmp.mpf_add(base, libmp.mpf_mul(eps, mean, wp + 10), wp + 10)
    terms = []
    for j, pj in p.items():
        d = libmp.mpf_sub(libmp.mpf_mul(c, column[j], wp + 10), base, wp + 10)
        terms.append(libmp.mpf_mul(pj, d, wp + 10))
    wm = libmp.from_rational(w.numerator, w.denominator, wp + 10)
    value = libmp.mpf_mul(wm, libmp.mpf_sum(terms, wp + 10), wp)
    size = libmp.mpf_mul(libmp.mpf_abs(wm), libmp.mpf_sum([libmp.mpf_abs(t) for t in terms], 30, _UP), 30, _UP)
    grow = 8 if not o.z_loss else 8 * (1 + 2 * o.z_loss * (abs(libmp.to_float(zs[top])) + math.log(len(keep)) + 1))
    bound = libmp.mpf_mul(size, libmp.mpf_mul(rel, libmp.from_float(grow), 30, _UP), 30, _UP)
    return value, libmp.mpf_add(bound, libmp.mpf_mul(libmp.mpf_abs(value), libmp.from_man_exp(1, 1 - wp), 30, _UP))


def _sum(terms: list, wp: int) -> tuple:
    """sum of value * c over ((value, err), c) with c an exact float: (the sum at wp, its bound)."""
    values, bounds = [], []
    for (v, e), c in terms:
        if c == 0:
            continue
        cm = exact_mpf(c)
        values.append(libmp.mpf_mul(v, cm, wp + 10))
        bounds.append(libmp.mpf_mul(e, libmp.mpf_abs(cm), 30, _UP))
    total = libmp.mpf_sum(values, wp)
    size = libmp.mpf_sum([libmp.mpf_abs(a) for a in values], 30, _UP)
    rel = libmp.from_man_exp(1, 2 - wp + max(len(values), 1).bit_length())
    bound = libmp.mpf_add(libmp.mpf_sum(bounds, 30, _UP), libmp.mpf_mul(size, rel, 30, _UP), 30, _UP)
    return total, bound


def _dx_zero(dz: _Dz, x, weight, n: int, k: int) -> bool:
    """Whether dx_nk is exactly 0: the classes of row n grouped by exact logit (equal logits have equal p; the
    target apart, and every class under smoothing has the same q), each group's weights W_jk sum to 0 exactly."""
    r = dz.r
    if not dz.todo[n]:
        return True
    exact = r.exact.row(n)
    groups: dict = {}
    y = int(r.y[n])
    for j, value in enumerate(exact):
        key = ("target",) if j == y else (value,)
        groups.setdefault(key, []).append(float(weight[j, k]))
    return all(math.fsum(ws) == 0.0 for ws in groups.values())


__all__ = ["Logits", "check", "gradient", "logits", "loss"]
