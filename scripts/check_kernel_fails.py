"""Every fail of reports/kernels/ checked outside softaudit: for each, the smallest input that shows it, the exact
value computed here with mpmath (not softaudit's reference), and the kernel's output beside it. A fail with no
check here is an error (exit 1): a new fail must get its independent check and its bug report (docs/kernels.md).

    python scripts/check_kernel_fails.py reports/kernels/results.csv

The kernels run as softaudit runs them (on a CPU, in Triton's interpreter with softaudit's corrections: only the
execution is shared; the exact values and the comparison are this script's own).
"""

from __future__ import annotations

import sys

import mpmath
import numpy as np
import pandas as pd


def _liger_ce(logits, target, grad: bool, **options):
    """Liger's cross-entropy loss (or its gradient, g = 1 per row) on float32 torch tensors, interpreted."""
    import torch

    from softaudit.adapters import _triton
    from softaudit.frameworks import liger

    x = torch.tensor(logits, dtype=torch.float32)
    t = torch.tensor(target)
    with _triton._interpreter(corrected=True):
        if grad:
            return liger.cross_entropy_grad(x, t, torch.ones(len(t)), **options).numpy()
        return liger.cross_entropy(x, t, **options).numpy()


def _exact_ce(row, y, softcap):
    """The loss of one row in mpmath (60 digits): softcap on the finite logits, -inf lanes out of the sum."""
    with mpmath.workdps(60):
        z = [softcap * mpmath.tanh(mpmath.mpf(v) / softcap) for v in row if v != -np.inf]
        lse = mpmath.log(mpmath.fsum(mpmath.exp(v) for v in z))
        return lse - softcap * mpmath.tanh(mpmath.mpf(row[y]) / softcap)


def softcap_on_masked_lanes(kind: str) -> str:
    """Liger's softcap applied to -inf lanes: [0, -inf], target 0, softcap 5. Exact: loss 0, gradient 0 (p = 1);
    the lane at -inf becomes -5 and takes e**-5 / (1 + e**-5) of the probability."""
    logits, target = [[0.0, -np.inf]], [0]
    exact = float(_exact_ce(logits[0], 0, 5.0))
    got = _liger_ce(logits, target, kind == "cross_entropy_grad", softcap=5.0)
    leaked = float(mpmath.log1p(mpmath.exp(-5)))
    if kind == "cross_entropy":
        assert exact == 0.0 and abs(float(got[0]) - leaked) <= 1e-5 * leaked, (exact, got)
        return f"loss of [0, -inf] (softcap 5, target 0): exact {exact:g}, Liger {float(got[0]):.7g} = log1p(e**-5)"
    share = float(mpmath.exp(-5) / (1 + mpmath.exp(-5)))
    assert abs(float(got[0, 0]) + share) <= 1e-5 * share and got[0, 1] == 0, got
    return f"gradient of [0, -inf] (softcap 5, target 0): exact [0, 0], Liger [{got[0, 0]:.7g}, {got[0, 1]:g}]"


#: (kind, family) -> the check of that fail, returning its one-line summary.
CHECKS = {
    ("cross_entropy", "ce_softcap"): lambda: softcap_on_masked_lanes("cross_entropy"),
    ("cross_entropy_grad", "ce_softcap"): lambda: softcap_on_masked_lanes("cross_entropy_grad"),
}


def main(path: str) -> int:
    table = pd.read_csv(path, keep_default_na=False)
    fails = table[table.verdict == "fail"]
    unchecked = 0
    done = {}
    for row in fails.itertuples():
        check = CHECKS.get((row.kind, row.family))
        where = f"{row.candidate} {row.dtype} {row.family}"
        if check is None:
            print(f"UNCHECKED {where}: no independent check (scripts/check_kernel_fails.py)")
            unchecked += 1
            continue
        if (row.kind, row.family) not in done:
            done[row.kind, row.family] = check()
        print(f"checked {where}: {done[row.kind, row.family]}")
    print(f"{len(fails)} fails, {len(fails) - unchecked} checked independently")
    return 1 if unchecked else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "reports/kernels/results.csv"))
