"""`softaudit compare OLD NEW`: two results (baselines, results.json or results.csv files) compared as the gate
compares a run with its baseline; exit 1 on a regression, 2 for a file that is none of those."""

from __future__ import annotations

import reprlib
import sys
from pathlib import Path

import click

from .. import settings
from ._messages import ConfigError, reason
from ._options import option


@click.command()
@click.argument("old")
@click.argument("new")
# (compare reads no [tool.softaudit]: its tolerance is the command line's, else the setting's default)
@option("tolerance", "compare", default=settings.default("tolerance"))
def compare(old, new, tolerance):
    """Compare two results: baselines, results.json or results.csv files. Exit 1 on a regression."""
    from .. import gate

    try:
        before, after = _rows_of(old), _rows_of(new)
    except gate.BaselineError as exc:
        raise ConfigError(str(exc)) from None
    comparison = gate.compare(before, after, gate.Tolerance(relative=tolerance))
    for change in comparison.regressions:
        click.echo(f"regression {change.key}: {change.what}")
    for change in comparison.improvements:
        click.echo(f"improvement {change.key}: {change.what}")
    for key in comparison.appeared:
        click.echo(f"new {key}")
    for key in comparison.vanished:
        click.echo(f"gone {key}")
    click.echo(
        f"{len(comparison.regressions)} regression(s), {len(comparison.known)} known failure(s), "
        f"{len(comparison.improvements)} improvement(s)"
    )
    sys.exit(1 if comparison.failed else 0)


def _rows_of(path) -> dict:
    """A baseline, or a results.json or results.csv turned into one; every row checked (gate.BaselineError, one
    line)."""
    import json

    from .. import gate

    if str(path).endswith(".csv"):
        return {"rows": gate.check_rows(_rows_of_results(_csv_records(path), path), path)}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise gate.BaselineError(f"no such file: {path}") from None
    except OSError as exc:
        raise gate.BaselineError(f"{path} cannot be read: {reason(exc)}") from None
    except ValueError as exc:
        reads = "compare reads baselines, results.json and results.csv"
        raise gate.BaselineError(f"{path} is not JSON ({exc}): {reads}") from None
    if isinstance(data, dict) and "results" in data:
        return {"rows": gate.check_rows(_rows_of_results(data["results"], path), path)}
    return gate.read_baseline(path)


def _rows_of_results(results, path) -> dict:
    """The baseline rows of a results.json's results, or one line on the first result that cannot be one."""
    from .. import gate
    from ..results import row_key

    if not isinstance(results, list):
        raise gate.BaselineError(f"{path}: 'results' is not a list")
    rows = {}
    for i, result in enumerate(results):
        if not isinstance(result, dict):
            raise gate.BaselineError(f"{path}: result {i} is not an object")
        missing = [field for field in ("candidate", "dtype", "family", "verdict") if field not in result]
        if missing:
            raise gate.BaselineError(f"{path}: result {i} has no {missing[0]!r}")
        key = row_key(result)
        # results.json writes an infinite measure as "inf" (JSON has no infinity): read back, it is the number
        result = {k: float(v) if k in _MEASURES and v in ("inf", "-inf") else v for k, v in result.items()}
        for field in ("max_ulp", *gate.EVENTS):
            value = result.get(field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise gate.BaselineError(
                    f"{path}: result {i} ({key}) has {field!r} {reprlib.repr(value)}, not a number or null"
                )
        try:
            rows[key] = gate.row_entry(result)
        except (ValueError, OverflowError) as exc:  # an infinite event count
            raise gate.BaselineError(f"{path}: result {i} ({key}): {exc}") from None
    return rows


_MEASURES = ("max_ulp", "max_cond_err")


def _csv_records(path) -> list[dict]:
    """results.csv's rows as records, the empty cells left out (gate.BaselineError, one line, where it is none)."""
    import pandas as pd

    from .. import gate

    try:
        table = pd.read_csv(path)
    except FileNotFoundError:
        raise gate.BaselineError(f"no such file: {path}") from None
    except OSError as exc:
        raise gate.BaselineError(f"{path} cannot be read: {reason(exc)}") from None
    except (ValueError, pd.errors.ParserError) as exc:
        raise gate.BaselineError(f"{path} is not a results CSV: {' '.join(str(exc).split())}") from None
    return [{k: v for k, v in row.items() if v == v} for row in table.to_dict(orient="records")]
