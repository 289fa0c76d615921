"""`softaudit cases`: the case families, a line on each."""

from __future__ import annotations

import click

from ._options import known_kind


@click.command("cases")
@click.option("--kind", callback=known_kind, help="only the families of this kind")
def list_cases(kind):
    """List the case families with a line on each."""
    from ..cases import FAMILIES

    for family in FAMILIES.values():
        if kind is None or kind in family.kinds:
            click.echo(f"{family.name:24s} {', '.join(family.kinds):52s} {family.description}")
