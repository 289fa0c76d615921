"""Exact rationals for the exact tiers: gmpy2's mpq where gmpy2 is installed (a dependency), else fractions.Fraction.

The two hold the same values and give the same results (tests/reference/test_rational.py); mpq normalises in C,
Fraction in Python: the gradient references of the default suite in float16 and float64, whose exact tier forms
dense rational sums, are several times faster with mpq (the same bits in every kind x dtype x family reference set
of the gradient kinds).
"""

try:
    from gmpy2 import mpq as Fraction
except ImportError:  # (gmpy2 absent: slower, the same values)
    from fractions import Fraction

__all__ = ["Fraction"]
