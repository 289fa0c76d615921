"""merge_attention: the exact merge against mpmath at 300 bits, its conventions (empty splits, their junk, every
split empty), its conditioning against central differences, and the reported merges failing their families."""

import ml_dtypes
import mpmath
import numpy as np
import pytest

import softaudit
from softaudit import kinds
from softaudit.kinds.merge_attention import _partials

KIND = kinds.get("merge_attention")
PRECISION = {np.float16: 11, ml_dtypes.bfloat16: 8, np.float32: 24, np.float64: 53}


def _exact(outputs, lses, query):
    """(o, lse) of one query at 300 bits: lse = log sum e**lse_s, o = sum e**(lse_s - lse) o_s over non-empty s."""
    with mpmath.workprec(300):
        kept = [s for s in range(len(lses)) if lses[s][query] != -np.inf]
        if not kept:
            return [mpmath.mpf(0)] * outputs.shape[-1], -mpmath.inf
        total = mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(float(lses[s][query]))) for s in kept))
        w = [mpmath.exp(mpmath.mpf(float(lses[s][query])) - total) for s in kept]
        o = [
            mpmath.fsum(wi * mpmath.mpf(float(outputs[s][query][j])) for wi, s in zip(w, kept))
            for j in range(outputs.shape[-1])
        ]
        return o, total


def _rounded(value, dtype):
    if value in (mpmath.inf, -mpmath.inf) or value == 0:
        return np.array(float(value)).astype(dtype)
    with mpmath.workprec(PRECISION[dtype]):
        return np.array(float(+value)).astype(dtype)


@pytest.mark.parametrize("dtype", list(PRECISION), ids=lambda d: np.dtype(d).name)
def test_the_merge_is_mpmaths_correctly_rounded(dtype):
    rng = np.random.default_rng(0)
    arrays = _partials(rng, (3, 0, 9, 1), lq=2, dv=4, batch=1, empty_outputs=np.nan)
    arrays["lses"][:, 0, 1] = -np.inf  # the second query: every split empty
    inputs = {n: softaudit.reference.round_to(a, dtype) for n, a in arrays.items()}
    o, lse = KIND.reference(KIND, inputs, None, dtype)
    for query in [(0, 0), (0, 1)]:
        want_o, want_lse = _exact(inputs["outputs"].astype(np.float64), inputs["lses"].astype(np.float64), query)
        normal = float(ml_dtypes.finfo(dtype).smallest_normal)
        for j, value in enumerate(want_o):
            if value == 0 or abs(value) >= normal:
                assert o.value[query][j].tobytes() == _rounded(value, dtype).tobytes(), (query, j)
        assert lse.value[query].tobytes() == _rounded(want_lse, dtype).tobytes()
    assert (o.value[0, 1] == 0).all() and lse.value[0, 1] == -np.inf and not o.undefined.any()


def test_a_nan_in_a_split_that_counts_leaves_its_query_undefined():
    arrays = _partials(np.random.default_rng(1), (4, 4), lq=2, dv=4, batch=1)
    arrays["outputs"][1, 0, 0, 2] = np.nan
    o, lse = KIND.reference(KIND, arrays, None, np.float32)
    assert o.undefined.tolist() == [[True, False]] and not lse.undefined.any()


def test_a_plus_inf_lse_leaves_its_query_undefined_for_o_and_lse_alike():
    """(The lse reference read it as a defined +inf, against the kind's contract, and the hunt failed the textbook
    merge's NaN there.)"""
    arrays = _partials(np.random.default_rng(1), (4, 4), lq=2, dv=4, batch=1)
    arrays["lses"][0, 0, 1] = np.inf
    o, lse = KIND.reference(KIND, arrays, None, np.float32)
    assert o.undefined.tolist() == lse.undefined.tolist() == [[False, True]]


def test_a_split_near_float64s_largest_lse_and_empty_in_weight_adds_nothing_to_the_scale():
    """w = 0 beside |lse| near float64's largest (found by the hunt): |o_s - o| |lse_s| overflowed, 0 x inf read as
    0 for the whole scale, and a sound merge's error as inf times its conditioning. Now that split adds 0."""
    outputs = np.array([[[0.0]], [[-7.0]], [[-12.5]]])
    lses = np.array([[-1.79e308], [0.0], [0.0]])
    arrays = {"outputs": outputs, "lses": lses}
    refs = KIND.reference(KIND, arrays, None, np.float64)
    o_extra, _ = KIND.conditioning(KIND, arrays, None, refs)
    o = (-7.0 - 12.5) / 2  # the two live splits, equal weights
    assert refs[0].value[0, 0] == o
    assert o_extra["scale"][0, 0] == abs(o) + (7.0 + 12.5) / 2  # (the live splits' lses are 0: no |lse_s| term)


def _sensitivity(f, values):
    with mpmath.workdps(60):
        h = mpmath.mpf(10) ** -25
        total = 0
        for k in range(len(values)):
            up, down = list(values), list(values)
            up[k] += h
            down[k] -= h
            total += abs((f(up) - f(down)) / (2 * h)) * abs(values[k])
        return float(total)


def test_the_conditioning_is_the_merges_sensitivity_to_its_inputs():
    arrays = _partials(np.random.default_rng(2), (5, 3, 7), lq=1, dv=3, batch=1)
    refs = KIND.reference(KIND, arrays, None, np.float64)
    o_extra, lse_extra = KIND.conditioning(KIND, arrays, None, refs)
    outs, lses = arrays["outputs"][:, 0, 0], arrays["lses"][:, 0, 0]
    s = len(lses)

    def merged(values, j=None):
        o_s, l_s = values[: s * 3], values[s * 3 :]
        total = mpmath.log(mpmath.fsum(mpmath.exp(v) for v in l_s))
        if j is None:
            return total
        return mpmath.fsum(mpmath.exp(l_s[i] - total) * o_s[i * 3 + j] for i in range(s))

    values = [mpmath.mpf(float(v)) for v in (*outs.reshape(-1), *lses)]
    for j in range(3):
        inputs_part = o_extra["scale"][0, 0, j] - abs(refs[0].hi[0, 0, j])
        assert inputs_part == pytest.approx(_sensitivity(lambda v, j=j: merged(v, j), values), rel=1e-9)
    lse_part = lse_extra["scale"][0, 0] - abs(refs[1].hi[0, 0]) - 1
    assert lse_part == pytest.approx(_sensitivity(merged, values), rel=1e-9)


@pytest.mark.parametrize(
    "name, family",
    [("unguarded", "merge_empty"), ("exp_lse", "merge_large_lse")],
    ids=["vllm_39148", "transformer_engine_716"],
)
def test_a_reported_merge_fails_its_family_and_the_textbook_merge_passes(name, family):
    def verdicts(candidate):
        result = softaudit.audit(
            f"softaudit.candidates.merge_attention:{candidate}",
            families=[family],
            dtypes=["bfloat16", "float32"],
            suite="quick",
            isolation="none",
            cache_dir=None,
        )
        return set(result.table.verdict)

    assert verdicts(name) == {"fail"}
    assert verdicts("textbook") == {"pass"}


def test_the_fp8_cache_family_holds_the_partials_of_one_attention_over_an_fp8_cache():
    """Split-KV decoding on an FP8 KV cache (issue 45, part 2): merged exactly, the family's partials are the
    attention of q over the whole dequantized cache (softmax and P V in float64 here, within 1e-12), and the
    built-in merges pass on them in every dtype."""
    from softaudit.kinds.merge_attention import fp8_cache, split_partials

    q, k, v, splits = fp8_cache(np.random.default_rng(3), lq=2)
    assert len(np.unique(np.abs(k))) < 2**8  # (an e4m3 cache: few distinct magnitudes)
    parts = split_partials(q, k, v, splits)
    s = np.einsum("bid,bjd->bij", q, k) / 8.0
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    want = np.einsum("bij,bjd->bid", p / p.sum(axis=-1, keepdims=True), v)
    for b in range(2):
        for i in range(2):
            o, _ = _exact(parts["outputs"][:, b], parts["lses"][:, b], i)
            assert np.allclose([float(x) for x in o], want[b, i], rtol=1e-12, atol=1e-12 * np.abs(want).max())
    result = softaudit.audit(
        "softaudit.candidates.merge_attention:textbook",
        families=["merge_fp8_cache"],
        suite="quick",
        isolation="none",
        cache_dir=None,
    )
    assert set(result.table.verdict) == {"pass"} and len(result.table) == 8
