"""The found input as a person reads it in a terminal: what failed and why, each array's shape and first values in
hex (exact) and decimal (the dtype's shortest), the mask, and where the corpus keeps the whole input."""

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
        lines += _array(name, np.asarray(a), _value)
    if finding.mask is not None:
        lines += _array("mask", np.asarray(finding.mask), lambda v: "1" if v else "0", note=" (1 = keep)")
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
