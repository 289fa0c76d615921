"""The found input as a person reads it in a terminal: what failed and why, each array's shape and first values in
hex (exact) and decimal (the dtype's shortest), the mask as the positions each row keeps, and where the corpus keeps
the whole input."""

from __future__ import annotations

import math
import re

import numpy as np

#: How much of an array is shown: the first rows, and the first values of each.
ROWS, VALUES = 4, 6


def describe(finding) -> str:
    """A failed finding (softaudit.hunt.Finding) in a few lines: its reason, its input, its corpus file."""
    lines = [f"{finding.candidate} {finding.dtype}: {finding.reason}"]
    for name, a in (finding.inputs or {}).items():
        lines += _array(name, np.asarray(a), _value if np.asarray(a).dtype.kind not in "biu" else str)
    if finding.mask is not None:
        lines += _mask(np.asarray(finding.mask, bool))
    if finding.options:
        lines.append(f"  called with {finding.called_with}")
    lines.append(f"  corpus: {finding.corpus_file}" if finding.corpus_file else "  corpus: not saved")
    return "\n".join(lines)


def _value(v) -> str:
    """One value in hex (exact) and decimal (the dtype's shortest): 0x1.63p+3 (11.09); inf and NaN as words."""
    x = float(v)
    return f"{re.sub(r'[.]?0*p', 'p', x.hex())} ({v!s})" if math.isfinite(x) else str(x)


def _array(name: str, a: np.ndarray, show, note: str = "") -> list[str]:
    """An array's shape and dtype, then its first ROWS rows (of the last axis) with their first VALUES values."""
    rows = a.reshape(-1, a.shape[-1]) if a.ndim else a.reshape(1, 1)
    head = f"  {name} {tuple(a.shape)} {a.dtype}{note}:"
    lines = [head]
    for row in rows[:ROWS]:
        more = f", ... ({len(row) - VALUES} more)" if len(row) > VALUES else ""
        lines.append("    [" + ", ".join(show(v) for v in row[:VALUES]) + more + "]")
    if len(rows) > ROWS:
        lines.append(f"    ... ({len(rows) - ROWS} more rows)")
    return lines


#: How many runs of kept (or masked) positions a mask row lists before "...".
RUNS = 4


def _mask(mask: np.ndarray) -> list[str]:
    """A mask as the positions each row keeps, rows with the same pattern together: a row of 0s with one kept key
    reads "keeps 13 of 0..16", not as its first few 0s."""
    rows = mask.reshape(-1, mask.shape[-1]) if mask.ndim else mask.reshape(1, 1)
    patterns: dict[bytes, list[int]] = {}
    for index, row in enumerate(rows):
        patterns.setdefault(row.tobytes(), []).append(index)
    lines = [f"  mask {tuple(mask.shape)} (True = keep):"]
    for key, where in list(patterns.items())[:ROWS]:
        lines.append(f"    {_which(where, len(rows))}: {_row_mask(np.frombuffer(key, bool))}")
    if len(patterns) > ROWS:
        lines.append(f"    ... ({len(patterns) - ROWS} more row patterns)")
    return lines


def _which(rows: list[int], total: int) -> str:
    """The rows of one pattern: "every row", "row 3", "rows 0, 2, 4" (the first few, then how many more)."""
    if len(rows) == total:
        return "every row" if total > 1 else "row 0"
    head = ", ".join(map(str, rows[:VALUES])) + (f" and {len(rows) - VALUES} more" if len(rows) > VALUES else "")
    return f"row {head}" if len(rows) == 1 else f"rows {head}"


def _row_mask(row: np.ndarray) -> str:
    """One mask row by its runs: the kept ones where they are fewer (or as many), else the masked ones."""
    n = len(row)
    span = f"of 0..{n - 1}"
    if row.all():
        return f"keeps all {n}"
    if not row.any():
        return f"keeps none of {n}"
    kept = int(row.sum())
    if kept <= n - kept:
        return f"keeps {_runs(row)} {span}"
    return f"masks {_runs(~row)} {span}, keeps the other {kept}"


def _runs(row: np.ndarray) -> str:
    """The True positions of a row as runs: "13", "16..39", "0..3, 8..11" (the first RUNS, then how many more)."""
    edges = np.flatnonzero(np.diff(np.concatenate([[False], row, [False]]).astype(np.int8)))
    runs = [f"{a}" if b - a == 1 else f"{a}..{b - 1}" for a, b in zip(edges[::2], edges[1::2])]
    more = f", ... ({len(runs) - RUNS} more runs)" if len(runs) > RUNS else ""
    return ", ".join(runs[:RUNS]) + more
