"""The attention_fp8 families hold what they say, the same bits every time."""

import ml_dtypes
import numpy as np
import pytest

from softaudit import fp8
from softaudit.reference import fp8 as _fp8


@pytest.mark.parametrize("family", list(fp8.ATTENTION_FAMILIES))
def test_a_family_makes_the_same_bits_every_time(family):
    one, two = fp8.attention_cases(family), fp8.attention_cases(family)
    assert len(one) == len(two) > 0
    for (a, m, d), (b, n, e) in zip(one, two):
        assert d == e and (m is None) == (n is None) and (m is None or np.array_equal(m, n))
        for name in a:
            assert a[name].dtype == b[name].dtype and np.array_equal(
                a[name].reshape(-1).view(np.uint8), b[name].reshape(-1).view(np.uint8)
            )
        q_formats = ("bfloat16",) if family == "fp8_kv_cache" else _fp8.FORMATS  # (q over an FP8 cache)
        assert a["q8"].dtype.name in q_formats and a["k8"].dtype.name in _fp8.FORMATS
        assert a["descale_q"].dtype == np.float32


def test_the_heads_family_has_unequal_per_head_descales_and_per_tensor_scalars():
    cases = fp8.attention_cases("fp8_heads")
    shapes = {c[0]["descale_k"].shape for c in cases}
    assert shapes == {(2, 4), ()}
    per_head = next(c[0]["descale_k"] for c in cases if c[0]["descale_k"].shape == (2, 4))
    assert per_head.max() / per_head.min() > 1000  # heads of scale 0.05 to 300
    assert {c[0]["q8"].dtype for c in cases} == {np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)}


def test_gqa_has_16_query_heads_per_kv_head():
    ((arrays, _, _),) = fp8.attention_cases("fp8_gqa")
    assert arrays["q8"].shape[1] == 16 * arrays["k8"].shape[1] and arrays["descale_q"].shape == (2, 1)


def test_the_stale_family_rises_by_less_than_4_past_the_first_block():
    ((arrays, _, _),) = fp8.attention_cases("fp8_stale_max")
    q, k = (_fp8.dequantize(arrays[n], arrays[f"descale_{n[0]}"]) for n in ("q8", "k8"))
    s = np.einsum("bhqd,bhkd->bhqk", q, k) / 8 * np.log2(np.e)
    rise = s.max(axis=-1) - s[..., :128].max(axis=-1)
    assert (rise > 3).all() and (rise < 4).all()


def test_the_masks_are_bottom_right_causal_and_a_window_of_32():
    keep = _fp8.keep_mask(3, 5, causal=True)
    assert keep.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    window = _fp8.keep_mask(4, 4, window=(1, 0))
    assert window.tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]


def test_an_unknown_family_or_suite_is_one_line():
    with pytest.raises(ValueError, match="unknown attention_fp8 family 'fp8_x'"):
        fp8.attention_cases("fp8_x")
    with pytest.raises(ValueError, match="suite must be one of"):
        fp8.attention_cases("fp8_gqa", suite="full")


def test_the_kv_cache_family_decodes_bfloat16_queries_over_an_fp8_cache():
    cases = fp8.attention_cases("fp8_kv_cache")
    assert {c[0]["q8"].shape[2] for c in cases} == {1, 4}  # (one query: decoding)
    for arrays, _, _ in cases:
        assert arrays["q8"].dtype == np.dtype(ml_dtypes.bfloat16) and float(arrays["descale_q"]) == 1.0
        assert arrays["k8"].dtype == arrays["v8"].dtype == np.dtype(ml_dtypes.float8_e4m3fn)
        assert arrays["q8"].shape[1] == 4 * arrays["k8"].shape[1]
    assert {c[0]["descale_k"].shape for c in cases} == {(), (2, 2)}
