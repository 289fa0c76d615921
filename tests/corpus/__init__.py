"""The verdict corpus's implementations (tests/test_verdict_corpus.py): softmax-family functions written the ways
people write them, none of them a softaudit built-in. Each is one small function whose docstring says what it is:
sound (a correct algorithm, in a precision that can hold it), a precision trade-off (a correct algorithm with its
arithmetic in a 16-bit dtype or P rounded before P V), or a defect (a wrong constant, a missing or extra term, a
stalled sum, a leaking mask, a hidden NaN). The expected verdicts live in the test, not here.
"""
