"""Per kind, the plain same-dtype comparison and the best-practice one; masked_softmax.where_in_dtype."""

import ml_dtypes
import numpy as np
import pytest

from softaudit import candidates
from softaudit.candidates import BEST, PLAIN, STANDARD, best, masked_softmax, plain, standard

KINDS = [
    "softmax",
    "log_softmax",
    "logsumexp",
    "masked_softmax",
    "attention",
    "attention_lse",
    "cross_entropy",
    "linear_cross_entropy",
    "merge_attention",
    "softmax_grad",
    "log_softmax_grad",
    "logsumexp_grad",
    "masked_softmax_grad",
    "attention_grad",
    "attention_sinks_grad",
    "cross_entropy_grad",
    "linear_cross_entropy_grad",
    "attention_fp8",
    "quantize_fp8",
]


def test_every_kind_has_a_plain_and_a_best_practice_builtin():
    names = {c.name for c in [*candidates.builtins(), *candidates.apart()]}  # (the FP8 built-ins load apart)
    assert sorted(PLAIN) == sorted(BEST) == sorted(KINDS)
    for kind in KINDS:
        assert plain(kind).kind == best(kind).kind == kind
        assert plain(kind).name == PLAIN[kind] in names and best(kind).name == BEST[kind] in names
        assert [c.name for c in standard(kind)] == list(STANDARD[kind]) and STANDARD[kind][0] == PLAIN[kind]
        assert BEST[kind] not in STANDARD[kind] and all(c.kind == kind for c in standard(kind))


def _row(rng, n, dtype):
    x = (rng.standard_normal((3, n)) * 3).astype(dtype)
    mask = rng.random((3, n)) < 0.7
    mask[1] = False
    return x, mask


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_where_in_dtype_is_where_itself_in_float32_and_float64(dtype):
    x, mask = _row(np.random.default_rng(1), 500, dtype)
    assert np.array_equal(masked_softmax.where_in_dtype(x, mask), masked_softmax.where(x, mask))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn])
def test_where_in_dtype_rounds_in_the_dtype_and_zeros_a_fully_masked_row(dtype):
    x, mask = _row(np.random.default_rng(2), 4096, dtype)
    got = masked_softmax.where_in_dtype(x, mask)
    upcast = masked_softmax.where(x, mask)
    assert got.dtype == np.dtype(dtype)
    assert (got[1] == 0).all() and not np.isnan(got.astype(np.float32)).any()  # float8_e4m3fn has no -inf to fill
    assert (got[~mask] == 0).all()
    assert not np.array_equal(got, upcast)  # the sum in the dtype rounds: not the float32 result
    eps = float(ml_dtypes.finfo(dtype).eps)
    error = np.abs(got.astype(np.float64) - upcast.astype(np.float64)).max()
    assert error <= 2 * np.log2(4096) * eps * np.abs(upcast.astype(np.float64)).max()  # about log2(n) ulps
