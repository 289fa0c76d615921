"""results.csv (the table as it is) and worst.csv (the worst input of each row, exactly, as hex floats)."""

from __future__ import annotations

import json
from pathlib import Path

from ._files import write_atomic


def write_results_csv(result, out: Path) -> Path:
    return write_atomic(out / "results.csv", result.table.to_csv(index=False))


def write_worst_csv(result, out: Path) -> Path:
    import pandas as pd

    rows = []
    for worst in result.worst.values():
        data = worst.as_json()
        rows.append({**{k: data[k] for k in ("candidate", "kind", "dtype", "family", "case", "seed", "ulp_error", "reference")},
                     "element": json.dumps(data["element"]), "inputs": json.dumps(data["inputs"], separators=(",", ":"))})  # fmt: skip
    columns = ["candidate", "kind", "dtype", "family", "case", "seed", "element", "ulp_error", "reference", "inputs"]
    return write_atomic(out / "worst.csv", pd.DataFrame(rows, columns=columns).to_csv(index=False))
