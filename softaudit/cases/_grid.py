"""The mask x score-regime x length grid of attention and masked softmax, run as a pairwise covering design.

Tiled kernels (FlashAttention's online softmax) break where the factors meet: a fully masked first tile of keys
under an unguarded running max, scores so far below 0 that every exp underflows, a tail of keys past the last whole
tile. A list of hand-picked cases misses most meetings; the full grid (18 masks x 6 regimes x 8 lengths, 864 cases)
costs too much for the default suite. A covering design in which every pair of levels of two factors appears at
least once costs 144 cells (the 18 x 8 mask-length pairs, the floor for any pairwise design) and still meets every
bug that needs only two factors to coincide. docs/audit.md ("The grid families") says the design.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..reference import format_of
from ._case import family

#: Mask patterns over (queries, keys), True = kept; "lead_B" masks a whole first tile of B keys followed by the
#: length's kept keys, "trail_B" keeps the length's keys and masks through the end of the next whole B tile.
MASKS = (
    "none",
    "causal_top_left",
    "causal_bottom_right",
    "left_padding",
    "right_padding",
    *(f"lead_{b}" for b in (16, 32, 64, 128)),
    *(f"trail_{b}" for b in (16, 32, 64, 128)),
    "single_first",
    "single_last",
    "single_tile_edge",
    "sliding_window",
    "random",
)
#: Score regimes. below_float16 and below_float32 put every score past log of the dtype's smallest normal, exactly
#: emin ln 2 (float16: -14 ln 2 = -9.704; bfloat16 and float32 share emin -126: -126 ln 2 = -87.337), by a margin
#: of 16 standard deviations of the scores' spread, so every exp(score) is subnormal or 0 in that dtype.
REGIMES = ("small", "large", "below_float16", "below_float32", "wide", "ties")
#: Key lengths at the edges of tiles of 16, 32, 64 and 128 keys (and a single key).
LENGTHS = (1, 15, 16, 17, 33, 64, 65, 129)
LQ = 8  # queries per case: != every length, so the causal masks' two alignments differ
D = 16  # head dimension: sqrt(d) = 4 exactly, so a score of the bias column is exact
WINDOW = 20  # the sliding window's width: not a whole tile


def log_smallest_normal(dtype: str) -> float:
    """log(2**emin), the log of the dtype's smallest normal number: emin ln 2."""
    return format_of(dtype).emin * math.log(2)


def pairwise(levels: tuple[int, ...]) -> list[tuple[int, ...]]:
    """A deterministic greedy covering design: rows of level indices in which every pair of levels of any two
    factors appears at least once. Each row starts from the first uncovered pair (the pairs of the two largest
    factors first: they set the floor) and fills the other factors with the level covering most uncovered pairs
    (on a tie, the level used least so far, then the lowest)."""
    n = len(levels)
    order = sorted(itertools.combinations(range(n), 2), key=lambda p: -levels[p[0]] * levels[p[1]])
    uncovered = {(f, a, g, b) for f, g in order for a in range(levels[f]) for b in range(levels[g])}
    rows, used = [], [[0] * k for k in levels]
    while uncovered:
        f, a, g, b = min(uncovered, key=lambda t: (order.index((t[0], t[2])), t[1], t[3]))
        row = {f: a, g: b}
        for h in range(n):
            if h in row:
                continue
            gain = [sum(_pair(h, c, o, row[o]) in uncovered for o in row) for c in range(levels[h])]
            row[h] = max(range(levels[h]), key=lambda c: (gain[c], -used[h][c]))
        for h, c in row.items():
            used[h][c] += 1
        row = tuple(row[h] for h in range(n))
        uncovered -= {(f, row[f], g, row[g]) for f, g in itertools.combinations(range(n), 2)}
        rows.append(row)
    return rows


def _pair(f: int, a: int, g: int, b: int) -> tuple[int, int, int, int]:
    """The pair (factor f at level a, factor g at level b) in the order the design keeps it (f < g)."""
    return (f, a, g, b) if f < g else (g, b, f, a)


DESIGN = [(MASKS[m], REGIMES[r], LENGTHS[n]) for m, r, n in pairwise((len(MASKS), len(REGIMES), len(LENGTHS)))]


def mask(pattern: str, lq: int, length: int, rng) -> np.ndarray | None:
    """The (lq, lk) mask of the pattern for the given length (lk may exceed it: lead and trail add a masked tile)."""
    if pattern == "none":
        return None
    lk = _lk(pattern, length)
    i, j = np.arange(lq)[:, None], np.arange(lk)
    if pattern.startswith("lead_"):
        return np.broadcast_to(j >= lk - length, (lq, lk)).copy()
    if pattern.startswith("trail_"):
        return np.broadcast_to(j < length, (lq, lk)).copy()
    if pattern == "causal_top_left":
        return j <= i
    if pattern == "causal_bottom_right":  # Lq > Lk leaves the first queries with no key
        return j <= i + lk - lq
    # left padding: query i starts at an evenly spaced key, the last query at the last key (a padding of >= 16
    # keys wherever lk > 17)
    start = np.round(np.linspace(0, lk - 1, lq)).astype(int)[:, None]
    if pattern == "left_padding":
        return j >= start
    if pattern == "right_padding":
        return j < lk - start
    if pattern == "single_first":
        return np.broadcast_to(j == 0, (lq, lk)).copy()
    if pattern == "single_last":
        return np.broadcast_to(j == lk - 1, (lq, lk)).copy()
    if pattern == "single_tile_edge":  # the first key of the last tile of 16: the tiles before it fully masked
        return np.broadcast_to(j == 16 * ((lk - 1) // 16), (lq, lk)).copy()
    if pattern == "sliding_window":  # bottom-right aligned, as with a KV cache
        end = i + lk - lq
        return (j <= end) & (j > end - WINDOW)
    if pattern == "random":  # half the keys, and the last query with none
        keep = rng.random((lq, lk)) < 0.5
        keep[-1] = False
        return keep
    raise ValueError(pattern)


def _lk(pattern: str, length: int) -> int:
    if pattern.startswith("lead_"):
        return int(pattern[5:]) + length
    if pattern.startswith("trail_"):
        b = int(pattern[6:])
        return -(-length // b) * b + b
    return length


def scores(regime: str, fmt, lq: int, lk: int, rng) -> tuple[np.ndarray, np.ndarray, float]:
    """(per-query offset column, per-key column, spread): score[i, j] = offset[i] * key[j] + noise of the spread."""
    top = fmt.max_float if math.isfinite(fmt.max_float) else 1.7e308
    cap = top / (4 * D)  # the bias column times sqrt(d) stays well inside the dtype
    ones = np.ones(lk)
    if regime == "small":
        return np.zeros(lq), ones, 1.0
    if regime == "large":  # past log of float32's max: an unshifted exp overflows
        return np.full(lq, min(200.0, cap)), ones, 1.0
    if regime.startswith("below_"):
        spread = 0.5
        return np.full(lq, log_smallest_normal(regime[6:]) - 16 * spread), ones, spread
    if regime == "wide":  # keys spread over [-100, 100]: exp of the lowest underflows every float dtype but float64
        return np.full(lq, min(100.0, cap)), rng.uniform(-1, 1, lk), 1.0
    if regime == "ties":  # every score exactly 3
        return np.full(lq, 3.0), ones, 0.0
    raise ValueError(regime)


def _cells(fmt, rng):
    for pattern, regime, length in DESIGN:
        lk = _lk(pattern, length)
        yield pattern, regime, length, lk, mask(pattern, LQ, length, rng), *scores(regime, fmt, LQ, lk, rng)


def _groups(fmt, rng):
    """The design's cells grouped by key count, and unmasked apart from masked (a mask of None is a code path of its
    own): one case per group, its cells along a batch axis. A call per cell cost more than the attention kind's
    whole default suite in float32, most of it the isolation worker's round trip; a call per group costs a fraction."""
    groups = {}
    for cell in _cells(fmt, rng):
        groups.setdefault((cell[3], cell[4] is None), []).append(cell)
    return list(groups.values())


def _describe(cells, axis: str) -> str:
    """'[0] lead_16, small, length 17; [1] ...' and the key count: the batch entry of each cell."""
    listed = "; ".join(f"[{b}] {c[0]}, {c[1]}, length {c[2]}" for b, c in enumerate(cells))
    return f"{listed} ({axis}={cells[0][3]})"


#: The covering designs: the hunt seeds from them as from the reported bugs (softaudit/hunt/_strategies.py).
GRIDS = ("attn_grid", "mask_grid")


@family(
    "attn_grid",
    "Mask pattern (18) x score regime (6) x key length at tile edges (8), as a pairwise covering design of 144 "
    "cells in 37 batched cases: fully masked leading tiles, every score past log of the smallest normal, tails past "
    "the last tile.",
)
def attn_grid(kind, fmt, size, rng):
    out = []
    for cells in _groups(fmt, rng):
        q, k, v = [], [], []
        for _pattern, _regime, _length, lk, _keep, offset, keys, spread in cells:
            # column 0 carries the regime's score (sqrt(d) offset . key / sqrt(d)); the other columns add noise of
            # standard deviation `spread` (the sum of d - 1 products of normals, over sqrt(d))
            noise = math.sqrt(spread) * math.sqrt(math.sqrt(D) / math.sqrt(D - 1))
            q.append(np.column_stack([math.sqrt(D) * offset, rng.standard_normal((LQ, D - 1)) * noise]))
            k.append(np.column_stack([keys, rng.standard_normal((lk, D - 1)) * noise]))
            v.append(rng.standard_normal((lk, D)))
        keep = None if cells[0][4] is None else np.stack([c[4] for c in cells])
        arrays = {"q": np.stack(q), "k": np.stack(k), "v": np.stack(v)}
        out.append((arrays, keep, _describe(cells, "Lk"), {"lk": cells[0][3]}))
    return out


@family(
    "mask_grid",
    "attn_grid's design on rows: each cell 8 rows of its length, mask pattern and score regime (37 cases).",
)
def mask_grid(kind, fmt, size, rng):
    out = []
    for cells in _groups(fmt, rng):
        x = np.concatenate([c[5][:, None] * c[6] + rng.standard_normal((LQ, c[3])) * c[7] for c in cells])
        keep = np.concatenate([np.ones((LQ, c[3]), bool) if c[4] is None else c[4] for c in cells])
        out.append(({"x": x}, keep, _describe(cells, "n"), {"n": cells[0][3]}))
    return out
