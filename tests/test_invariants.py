"""Invariants checked without the reference: each flags the candidates that break it, and not the sound ones."""

import numpy as np

import softaudit
from softaudit.invariants import Probes


def table(targets, kind=None, dtypes=("float32",), families=None):
    t = softaudit.audit(targets, kind=kind, dtypes=list(dtypes), suite="quick", families=families).table
    return {
        (r.candidate.rsplit(":", 1)[-1], r.family): r.invariants if isinstance(r.invariants, str) else ""
        for r in t.itertuples()
    }


def test_exact_shifts_change_nothing_in_max_shifted_softmax_but_do_in_naive():
    got = table(
        ["softaudit.candidates.softmax:naive", "softaudit.candidates.softmax:max_shifted_f32acc"],
        families=["gaussian", "long"],
    )
    assert "shift" in got[("softmax.naive", "gaussian")]
    assert got[("softmax.max_shifted_f32acc", "gaussian")] == "" and got[("softmax.max_shifted_f32acc", "long")] == ""


def test_no_shift_is_checked_where_float64_absorbs_it_next_to_finfo_min():
    # 3 + 1 is exact but finfo.min + 1 is finfo.min, in float64 too: shifting this row would change its softmax.
    x = np.array([[3.0, float(np.finfo(np.float32).min), 0.5]], np.float32)
    assert Probes("softmax", {"x": x}, None, np.float32, seed=0).shifted is None
    assert table("softaudit.candidates.softmax:max_shifted_f32acc", families=["mask_planes"]) == {
        ("softmax.max_shifted_f32acc", "mask_planes"): ""
    }


def test_logsumexp_below_the_max_and_fills_that_bend_the_kept_entries():
    got = table("softaudit.candidates.logsumexp:naive", families=["offset"])
    assert "lse_below_max" in got[("logsumexp.naive", "offset")]
    fills = table(
        ["softaudit.candidates.masked_softmax:fill_neg1e4", "softaudit.candidates.masked_softmax:where"],
        families=["below_fill"],
    )
    assert "masked_equals_kept" in fills[("masked_softmax.fill_neg1e4", "below_fill")]
    assert fills[("masked_softmax.where", "below_fill")] == ""


def ignores_mask(x, mask, axis=-1):
    w = x.astype(np.float64)
    with np.errstate(all="ignore"):
        e = np.exp(w - w.max(axis=axis, keepdims=True))
        return np.where(mask, e / e.sum(axis=axis, keepdims=True), 0).astype(x.dtype)


def reversed_probabilities(x, axis=-1):
    w = x.astype(np.float64)
    e = np.exp(w - w.max(axis=axis, keepdims=True))
    p = e / e.sum(axis=axis, keepdims=True)
    return np.sort(p, axis=axis)[..., ::-1].astype(x.dtype)  # right values, wrong places


def test_masked_values_that_matter_and_a_non_monotonic_candidate_are_flagged():
    got = table(ignores_mask, kind="masked_softmax", families=["random_mask"])
    assert "masked_values" in got[("ignores_mask", "random_mask")]
    got = table(reversed_probabilities, kind="softmax", families=["gaussian"])
    assert "monotonic" in got[("reversed_probabilities", "gaussian")]  # (its huge error widens the permutation check)
