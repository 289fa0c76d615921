"""results.csv (the table as it is) and worst.csv (each row's worst input: exact, with how to replay it)."""

from __future__ import annotations

import json
from pathlib import Path

from ._files import write_atomic

WORST_COLUMNS = ("candidate", "target", "kind", "dtype", "family", "output_name", "case", "case_index", "element", "cond_err", "ulp_err",
                 "scale", "output", "reference", "cause", "explanation", "replay", "recipe", "inputs")  # fmt: skip


def write_results_csv(result, out: Path) -> Path:
    return write_atomic(out / "results.csv", result.table.to_csv(index=False))


def worst_rows(result) -> list[dict]:
    """One dict per row's worst input, every float exact (hex), the recipe and inputs as JSON text."""
    rows = []
    for worst in result.worst.values():
        data = worst.as_json()
        rows.append({k: data[k] for k in WORST_COLUMNS if k in data and k not in ("element", "recipe", "inputs")}
                    | {"element": json.dumps(data["element"]), "replay": worst.command(),
                       "recipe": json.dumps(data["recipe"], sort_keys=True),
                       "inputs": "" if data["inputs"] is None else json.dumps(data["inputs"], separators=(",", ":"))})  # fmt: skip
    return rows


def write_worst_csv(result, out: Path) -> Path:
    import pandas as pd

    return write_atomic(out / "worst.csv", pd.DataFrame(worst_rows(result), columns=list(WORST_COLUMNS)).to_csv(index=False))
