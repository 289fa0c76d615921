"""`python -m softaudit ...`: the command line, as the `softaudit` script runs it."""

from .cli import main

main(prog_name="softaudit")
