"""Framework ops as users call them: `softaudit run softaudit.frameworks.torch` (or .jax, .scipy).

Each module is a target of marked candidates; importing one without its framework raises ImportError with the
install hint, which `softaudit run` prints as one line.
"""
