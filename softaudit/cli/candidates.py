"""`softaudit candidates`: the built-in candidates, a line on each."""

from __future__ import annotations

import click

from ._options import known_kind


@click.command("candidates")
@click.option("--kind", callback=known_kind, help="only the built-ins of this kind")
def list_candidates(kind):
    """List the built-in candidates with a line on each (the FP8 kinds' with --kind: the main job has none)."""
    from .. import kinds
    from ..candidates import apart, builtins

    for candidate in builtins() + (apart() if kind is not None else []):
        if kind is None or candidate.kind == kind:
            its = kinds.get(candidate.kind)
            mark = " (best practice)" if its.best == candidate.name else ""
            mark += " (plain, in the dtype)" if its.plain == candidate.name else ""
            click.echo(f"{candidate.name:34s} {candidate.summary.split('. Weakness')[0]}{mark}")
