"""What pass, warn and fail mean, with every threshold in one place (docs/policy.md explains each).

A row fails on a defect someone should fix: an event (NaN, infinity, a mask leak, a wrong fully masked row, a NaN
input that vanished) or an accuracy defect, an error past its element's fail line (docs/policy.md, "The fail
line"; metrics.fail_line, max_line_err): in float32 and float64 factor x u (scale + T), T the proven bound of the
standard algorithms' own roundings, which no standard algorithm crosses; in narrower dtypes the line measured on
the standard algorithms (fail_above), widened by what summing in another standard order adds and never past the
proven one. It warns when it is sound but below best practice in precision: its max ULP error is past best
practice's.
"""

from __future__ import annotations

import dataclasses
import math

from . import kinds
from .metrics import Tally
from .reference import Format
from .reproducibility import RULES, Moved
from .results import failing_verdicts
from .settings import FULLY_MASKED_RULES, REQUIREMENTS, default


@dataclasses.dataclass(frozen=True)
class Reason:
    """One rule a row broke: its verdict, the rule's name, what happened (with numbers)."""

    verdict: str  # "warn" or "fail"
    # nan, overflow, wrong_inf, mask_leak, fully_masked, nan_propagation, underflow, defect, below_best, flushed, sum,
    # nondeterministic, batch_variant
    rule: str
    text: str


@dataclasses.dataclass(frozen=True)
class Policy:
    """The default is the one documented in docs/policy.md; every field can be changed. The fields a user sets
    from the command line or [tool.softaudit] take their defaults from softaudit/settings.py."""

    # fail past factor x the standard algorithms' proven bound (in narrower dtypes, past factor x the worst standard
    # same-dtype algorithm's measured error as well); warn past factor x best practice's
    factor: float = default("factor")
    min_ulp: float = default("min_ulp")  # an ULP error this small never warns (correct rounding reads <= 0.5)
    # the measured line's floor, min(2**(defect_fraction x precision), max_floor) (dtypes narrower than proven_bits)
    defect_fraction: float = default("defect_fraction")
    # the floor's cap: sound float32 and float64 code reads at most 9.8x the conditioning where the floor governs,
    # a wrong constant (log2(e) as 1.4427) 52-58x, under the uncapped 64 (docs/policy.md)
    max_floor: float = 16.0
    fully_masked: str = default("fully_masked")  # what a row with nothing kept must give: zeros, nan, uniform, or any
    fail_on_nan: bool = True  # a NaN where the reference is defined
    # a row of probabilities whose sum is more than 1/2 from 1 (an overflowed or stalled sum): no rounding does that
    fail_on_sum: bool = True
    fail_on_overflow: bool = True  # +-inf where the reference is finite, and not its infinity where it is one
    fail_on_mask_leak: bool = True  # probability on a masked entry; attention that moves with masked values
    fail_on_underflow: bool = False  # 0 where the correctly rounded reference is not 0
    warn_on_flush: bool = True  # subnormal results that came out 0
    nan_propagation: bool = True  # a NaN in a kept entry must give NaN
    #: dtypes of at least this many significand bits (float32, float64) are failed past the proven line alone,
    #: factor x u (scale + T); narrower ones past the line measured on the standard algorithms (fail_above), widened
    #: by what summing in another standard order adds (dT, drawn below budget.REORDER_BITS only) and never past the
    #: proven line (docs/policy.md, "The fail line")
    proven_bits: int = 24
    strict: bool = default("strict")  # a warn fails the run too (exit 1), as a fail does
    # what reproducibility must hold, or the row fails: deterministic, batch-invariant (else a note says what moved)
    require: tuple = tuple(default("require"))

    def __post_init__(self):
        if self.fully_masked not in FULLY_MASKED_RULES:
            raise ValueError(f"fully_masked must be one of {', '.join(FULLY_MASKED_RULES)}, got {self.fully_masked!r}")
        if not 0 < self.factor < math.inf:  # (inf x a comparison's 0 would be NaN: a bound nothing passes)
            raise ValueError(f"factor must be positive and finite, got {self.factor!r}")
        if not 0 <= self.min_ulp < math.inf:
            raise ValueError(f"min_ulp must be non-negative and finite, got {self.min_ulp!r}")
        if not 0 <= self.defect_fraction <= 1:
            raise ValueError(f"defect_fraction must be between 0 and 1, got {self.defect_fraction!r}")
        if not 1 <= self.max_floor <= math.inf:
            raise ValueError(f"max_floor must be at least 1, got {self.max_floor!r}")
        unknown = [r for r in self.require if r not in REQUIREMENTS]
        if isinstance(self.require, str) or unknown:
            raise ValueError(f"require must list some of {', '.join(REQUIREMENTS)}, got {self.require!r}")
        object.__setattr__(self, "require", tuple(self.require))

    def fail_above(self, fmt: Format, plain_cond: float | None, kind: str | None = None) -> float:
        """The measured line: max(factor x the worst standard same-dtype algorithm's max_cond_err, the floor), floor
        = min(2**(fraction x p), max_floor, the kind's own cap where it has one): the fail line in dtypes narrower
        than proven_bits, per element widened by what reordering the sums can add (metrics.fail_line).

        Where they computed nothing (they overflowed, say), only the floor remains. The cap: the measure is in units
        of u, so how many u a sound algorithm costs does not grow with p; 2**(p/4) is 64 in float32 and 9.7e3 in
        float64, far past what sound code reads (at most 9.8 there), and a wrong constant hid under it.
        """
        floor = self.floor(fmt, kind)
        if plain_cond is None or not math.isfinite(plain_cond):
            return floor
        return max(self.factor * plain_cond, floor)

    def line(self, fmt: Format, plain_cond: float | None, kind: str | None = None) -> tuple[float | None, float]:
        """(F, factor), what each element's fail line is drawn from (metrics.fail_line): F the measured line
        (`fail_above`) in dtypes narrower than proven_bits, None (the proven line alone) in the others."""
        proven = fmt.precision >= self.proven_bits and not (kind is not None and kinds.get(kind).measured)
        return (None if proven else self.fail_above(fmt, plain_cond, kind)), self.factor

    def floor(self, fmt: Format, kind: str | None = None) -> float:
        """The fail line where every standard algorithm is nearly exact: min(2**(defect_fraction x p), the cap),
        the cap `max_floor`, or the kind's own where it is lower (`Kind.max_floor`: attention's)."""
        return min(2.0 ** (self.defect_fraction * fmt.precision), self._cap(kind))

    def _cap(self, kind: str | None) -> float:
        own = None if kind is None else kinds.get(kind).max_floor
        return self.max_floor if own is None else min(own, self.max_floor)

    def _defect(self, fmt: Format, kind: str, tally: Tally, plain_cond: float | None, proven: bool) -> str:
        """An accuracy defect in words: against the proven line, or against the measured one (narrow dtypes)."""
        err = tally.max_cond_err
        if proven:
            return (
                f"error {_num(tally.max_bound_err)} x u (scale + T) > {self.factor:g}: past what rounding the inputs "
                f"and a standard {fmt.name} algorithm's intermediates can cost (T, their proven bound); "
                f"{_num(err)} x the conditioning"
            )
        worst = _times(self.factor, "the worst same-dtype algorithm", plain_cond)
        power = self.defect_fraction * fmt.precision
        cap = self._cap(kind)
        name = "max_floor" if cap == self.max_floor else f"{kind}'s floor cap"
        floor = f"2**{power:g}" if 2.0**power <= cap else f"{name} {cap:g}"
        line = self.fail_above(fmt, plain_cond, kind)
        text = f"error {_num(err)} x the conditioning > {_num(line)} = max({worst}, {floor})"
        if tally.max_line_err == tally.max_line_err:
            text += f", {_num(tally.max_line_err)} x the fail line (with what summing in another standard order adds)"
        return text

    def warn_cond_above(self, best_cond: float | None) -> float:
        """The largest max_cond_err as good as best practice: max(factor x best practice's, min_ulp). Both warn
        lines must be crossed: an ULP error far past best practice's that the conditioning explains (an output
        that cancels, a subnormal one) is the problem's, not the algorithm's."""
        if best_cond is None or not math.isfinite(best_cond):
            return self.min_ulp
        return max(self.factor * best_cond, self.min_ulp)

    def warn_above(self, best_ulp: float | None) -> float:
        """The largest max ULP error as good as best practice: max(factor x best practice's, min_ulp)."""
        if best_ulp is None or not math.isfinite(best_ulp):
            return self.min_ulp
        return max(self.factor * best_ulp, self.min_ulp)

    def judge(
        self,
        kind: str,
        fmt: Format,
        tally: Tally,
        plain_cond: float | None,
        best_ulp: float | None,
        *,
        best_cond: float | None = None,
        best_flushed: int | None = None,
        best_zeros: int | None = None,
        moved: Moved | None = None,
    ) -> list[Reason]:
        """The rules the row broke, fails first (an empty list: it passed). best_cond and best_flushed: best
        practice's max_cond_err, subnormal results given as 0 and other zeros where the result is not 0 on the family
        (None: unknown); a warn needs the row to be worse than best practice in the conditioning measure too, or
        more zeros where the result is not 0 than best practice gives (each 100% off: log s rounded to 0 next to
        a dominant entry is within the rounding of s the log kinds' scale holds, and log1p avoids it), and a
        flush warning more flushed results than best practice's (a 0 that best practice gives as well is
        cancellation, not a flush). moved: what moved between runs and batches, which fails what `require` asks."""
        fails, warns = [], []
        kind = kinds.get(kind)
        if self.fail_on_nan and tally.nan:
            fails.append(Reason("fail", "nan", f"{tally.nan} NaN where the exact result is defined"))
        if self.fail_on_overflow and tally.overflow:
            fails.append(Reason("fail", "overflow", f"{tally.overflow} inf where the exact result is finite"))
        if self.fail_on_overflow and tally.wrong_inf:
            fails.append(
                Reason("fail", "wrong_inf", f"{tally.wrong_inf} outputs are not the infinity the exact result is")
            )
        if self.fail_on_mask_leak and tally.mask_leak:
            fails.append(Reason("fail", "mask_leak", f"mask leak: {kind.leak} ({tally.mask_leak} elements)"))
        if self.nan_propagation and tally.nan_not_propagated:
            fails.append(
                Reason("fail", "nan_propagation", f"a NaN input did not give NaN in {tally.nan_not_propagated} rows")
            )
        for name, text in (moved.broken() if moved is not None else {}).items():
            if name in self.require:
                fails.append(Reason("fail", RULES[name], text))
        behaviour = tally.fully_masked_behaviour
        if kind.masked and behaviour and self.fully_masked != "any" and behaviour != self.fully_masked:
            fails.append(
                Reason("fail", "fully_masked", f"fully masked rows give {behaviour}, expected {self.fully_masked}")
            )
        if self.fail_on_underflow and tally.underflow:
            fails.append(
                Reason("fail", "underflow", f"{tally.underflow} zeros where the correctly rounded result is not 0")
            )
        off = tally.sum_err * 2.0 ** (1 - fmt.precision)  # (sum_err is in ulps of 1)
        if self.fail_on_sum and "sum_err" in kind.measures and off > 0.5:
            fails.append(Reason("fail", "sum", f"a row's probabilities sum {_num(off)} away from 1"))
        if tally.elements:
            err, fail_at = tally.max_cond_err, self.fail_above(fmt, plain_cond, kind.name)
            warn_at = self.warn_above(best_ulp)
            zeros = tally.underflow - tally.flushed  # (flushed subnormal results have a rule of their own)
            proven = tally.max_bound_err > self.factor
            line = tally.max_line_err
            measured = self.line(fmt, plain_cond, kind.name)[0] is not None
            if (line > 1) if line == line else (proven or (measured and err > fail_at)):
                fails.append(Reason("fail", "defect", self._defect(fmt, kind.name, tally, plain_cond, proven)))
            elif tally.max_ulp > warn_at and (
                err > self.warn_cond_above(best_cond) or zeros > (math.inf if best_zeros is None else best_zeros)
            ):
                bound = f"max({_times(self.factor, 'best practice', best_ulp)}, {self.min_ulp:g})"
                terms = f" ({_num(tally.max_ulp_vsum)} ulp of sum p|v|)" if "max_ulp_vsum" in kind.measures else ""
                text = f"max error {_num(tally.max_ulp)} ulp{terms} > {_num(warn_at)} = {bound}"
                if best_cond is not None and err > self.warn_cond_above(best_cond):
                    text += f", and {_num(err)} x the conditioning > {_times(self.factor, 'best practice', best_cond)}"
                elif best_cond is not None:
                    text += f", and {zeros} zeros where the result is not 0 (best practice: {best_zeros})"
                warns.append(Reason("warn", "below_best", text))
        if self.warn_on_flush and tally.flushed > (best_flushed or 0):
            warns.append(Reason("warn", "flushed", _flushed(kind, tally)))
        return fails + warns

    def verdict(self, reasons: list[Reason]) -> str:
        """fail if a rule failed, warn if one warned, else pass."""
        return "fail" if any(r.verdict == "fail" for r in reasons) else "warn" if reasons else "pass"

    @property
    def failing(self) -> frozenset:
        """The verdicts that fail a run (exit 1): fail and error, and with strict warn."""
        return failing_verdicts(self.strict)

    def failed(self, verdicts) -> bool:
        """Whether rows with these verdicts fail a run."""
        return any(v in self.failing for v in verdicts)


def _flushed(kind, tally: Tally) -> str:
    """What the zeros where the exact result is subnormal show: a flush only where no subnormal result survived (an
    arithmetic that keeps some subnormals lost the others on the way, to an intermediate). A log kind's subnormal
    result lies below u, where a log of a sum that rounds to 1 gives 0."""
    results = "result" if tally.flushed == 1 else "results"
    text = f"{tally.flushed} subnormal {results} came out 0"
    if tally.subnormal_kept:
        return (
            f"{text} while {tally.subnormal_kept} came out subnormal: lost on the way (an intermediate that "
            "underflowed, or an exp that flushes), not a flush-to-zero mode"
        )
    if "absorbed" in kind.causes:
        return (
            f"{text} and none came out subnormal: below u, where a log of a sum that rounds to 1 gives 0 (or a "
            "flush to zero)"
        )
    return (
        f"{text} and none came out subnormal: a flush to zero (an FTZ/DAZ mode, an exp that flushes), or an "
        "intermediate that underflowed"
    )


def _num(value: float) -> str:
    """A readable number: 3 significant digits, no exponent between 1e-3 and 1e5."""
    if value != value or math.isinf(value):
        return str(value)
    return f"{value:.3g}" if value == 0 or 1e-3 <= abs(value) < 1e5 else f"{value:.2e}"


def _times(factor: float, what: str, value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return f"{what}: nothing compared"
    return f"{factor:g} x {what}'s {_num(value)}"
