"""Invariants that need no reference, checked on the candidate's outputs for transformed inputs.

Each returns the number of output elements (or rows) that break it; `softaudit run` reports them in the
`invariants` column and docs/metrics.md defines each. Sum to 1 and no negative probabilities are the `sum_err`
and `negative` columns; the attention leak probe (masked keys' values moved) is `mask_leak`.
"""

from __future__ import annotations

import numpy as np

from . import kinds


def round_to(values, dtype) -> np.ndarray:
    """`reference.round_to`, imported when first used: the candidates' worker processes import this module (through
    softaudit.execute) and make no probes, and the reference's import (mpmath with it) was a large share of a
    worker's start."""
    from .reference import round_to as rounded

    return rounded(values, dtype)


#: Cases with more output elements than this are not checked: the checks call the candidate three or four times
#: more, and rows of 4096 already carry what long rows show (the max early, late, anywhere).
MAX_ELEMENTS = 1 << 16


def _differ(a, b) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return ~((a == b) | (np.isnan(a) & np.isnan(b)))


def _exact_shift(x: np.ndarray, dtype) -> float | None:
    """A shift c with x + c exact in the dtype for every finite entry, or None.

    The spacing of the dtype at max|x| is a multiple of every entry's spacing, so x + c is usually exact; it is
    checked all the same, in float64 too (finfo.min + 1 is finfo.min there: a row of 3 and finfo.min has no shift).
    """
    finite = np.isfinite(x)
    top = np.abs(np.where(finite, x, 0.0)).max(initial=0.0)
    step = float(np.spacing(np.asarray(top).astype(dtype)).astype(np.float64))
    values = np.where(finite, x, 0.0)
    for c in (1.0, step, 2 * step):
        shifted = values + c
        in_float64 = np.array_equal(shifted - c, values) and np.array_equal(shifted - values, np.full(values.shape, c))
        if in_float64 and np.array_equal(round_to(shifted, dtype).astype(np.float64), shifted):
            return c
    return None


class Probes:
    """One case's transformed inputs, made once and shared by every candidate (kinds with invariants: row kinds).

    shifted: the kept entries plus an exact shift c (None where no small c is exact, or no shift check); permuted:
    the row's entries in a random order (seeded, so every candidate sees the same one); order: the stable sort of
    the kept entries, as flat indices (monotonicity); for the masked values checks, junk: masked entries replaced
    by random values, and alone: up to two rows' kept entries alone.
    """

    @np.errstate(all="ignore")  # -inf - -inf among removed entries: compared, not warned about
    def __init__(self, kind: str, inputs: dict, mask, dtype, seed: int):
        checks = kinds.get(kind).invariants
        rng = np.random.default_rng(seed)
        self.mask, self.dtype, self.checks = mask, dtype, checks
        x = inputs["x"].astype(np.float64)
        kept = np.ones(x.shape, bool) if mask is None else np.broadcast_to(mask, x.shape)
        self.defined = np.isfinite(np.where(kept, x, 0.0)).all(axis=-1) & kept.any(axis=-1)
        c = _exact_shift(np.where(kept, x, 0.0), dtype) if "shift" in checks else None
        self.shifted = None if c is None else round_to(np.where(kept, x + c, x), dtype)
        self.perm = rng.permutation(x.shape[-1])
        self.permuted = round_to(x[..., self.perm], dtype)
        self.permuted_mask = None if mask is None else np.broadcast_to(mask, x.shape)[..., self.perm]
        self.kept = kept
        if "lse_below_max" in checks:
            self.top = np.where(kept, x, -np.inf).max(axis=-1)
        if "monotonic" in checks:
            order = np.argsort(np.where(kept, x, -np.inf), axis=-1, kind="stable")
            # as flat indices: np.take with them is faster than take_along_axis
            rows = np.arange(int(np.prod(x.shape[:-1]))).reshape(x.shape[:-1] + (1,))
            self.order = (order + rows * x.shape[-1]).reshape(-1)
            xs = np.where(kept, x, -np.inf).reshape(-1)[self.order].reshape(x.shape)
            self.rises = (np.diff(xs, axis=-1) > 0) & np.isfinite(xs[..., 1:]) & self.defined[..., None]
        if "masked_values" in checks:
            self.junk = round_to(np.where(kept, x, rng.standard_normal(x.shape) * 8), dtype)
        if "masked_equals_kept" in checks:
            self.alone = [
                (row, round_to(x[row][kept[row]][None, :], dtype)) for row in np.flatnonzero(self.defined)[:2]
            ]

    def calls(self, shape: tuple) -> list[tuple]:
        """The candidate's calls the checks need, (inputs, mask, output shape) each, in the order `check` reads
        their outputs: the execute step makes them (softaudit/execute/), so checking never calls a candidate."""
        found = [] if self.shifted is None else [({"x": self.shifted}, self.mask, shape)]
        found.append(({"x": self.permuted}, self.permuted_mask, shape))
        if "masked_values" in self.checks:
            found.append(({"x": self.junk}, self.mask, shape))
        for _, alone in self.alone if "masked_equals_kept" in self.checks else ():
            found.append(({"x": alone}, np.ones(alone.shape, bool), alone.shape))
        return found


def check(kind: str, probes: Probes, y, outputs: list, max_ulp: float) -> dict[str, int]:
    """Violations per invariant for one case (kinds with invariants only; attention has its leak probe), from the
    candidate's output y and its outputs on the probes' inputs (`Probes.calls`, in that order).

    Reordering a sum moves a result by up to twice the candidate's error, so the permutation and kept-entries
    checks allow 2 max(E, 0.5) + 1 ulps, E the candidate's max ULP error on this case: a larger difference means
    the transformed input exposes an error the original does not.
    """
    if not kinds.get(kind).invariants:
        return {}
    with np.errstate(all="ignore"):  # NaN and inf outputs are compared, not warned about
        return _check(kinds.get(kind), probes, y, iter(outputs), max_ulp)


def _check(kind, p: Probes, y, outputs, max_ulp) -> dict[str, int]:
    dtype, defined = p.dtype, p.defined
    checks = kind.invariants
    y = np.asarray(y).astype(np.float64)
    out: dict[str, int] = {}

    def again():
        return np.asarray(next(outputs)).astype(np.float64)

    tolerance = 2 * max(max_ulp if np.isfinite(max_ulp) else 0.0, 0.5) + 1

    def beyond(a, b):
        return _differ(a, b) & (
            np.abs(a - b) > tolerance * np.abs(np.spacing(np.asarray(b).astype(dtype)).astype(np.float64))
        )

    if p.shifted is not None:
        out["shift"] = int(np.count_nonzero(_differ(again(), y) & defined[..., None]))
    permuted = again()
    expected = y if kind.reduces else np.take(y, p.perm, axis=-1)  # (faster than y[..., p.perm])
    out["permutation"] = int(
        np.count_nonzero(beyond(permuted, expected) & (defined if kind.reduces else defined[..., None]))
    )
    if "lse_below_max" in checks:
        out["lse_below_max"] = int(np.count_nonzero(defined & (y < p.top)))
    if "monotonic" in checks:
        ys = (
            np.where(p.kept, y, -np.inf).reshape(-1)[p.order].reshape(y.shape)
        )  # kept entries only: a leak is mask_leak
        out["monotonic"] = int(np.count_nonzero(p.rises & (np.diff(ys, axis=-1) < 0)))
    if "masked_values" in checks:
        out["masked_values"] = int(np.count_nonzero(_differ(again(), y) & defined[..., None]))
    if "masked_equals_kept" in checks:
        violations = 0
        for row, _ in p.alone:  # the kept entries alone, as a row of their own
            violations += int(beyond(again()[0], y[row][p.kept[row]]).sum())
        out["masked_equals_kept"] = violations
    return out
