"""results.json: the table, the settings, the library versions, the machine and its platform key."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ._files import machine, platform_key, versions, write_atomic


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def write_results_json(result, out: Path, comparison=None) -> Path:
    records = [{k: _clean(v) for k, v in row.items()} for row in result.table.to_dict(orient="records")]
    document = {
        "settings": result.settings,
        "versions": versions(),
        "machine": machine(),
        "platform": platform_key(),
        "results": records,
    }
    if comparison is not None:
        document["gate"] = comparison.as_dict()
    return write_atomic(out / "results.json", json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")
