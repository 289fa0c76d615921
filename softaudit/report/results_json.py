"""results.json: the table, the settings, the library versions, the machine and its platform key."""

from __future__ import annotations

import json
import math

from ._files import machine, platform_key, versions


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def results_json(result, comparison=None) -> str:
    """The document: settings, versions, machine, platform key, the rows (and the gate's comparison)."""
    records = [{k: _clean(v) for k, v in row.items()} for row in result.table.to_dict(orient="records")]
    document = {
        "settings": result.settings,
        "versions": versions(),
        "machine": machine(),
        "platform": platform_key(result.frameworks),
        "results": records,
    }
    if comparison is not None:
        document["gate"] = comparison.as_dict()
    return json.dumps(document, indent=2, sort_keys=True, default=str) + "\n"
