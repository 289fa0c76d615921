"""results.csv (the table as it is) and worst.csv (each row's worst input: exact, with how to replay it)."""

from __future__ import annotations

import json

WORST_COLUMNS = (
    "candidate",
    "target",
    "kind",
    "dtype",
    "family",
    "output_name",
    "case",
    "case_index",
    "element",
    "cond_err",
    "ulp_err",
    "scale",
    "output",
    "reference",
    "cause",
    "explanation",
    "replay",
    "recipe",
    "inputs",
)


def results_csv(result, comparison=None) -> str:
    """The table as it is."""
    return result.table.to_csv(index=False)


def worst_rows(result) -> list[dict]:
    """One dict per row's worst input, every float exact (hex), the recipe and inputs as JSON text."""
    rows = []
    for worst in result.worst_inputs:
        data = worst.as_json()
        rows.append(
            {k: data[k] for k in WORST_COLUMNS if k in data and k not in ("element", "recipe", "inputs")}
            | {
                "element": json.dumps(data["element"]),
                "replay": worst.command(),
                "recipe": json.dumps(data["recipe"], sort_keys=True),
                "inputs": "" if data["inputs"] is None else json.dumps(data["inputs"], separators=(",", ":")),
            }
        )
    return rows


def worst_csv(result, comparison=None) -> str:
    """One row per row's worst input (worst_rows)."""
    import pandas as pd

    return pd.DataFrame(worst_rows(result), columns=list(WORST_COLUMNS)).to_csv(index=False)
