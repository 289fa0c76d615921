"""Case families for softmax, log-softmax, log-sum-exp and masked softmax.

Every generator returns float64 rows; the runner rounds them to the audited dtype (that rounding is the input).
Where a family depends on the dtype's range (offsets, spreads, subnormal results) it is built from `fmt`.
"""

from __future__ import annotations

import math
from importlib import resources

import numpy as np

from .. import kinds
from ._case import family


def _kept(kind, rng, x, density=0.7):
    """For a masked kind, a random mask with at least one kept entry per row; None for the plain kinds."""
    if not kinds.get(kind).masked:
        return None
    mask = rng.random(x.shape) < density
    mask[np.arange(len(x)), rng.integers(0, x.shape[1], len(x))] = True
    return mask


def _max(fmt) -> float:
    return fmt.max_float if math.isfinite(fmt.max_float) else 1.7e308


TEXTBOOK = [
    [10, 0, -5],
    [1, 0, 1],
    [2, 4, 4],
    [2, 2, 3],
    [1000, 1001, 999],
    [1, 0.5, 0],
    [2, 1, 0],
    [4, 2, 0],
    [0, 0, 0, 0],
    [3, 1, -1],
    [1.5, 0.5, -0.5],
    [1, 1, 10],
    [-1, 0, 1],
    [0, 1, 2, 3],
    [10000, 10001, 10002, 10003],
    [-25, 0, 25, 50],
    [1, 325, 749, 750],
]


@family("textbook", "The vectors of the reference tests: [10, 0, -5], [1000, 1001, 999], ONNX's and SciPy's.")
def textbook(kind, fmt, size, rng):
    out = []
    for row in TEXTBOOK:
        x = np.array([row], dtype=np.float64)
        mask = None if not kinds.get(kind).masked else np.ones(x.shape, bool)
        out.append(({"x": x}, mask, f"{row}"))
    return out


@family("gaussian", "Gaussian logits at scales 1e-3 to 1e4.")
def gaussian(kind, fmt, size, rng):
    out = []
    for scale in (1e-3, 1e-1, 1.0, 10.0, 100.0, 1e3, 1e4):
        x = rng.standard_normal((size.rows, size.n)) * scale
        out.append(({"x": x}, _kept(kind, rng, x), f"N(0, {scale:g}^2)", {"scale": scale}))
    return out


@family("offset", "Gaussian logits plus large positive and negative offsets (within half the dtype's range).")
def offset(kind, fmt, size, rng):
    out = []
    for c in (30.0, 300.0, 3e3, 3e4, 3e6, 3e30, 3e300):
        if c < _max(fmt) / 2:
            for sign in (1, -1):
                x = rng.standard_normal((size.rows, size.n)) * 3 + sign * c
                out.append(({"x": x}, _kept(kind, rng, x), f"N(0, 9) {'+' if sign > 0 else '-'} {c:g}"))
    return out


@family("wide_spread", "Rows spanning twice the dtype's exp range, so most terms underflow.")
def wide_spread(kind, fmt, size, rng):
    span = 2 * math.log(_max(fmt))
    x = np.stack([rng.permutation(np.linspace(0, -span, size.n)) for _ in range(size.rows)])
    return [({"x": x}, _kept(kind, rng, x), f"linspace(0, -{span:.0f}) shuffled")]


@family("ties", "All-equal rows, ties at the maximum, and near-uniform rows a few ulps apart.")
def ties(kind, fmt, size, rng):
    n, p = size.n, fmt.precision
    equal = np.stack([np.full(n, v) for v in (0.0, 1.0, -7.5, 100.0)])
    top_tie = rng.standard_normal((size.rows, n))
    top_tie[:, :3] = top_tie.max() + 1
    near = 1 + np.ldexp(rng.integers(0, 4, (size.rows, n)).astype(float), 1 - p)
    return [
        ({"x": x}, _kept(kind, rng, x), d)
        for x, d in ((equal, "equal"), (top_tie, "tie at the max"), (near, "1 + k ulp"))
    ]


@family("dominant", "One logit far above the rest: log-softmax of the top entry is a tiny negative number.")
def dominant(kind, fmt, size, rng):
    out = []
    for gap in (5.0, 15.0, 40.0, 100.0, 700.0):
        if gap < _max(fmt) / 2:
            x = rng.standard_normal((size.rows, size.n))
            x[np.arange(size.rows), rng.integers(0, size.n, size.rows)] = gap
            out.append(({"x": x}, _kept(kind, rng, x), f"one logit at {gap:g}"))
    return out


#: The long family's cases hold at most this many elements (at least one row).
LONG_ELEMENTS = 1 << 16


@family("long", "Long rows (up to 65536 in default) with the maximum early, late and at a random place.")
def long(kind, fmt, size, rng):
    # Two rows a case, one where a row holds 65,536: what a long row costs an implementation (a sum that stalls, a
    # running max rescaled many times) is in each row alone, and the second row of 65,536 doubled the largest
    # family of the main job (a quarter of its cache) for no pattern the first does not hold.
    out = []
    for n in size.long:
        rows = max(1, min(2, LONG_ELEMENTS // n))
        for where in ("early", "late", "random"):
            x = rng.standard_normal((rows, n)) * 2
            spot = {"early": 0, "late": n - 1, "random": int(rng.integers(n))}[where]
            x[:, spot] = x.max() + 1
            out.append(({"x": x}, _kept(kind, rng, x, density=0.9), f"n={n}, max {where}", {"n": n}))
    return out


@family("temperature", "Logits divided by temperatures 1e-3 to 1e3.")
def temperature(kind, fmt, size, rng):
    base = rng.standard_normal((size.rows, size.n)) * 3
    temperatures = (1e-3, 1e-2, 0.1, 1.0, 10.0, 1e2, 1e3)
    return [({"x": base / t}, _kept(kind, rng, base), f"T = {t:g}", {"temperature": t}) for t in temperatures]


@family("subnormal", "Rows whose softmax values fall in the dtype's subnormal range.")
def subnormal(kind, fmt, size, rng):
    low = -fmt.emin * math.log(2)  # e**-low is the smallest normal
    high = -(fmt.min_subnormal_exp - 1) * math.log(2)  # e**-high is half the smallest subnormal
    x = -rng.uniform(low, high, (size.rows, size.n))
    x[:, 0] = 0.0
    return [({"x": x}, _kept(kind, rng, x), f"logits in (-{high:.1f}, -{low:.1f}) below a 0")]


@family("neg_inf", "Rows with -inf entries (removed: softmax exactly 0, log-softmax -inf).")
def neg_inf(kind, fmt, size, rng):
    x = rng.standard_normal((size.rows, size.n)) * 3
    x[rng.random(x.shape) < 0.3] = -np.inf
    x[:, 0] = 1.0
    return [({"x": x}, _kept(kind, rng, x), "30% -inf")]


@family(
    "undefined",
    "Rows with a NaN, a +inf logit, or every entry -inf: reported apart, NaN expected. The masked kinds keep every "
    "entry of those rows, and also get the NaN and the +inf masked out: those rows are defined, and the output must "
    "not see what a masked entry holds.",
)
def undefined(kind, fmt, size, rng):
    x = rng.standard_normal((3, size.n))
    x[0, 1] = np.nan
    x[1, 2] = np.inf
    x[2] = -np.inf
    if not kinds.get(kind).masked:
        return [({"x": x}, None, "NaN, +inf, all -inf")]
    hidden = np.ones((2, size.n), bool)
    hidden[0, 1] = hidden[1, 2] = False
    return [
        ({"x": x}, np.ones(x.shape, bool), "NaN, +inf, all -inf, every entry kept"),
        ({"x": x[:2]}, hidden, "NaN, +inf masked out"),
    ]


@family("mnist_logits", "2500 pre-softmax logit vectors of a LeNet-style MNIST network (Blanchard et al. 2021).")
def mnist_logits(kind, fmt, size, rng):
    with resources.files(__package__).joinpath("data/mnist_presoftmax_logits.npy").open("rb") as f:
        x = np.load(f).astype(np.float64)
    if size.rows < 16:
        x = x[:200]
    return [({"x": x}, _kept(kind, rng, x), "real logits, 10 classes")]


@family("padding", "Padding masks: each row keeps a prefix of random length.")
def padding(kind, fmt, size, rng):
    x = rng.standard_normal((size.rows, size.n)) * 3
    lengths = rng.integers(1, size.n + 1, size.rows)
    return [({"x": x}, np.arange(size.n) < lengths[:, None], "prefix masks")]


@family("causal", "Causal masks: row i keeps entries 0..i.")
def causal(kind, fmt, size, rng):
    x = rng.standard_normal((size.n, size.n)) * 3
    return [({"x": x}, np.tril(np.ones((size.n, size.n), bool)), "lower triangle")]


@family("random_mask", "Random masks keeping half the entries.")
def random_mask(kind, fmt, size, rng):
    x = rng.standard_normal((size.rows, size.n)) * 3
    return [({"x": x}, _kept(kind, rng, x, density=0.5), "Bernoulli(0.5)")]


@family("fully_masked", "Some rows entirely masked: the safe answer is all zeros.")
def fully_masked(kind, fmt, size, rng):
    x = rng.standard_normal((size.rows, size.n)) * 3
    mask = _kept(kind, rng, x)
    mask[::2] = False
    return [({"x": x}, mask, "every other row fully masked")]


@family("masked_extremes", "Masked entries holding the dtype's max, +inf, -inf and NaN: none may leak.")
def masked_extremes(kind, fmt, size, rng):
    out = []
    for junk in (_max(fmt), np.inf, -np.inf, np.nan):
        x = rng.standard_normal((size.rows, size.n)) * 3
        mask = _kept(kind, rng, x)
        x[~mask] = junk
        out.append(({"x": x}, mask, f"masked slots hold {junk:g}"))
    return out


@family("below_fill", "Kept logits far below common fill values (-1e4, -1e9) where the dtype reaches them.")
def below_fill(kind, fmt, size, rng):
    out = []
    for level in (-3e4, -3e9):
        if -level < _max(fmt) / 2:
            x = rng.standard_normal((size.rows, size.n)) + level
            out.append(({"x": x}, _kept(kind, rng, x), f"kept logits near {level:g}"))
    return out
