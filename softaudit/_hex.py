"""Arrays as hex floats: exact text, so what is written this way (the hunt's corpus, the worst inputs' JSON) reads back
bit for bit. Below both the cases and the results, which write it."""

from __future__ import annotations

import numpy as np


def hex_rows(values) -> list[list[str]]:
    """An array as rows of hex floats (float.hex): exact, so an input written this way replays bit for bit."""
    a = np.asarray(values)
    return [[float(v).hex() for v in row] for row in a.astype(np.float64).reshape(len(a), -1)]
