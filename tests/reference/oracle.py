"""An independent oracle for the reference tests: plain mpmath formulas and a rounding written another way.

Nothing here imports softaudit. Rounding uses mpmath.frexp and mpmath.nint (ties to even) instead of the integer
bit manipulation the package uses, so a shared mistake is unlikely.
"""

import math

import ml_dtypes
import mpmath
import numpy as np


def info(dtype):
    dt = np.dtype(dtype)
    return ml_dtypes.finfo(dt)


def round_to(value, dtype) -> float:
    """The mpf `value` rounded to nearest-even in `dtype`, as a float64 (inf or NaN on overflow as the dtype does)."""
    fi = info(dtype)
    p, emin = int(fi.nmant) + 1, int(fi.minexp)
    if mpmath.isnan(value):
        return math.nan
    if mpmath.isinf(value):
        return float(value)
    if value == 0:
        return 0.0
    _, exp = mpmath.frexp(value)  # value = f 2**exp with 0.5 <= |f| < 1
    qe = max(exp - 1, emin) - (p - 1)
    n = mpmath.nint(mpmath.ldexp(value, -qe))
    rounded = mpmath.ldexp(n, qe)
    if abs(rounded) > mpmath.mpf(float(fi.max)):
        overflow = float(np.array([np.inf]).astype(dtype).astype(np.float64)[0])
        return math.copysign(overflow, float(value)) if not math.isnan(overflow) else math.nan
    return float(rounded) if rounded != 0 else math.copysign(0.0, float(value))


def precision_for(dtype) -> int:
    """Twice the target's precision, plus guard bits."""
    return 2 * (int(info(dtype).nmant) + 1) + 20


def _row_values(row, keep):
    return [mpmath.mpf(float(v)) for v, k in zip(row, keep) if k and not (math.isinf(float(v)) and float(v) < 0)]


def row_kind(kind, row, keep, prec):
    """softmax, log_softmax or logsumexp of one row at `prec` bits (NaN for an undefined softmax row)."""
    row = np.asarray(row).astype(np.float64)
    keep = np.ones(len(row), bool) if keep is None else np.asarray(keep)
    kept_values = row[keep]
    if np.isnan(kept_values).any() or (kind != "logsumexp" and (kept_values == np.inf).any()):
        return [mpmath.nan] * len(row) if kind != "logsumexp" else mpmath.nan
    if kind == "logsumexp" and (kept_values == np.inf).any():
        return mpmath.inf
    xs = _row_values(row, keep)
    if not xs:
        return [mpmath.nan] * len(row) if kind != "logsumexp" else -mpmath.inf
    with mpmath.workprec(prec):
        m = max(xs)
        total = mpmath.fsum(mpmath.exp(mpmath.fsub(x, m, exact=True)) for x in xs)
        if kind == "logsumexp":
            return m + mpmath.log(total)
        out = []
        for v, k in zip(row, keep):
            if not k or v == -np.inf:
                out.append(mpmath.mpf(0) if kind == "softmax" else -mpmath.inf)
                continue
            t = mpmath.fsub(mpmath.mpf(float(v)), m, exact=True)
            out.append(mpmath.exp(t) / total if kind == "softmax" else t - mpmath.log(total))
        return out


def attention_row(q, ks, vs, keep, scale, prec):
    """One query's attention output (a list over value columns) at `prec` bits."""
    with mpmath.workprec(prec):
        d = len(q)
        c = mpmath.mpf(1) / mpmath.sqrt(d) if scale is None else mpmath.mpf(scale)
        scores = [
            c * mpmath.fsum(mpmath.mpf(float(a)) * mpmath.mpf(float(b)) for a, b in zip(q, k))
            for k, kk in zip(ks, keep)
            if kk
        ]
        values = [v for v, kk in zip(vs, keep) if kk]
        m = max(scores)
        weights = [mpmath.exp(s - m) for s in scores]
        total = mpmath.fsum(weights)
        return [mpmath.fsum(w * mpmath.mpf(float(v[c_])) for w, v in zip(weights, values)) / total for c_ in range(len(vs[0]))]


def rounded_rows(kind, x, dtype, mask=None):
    """The oracle's rounding of `kind` along the last axis of a 2-D x, as a float64 array."""
    prec = precision_for(dtype)
    out = []
    for i, row in enumerate(x):
        keep = None if mask is None else mask[i]
        values = row_kind(kind, row, keep, prec)
        out.append(round_to(values, dtype) if kind == "logsumexp" else [round_to(v, dtype) for v in values])
    return np.array(out, dtype=np.float64)
