"""Attention outputs that are exactly a tie or a zero of the dtype, or within e**-100000 of a tie: each is rounded by
tier C at its first precision, where refining alone never decided it (PrecisionExhausted at 131072 bits stopped
`softaudit hunt` on sound float16 attention).

The expected values are derived by hand: an exact result is the mean of the values of keys of equal score, rounded
once (numpy's float64 -> float16 cast rounds the exact mean to nearest even); two keys capped far in the tanh's flat
part weigh v_top e**f_top + v e**f over e**f_top + e**f with f_top - f > 0 tiny, so the output sits just past their
mean, on the side of the key of the larger raw score (docs/reference.md, "Ties, zeros and near-ties in attention").
"""

import numpy as np
import pytest

from softaudit import reference as R

F16 = np.float16


def _neighbours(value: float, dtype) -> tuple[float, float]:
    """The two values of the dtype around `value` (a tie between them)."""
    low = float(np.array(value, np.float64).astype(dtype))
    if low > value:
        low = float(np.nextafter(np.array(low, dtype), np.array(-np.inf, dtype)))
    high = float(np.nextafter(np.array(low, dtype), np.array(np.inf, dtype)))
    return low, high


@pytest.mark.parametrize("method", ["auto", "mpmath"])
@pytest.mark.parametrize(
    "q, keys, cap",
    [
        ([255.0], [255.0, 250.0], 0.25),  # tanh arguments 260100 and 250000: 2 C e**-500000 apart
        ([255.0], [-250.0, -255.0], 0.25),  # both scores capped near -C: the larger one (-250 x 255) is the top
        ([200.0] * 128, [200.0, 150.0], 1.0),  # d = 128 (c = 1/sqrt(128)), as the hunt drew it
        ([255.0], [250.0, 255.0], 0.25),  # the top key second
    ],
)
def test_two_keys_capped_flat_round_past_the_tie_of_their_values_toward_the_top_key(q, keys, cap, method):
    d = len(q)
    qa = np.array([q], F16)
    ka = np.array([[k] * d for k in keys], F16)
    a, b = 1.0, 1.0 + 2.0**-10  # adjacent float16 values: their mean 1 + 2**-11 is a tie
    va = np.array([[a, -b, 0.75], [b, -a, 0.75]], F16)
    top = int(np.argmax(np.array(keys) * q[0]))
    got = R.attention(qa, ka, va, softcap=cap, dtype="float16", method=method).astype(np.float64)[0]
    for column, (mine, theirs) in enumerate(zip(va[top].astype(float), va[1 - top].astype(float))):
        mean = (mine + theirs) / 2
        if mine == theirs:
            assert got[column] == mean
            continue
        low, high = _neighbours(mean, F16)
        assert (low + high) / 2 == mean  # (the check's check: a tie)
        assert got[column] == (high if mine > theirs else low), (column, got)


def test_the_hunts_input_is_rounded_toward_its_top_key_in_every_column():
    """The input `softaudit hunt` stopped on (float16, softcap 0.25, d = 128), rebuilt with its shape: a query whose
    only keys score about 98582 and 78716 (c q.k, far in the cap's flat part), and their values as the hunt drew
    them (column 2's mean, 1.19873046875, is a tie in float16)."""
    q = np.full((1, 128), 16.0, F16)
    k = (np.array([[98582.0], [78716.0]]) * np.sqrt(128) / (16 * 128) * np.ones((2, 128))).astype(F16)
    v = np.array(
        [[-0.56445312, 0.76074219, 2.03320312, -0.93896484], [1.21386719, 0.16357422, 0.36425781, 1.37109375]], F16
    )
    got = R.attention(q, k, v, softcap=0.25, dtype="float16").astype(np.float64)[0]
    ties = 0
    for column in range(4):
        mean = (float(v[0, column]) + float(v[1, column])) / 2
        low, high = _neighbours(mean, F16)
        if (low + high) / 2 == mean:  # a tie: toward key 0's value (its score is the larger)
            ties += 1
            assert got[column] == (high if v[0, column] > v[1, column] else low)
        else:  # the mean itself, or the value nearer it
            assert got[column] == float(np.array(mean).astype(F16))
    assert ties == 1


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_distinct_keys_of_equal_score_give_the_mean_of_their_values_rounded_once(dtype):
    """d = 16 (c = 1/4, rational): key 0 scores 4/4 + 0, key 1 scores 0 + 1; a bias, ALiBi's or a sink's makes
    distinct keys score alike. The output is the mean of their values exactly, a tie here, rounded to even."""
    q = np.zeros((1, 16)).astype(dtype)
    q[0, 0] = 1
    k = np.zeros((2, 16)).astype(dtype)
    k[0, 0] = 4
    one = np.array(1.0).astype(dtype)
    step = float(np.nextafter(one, np.array(2.0).astype(dtype))) - 1.0
    v = np.array([[1.0], [1.0 + step]]).astype(dtype)
    got = R.attention(q, k, v, bias=np.array([[0.0, 1.0]]), dtype=dtype)
    assert float(got[0, 0]) == 1.0  # (1 + step / 2: ties to even)
    v = np.array([[1.0 + step], [1.0 + 2 * step]]).astype(dtype)  # a tie whose even neighbour is the upper one
    got = R.attention(q, k, v, bias=np.array([[0.0, 1.0]]), dtype=dtype)
    assert float(got[0, 0]) == 1.0 + 2 * step


def test_a_sink_scoring_like_a_key_halves_its_value_exactly():
    """d = 4 (c = 1/2): a key of raw score 2 and a sink of logit 1 score alike; the output is v / 2, and for the
    smallest subnormal of float16 that is a tie with 0 (ties to even: 0)."""
    q = np.array([[1.0, 0, 0, 0]], F16)
    k = np.array([[2.0, 0, 0, 0]], F16)
    v = np.array([[2.0**-24, 3.0]], F16)
    got = R.attention(q, k, v, sinks=np.array(1.0), dtype="float16").astype(np.float64)
    assert got.tolist() == [[0.0, 1.5]]


@pytest.mark.parametrize("d", [2, 16])
def test_values_that_cancel_behind_a_sink_give_an_exact_zero(d):
    """q = 0: every key scores 0, the sink z = 1; the output is (v_0 + v_1) / (2 + e) = 0 where the values cancel,
    with c = 1/sqrt(2) irrational or 1/4 rational."""
    q = np.zeros((1, d), F16)
    k = np.ones((2, d), F16)
    v = np.array([[0.5, 1.0], [-0.5, 1.0]], F16)
    got = R.attention(q, k, v, sinks=np.array(1.0), dtype="float16").astype(np.float64)
    assert got[0, 0] == 0.0 and not np.signbit(got[0, 0])
    assert got[0, 1] == float(np.array(2 / (2 + np.e)).astype(F16))
