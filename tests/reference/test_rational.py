"""The exact tiers give the same results with gmpy2's mpq as with fractions.Fraction (reference/_rational.py): the
two are representations of the same rationals, and the faster one must not change a bit. The Fraction side runs in
a process where gmpy2 cannot be imported (so mpmath computes in Python too), on inputs that reach the exact tier."""

from __future__ import annotations

import fractions
import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from softaudit.reference import _rational

pytestmark = pytest.mark.skipif(_rational.Fraction is fractions.Fraction, reason="gmpy2 is not installed")

#: Prints one digest per input: every field of its reference Result. Run as is (mpq) or with gmpy2 blocked.
SCRIPT = """
import hashlib, sys
if sys.argv[1] == "fraction":
    sys.modules["gmpy2"] = None  # (import gmpy2 raises ImportError: _rational and mpmath fall back)
import numpy as np
from softaudit.cases import FAMILIES
from softaudit.reference import _rational, evaluate, evaluate_grad, format_of
import mpmath.libmp

assert (_rational.Fraction.__name__, mpmath.libmp.BACKEND) == (
    ("Fraction", "python") if sys.argv[1] == "fraction" else ("mpq", "gmpy")
)
fmt = format_of("float64")
results = []
for family in ("subnormal", "ties"):
    case = FAMILIES[family].cases("softmax_grad", fmt, "quick", 0)[0]
    for kind in ("softmax_grad", "log_softmax_grad", "logsumexp_grad"):
        g = case.arrays["g"] if kind != "logsumexp_grad" else case.arrays["g"][:, 0]
        results.append(evaluate_grad(kind, case.arrays["x"], g, dtype=np.float64))
x = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, -np.inf], [2.0, 2.0, 2.0 - 2**-40]])
results += [evaluate("softmax", x, dtype=np.float32), evaluate("log_softmax", x, dtype=np.float64)]
for r in results:
    digest = hashlib.sha256()
    for a in (r.value, r.hi, r.lo, r.err, r.tier, r.undefined):
        digest.update(np.ascontiguousarray(a).tobytes())
    print(int((r.tier == 3).sum()), digest.hexdigest())
"""


def _digests(side: str) -> list[str]:
    root = Path(__file__).resolve().parents[2]
    found = subprocess.run(
        [sys.executable, "-c", SCRIPT, side], capture_output=True, text=True, cwd=root, check=False, timeout=600
    )
    assert found.returncode == 0, found.stderr
    return found.stdout.split("\n")


def test_the_exact_tiers_give_the_same_bits_with_mpq_and_with_fraction():
    fast, slow = _digests("mpq"), _digests("fraction")
    assert fast == slow
    exact = [int(line.split()[0]) for line in fast if line]
    assert len(exact) == 8 and sum(exact) > 100, "too few elements reached the exact tier to compare"


def test_mpq_and_fraction_are_the_same_rationals():
    a, b = _rational.Fraction(3, 12), fractions.Fraction(3, 12)
    assert (a.numerator, a.denominator) == (b.numerator, b.denominator) == (1, 4)
    assert hash(a) == hash(b) and a == b
    digest = hashlib.sha256(str(_rational.Fraction(2) ** -3).encode()).hexdigest()
    assert digest == hashlib.sha256(b"1/8").hexdigest()
    assert np.float64(_rational.Fraction(1, 3)) == 1 / 3
