"""Exact rationals for the exact tiers: gmpy2's mpq where gmpy2 is installed (a dependency), else fractions.Fraction.

The two hold the same values and give the same results (tests/reference/test_rational.py); mpq normalises in C,
Fraction in Python: the gradient references of the default suite in float16 and float64, whose exact tier forms
dense rational sums, took 48 s with Fraction and 14 s with mpq on 2 cores (the same bits in all 320 kind x dtype x
family reference sets of the gradient kinds).
"""

try:
    from gmpy2 import mpq as Fraction
except ImportError:  # (gmpy2 absent: slower, the same values)
    from fractions import Fraction

__all__ = ["Fraction"]
