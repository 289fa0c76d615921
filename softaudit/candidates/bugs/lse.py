"""Bug models of the kinds that carry a log-sum-exp: attention_lse f(q, k, v, mask=None, **modifiers) -> (o, lse)
and merge_attention f(outputs, lses) -> (o, lse).

attention_lse's standard algorithm is best practice's (softaudit.candidates.attention's `upcast_with_lse`), with
its lse changed as the known mistakes change it; the merge's is the textbook merge (`merge_attention._merge`) with
its guard and its max shift as switches. The fix is the same call without the switch.
"""

from __future__ import annotations

import functools

import numpy as np

from .._ops import work_dtype
from ..attention import upcast_with_lse
from ..merge_attention import _merge
from ._model import Model, Variant
from .rows import LOG2E, working

#: What an lse for a query with no key comes out as where a kernel does not give it -inf.
NO_KEY = (np.inf, 0.0, np.nan)


def lse_standard(q, k, v, mask=None, *, no_key=-np.inf, base2: bool = False, **modifiers):
    """(o, lse) with one switch per known mistake: no_key is what a query with no key gets for its lse (-inf is
    right); base2 gives lse in base 2 (log2 of the sum, as kernels working with exp2 keep it)."""
    o, lse = upcast_with_lse(q, k, v, mask, **modifiers)
    w = lse.dtype
    with np.errstate(all="ignore"):
        if base2:
            lse = lse * w.type(LOG2E)
        lse = np.where(lse == -np.inf, w.type(no_key), lse)
    return o, lse.astype(q.dtype)


def merge_standard(outputs, lses, *, work: str = "wide", guard: bool = True, shift: bool = True):
    """The merge with one switch per known mistake: guard=False drops the empty splits' guards; shift=False weights
    the splits by e**lse without subtracting the max."""
    dtype = np.asarray(outputs).dtype
    w = working(dtype, work) if work != "wide" else work_dtype(dtype)
    o, lse = _merge(outputs, lses, w, guard=guard, shift=shift)
    return o.astype(dtype), lse.astype(dtype)


@functools.cache
def _made(kind: str, items: tuple):
    switches = dict(items)
    if kind == "attention_lse":

        def attend(q, k, v, mask=None, **modifiers):
            return lse_standard(q, k, v, mask, **switches, **modifiers)

        return attend

    def merge(outputs, lses):
        return merge_standard(outputs, lses, **switches)

    return merge


def _model(name: str, kind: str, mistake: str, fix: str, mistakes) -> Model:
    def call(switches):
        return _made(kind, tuple(sorted(switches.items())))

    return Model(
        name, kind, mistake, fix, tuple(Variant(label, call(bad), call(good)) for label, bad, good in mistakes)
    )


MODELS = [
    _model(
        "lse_of_no_key",
        "attention_lse",
        "a query with no key gets an lse other than -inf (the log of an empty sum)",
        "give a query with no key lse = -inf (and o = 0)",
        [(f"lse {value}", {"no_key": value}, {}) for value in NO_KEY],
    ),
    _model(
        "lse_in_base_2",
        "attention_lse",
        "the lse is returned in base 2 (log2 of the sum, as an exp2 kernel keeps it) where the natural log is asked",
        "return lse in the natural log: multiply a base-2 lse by ln 2",
        [("lse x log2(e)", {"base2": True}, {})],
    ),
    _model(
        "unguarded_merge",
        "merge_attention",
        "the merge does not guard empty splits: every split empty gives -inf - -inf = NaN, and an empty split's junk "
        "reaches o",
        "guard empty splits: no weight and no output read for lse = -inf, and o = 0, lse = -inf where all are empty",
        [("float32 for 16-bit inputs", {"guard": False}, {})],
    ),
    _model(
        "no_max_shift",
        "merge_attention",
        "the splits are weighted by exp(lse) without subtracting the largest lse, so the weights overflow",
        "weight each split by exp(lse_s - max lse)",
        [("float32 for 16-bit inputs", {"shift": False}, {})],
    ),
]
