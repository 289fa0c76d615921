"""What pass and fail mean, with every threshold in one place (docs/policy.md explains each)."""

from __future__ import annotations

import dataclasses

from .metrics import Tally

FULLY_MASKED_RULES = ("zeros", "nan", "uniform", "any")
MASKED_KINDS = ("masked_softmax", "attention")


@dataclasses.dataclass(frozen=True)
class Policy:
    """The default is the one documented in docs/policy.md; every field can be changed."""

    factor: float = 2.0  # max ULP error may be at most factor x the comparison implementation's (FlashAttention)
    min_ulp: float = 1.0  # ... and is always allowed this many ULPs
    fully_masked: str = "zeros"  # what a row with nothing kept must give: zeros, nan, uniform, or any
    fail_on_nan: bool = True  # a NaN where the reference is defined
    fail_on_overflow: bool = True  # +-inf where the reference is finite
    fail_on_mask_leak: bool = True  # probability on a masked entry; attention that moves with masked values
    fail_on_underflow: bool = False  # 0 where the correctly rounded reference is not 0
    nan_propagation: bool = True  # a NaN in a kept entry must give NaN

    def __post_init__(self):
        if self.fully_masked not in FULLY_MASKED_RULES:
            raise ValueError(f"fully_masked must be one of {', '.join(FULLY_MASKED_RULES)}, got {self.fully_masked!r}")
        if not self.factor > 0 or not self.min_ulp >= 0:
            raise ValueError("factor must be positive and min_ulp non-negative")

    def threshold(self, comparison_max_ulp: float) -> float:
        """The largest max ULP error that passes, given the comparison implementation's on the same inputs."""
        return max(self.factor * comparison_max_ulp, self.min_ulp)

    def judge(self, kind: str, tally: Tally, comparison_max_ulp: float) -> tuple[str, list[str]]:
        """("pass" or "fail", the reasons for a fail)."""
        reasons = []
        if self.fail_on_nan and tally.nan:
            reasons.append(f"{tally.nan} NaN where the reference is defined")
        if self.fail_on_overflow and tally.overflow:
            reasons.append(f"{tally.overflow} inf where the reference is finite")
        if self.fail_on_underflow and tally.underflow:
            reasons.append(f"{tally.underflow} zeros where the reference is not 0")
        if self.fail_on_mask_leak and tally.mask_leak:
            reasons.append(f"mask leak on {tally.mask_leak} entries")
        if self.nan_propagation and tally.nan_not_propagated:
            reasons.append(f"a NaN input did not give NaN in {tally.nan_not_propagated} rows")
        behaviour = tally.fully_masked_behaviour
        if kind in MASKED_KINDS and behaviour and self.fully_masked != "any" and behaviour != self.fully_masked:
            reasons.append(f"fully masked rows give {behaviour}, expected {self.fully_masked}")
        limit = self.threshold(comparison_max_ulp)
        if tally.max_ulp > limit:
            reasons.append(f"max error {tally.max_ulp:.3g} ulp > {limit:.3g} (max({self.factor:g} x comparison "
                           f"{comparison_max_ulp:.3g}, {self.min_ulp:g}))")
        return ("fail" if reasons else "pass"), reasons
