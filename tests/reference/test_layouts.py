"""Every public reference function takes every array a user may pass: of size 0 along any axis, 0-d, not
contiguous, read-only, big-endian, in every dtype the reference knows. Each call gives a result (of size 0 the shape
numpy and SciPy give, empty; otherwise the same bits as for a plain contiguous copy) or one ValueError or TypeError,
one line, naming an argument."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from softaudit import reference as R

DTYPES = R.DTYPE_NAMES
LAYOUTS = ("zero_size", "zero_d", "non_contiguous", "read_only", "big_endian")


def _dtype(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name) if hasattr(ml_dtypes, name) else name)


def _lse(q, k, v, dtype):
    return R.evaluate_attention_lse(q, k, v, dtype=dtype).value


def _target(logits, dims):
    return np.arange(dims["R"]) % max(dims["N"], 1)


#: name -> (the call, its float arguments by symbolic shape, its output shapes). R rows, N a row's length; attention:
#: B batch, Q queries, K keys, D q and k's width, E v's. `target` is cross-entropy's integer argument, made to fit.
FUNCTIONS = {
    "softmax": (R.softmax, {"x": "RN"}, ["RN"]),
    "log_softmax": (R.log_softmax, {"x": "RN"}, ["RN"]),
    "logsumexp": (R.logsumexp, {"x": "RN"}, ["R"]),
    "masked_softmax": (R.masked_softmax, {"x": "RN", "mask": "RN"}, ["RN"]),
    "softmax_grad": (R.softmax_grad, {"x": "RN", "g": "RN"}, ["RN"]),
    "log_softmax_grad": (R.log_softmax_grad, {"x": "RN", "g": "RN"}, ["RN"]),
    "logsumexp_grad": (R.logsumexp_grad, {"x": "RN", "g": "R"}, ["RN"]),
    "masked_softmax_grad": (R.masked_softmax_grad, {"x": "RN", "mask": "RN", "g": "RN"}, ["RN"]),
    "undefined_rows": (R.undefined_rows, {"x": "RN"}, ["R"]),
    "attention": (R.attention, {"q": "BQD", "k": "BKD", "v": "BKE"}, ["BQE"]),
    "attention_grad": (R.attention_grad, {"q": "BQD", "k": "BKD", "v": "BKE", "g": "BQE"}, ["BQD", "BKD", "BKE"]),
    "attention_undefined_rows": (R.attention_undefined_rows, {"q": "BQD", "k": "BKD", "v": "BKE"}, ["BQ"]),
    "attention_lse": (_lse, {"q": "BQD", "k": "BKD", "v": "BKE"}, ["BQ"]),
    "sinks_grad": (R.sinks_grad, {"q": "BQD", "k": "BKD", "v": "BKE", "g": "BQE", "sinks": "B"}, ["B"]),
    "cross_entropy": (R.cross_entropy, {"logits": "RN", "target": "R"}, ["R"]),
    "cross_entropy_grad": (R.cross_entropy_grad, {"logits": "RN", "target": "R", "g": "R"}, ["RN"]),
    "round_to": (R.round_to, {"values": "RN"}, ["RN"]),
}


def _arrays(name: str, dtype: np.dtype, dims: dict, rng) -> dict:
    """The call's arguments in their natural form: floats of the dtype (Gaussian, rounded), a boolean mask, an
    integer target."""
    _, spec, _ = FUNCTIONS[name]
    out = {}
    for arg, axes in spec.items():
        shape = tuple(dims[a] for a in axes)
        if arg == "mask":
            out[arg] = rng.random(shape) < 0.7
        elif arg == "target":
            out[arg] = (np.arange(dims["R"]) % max(dims["N"], 1)).astype(np.int64)
        elif arg == "values":
            out[arg] = rng.standard_normal(shape)  # round_to takes float64 values
        else:
            out[arg] = R.round_to(rng.standard_normal(shape) * 2, dtype)
    return out


def _laid_out(a: np.ndarray, layout: str) -> np.ndarray:
    """The array with the same values in the layout: every other element of one twice as wide, read-only, or
    big-endian (zero_size and zero_d change the shape instead)."""
    if layout == "non_contiguous" and a.ndim:
        wide = np.repeat(a, 2, axis=-1)
        return wide[..., ::2]
    if layout == "read_only":
        a = a.copy()
        a.setflags(write=False)
        return a
    if layout == "big_endian" and a.dtype.kind != "b" and a.dtype != np.int64:
        return a.astype(a.dtype.newbyteorder(">"))
    return a


def _call(name: str, arrays: dict, dtype_name: str):
    call, spec, _ = FUNCTIONS[name]
    args = [arrays[a] for a in spec]
    if name == "round_to":
        return call(*args, dtype_name)
    if name.endswith("undefined_rows"):  # (no dtype: it says which rows have no result)
        return call(*args)
    if name in ("attention", "attention_grad", "attention_lse", "sinks_grad"):
        d = arrays["q"].shape[-1] if np.ndim(arrays["q"]) else 1
        extra = {"scale": 1.0} if d == 0 else {}
        if name == "attention_lse":
            return _lse(*args, dtype=dtype_name)
        return call(*args, dtype=dtype_name, **extra)
    return call(*args, dtype=dtype_name)


def _outputs(result) -> list:
    return [np.asarray(r) for r in (result if isinstance(result, tuple) else (result,))]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """The same shape, dtype and bits (NaN payloads aside)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "b":
        return bool(np.array_equal(a, b))
    x, y = a.astype(np.float64), b.astype(np.float64)
    return bool(np.array_equal(x, y, equal_nan=True) and np.array_equal(np.signbit(x), np.signbit(y)))


@settings(max_examples=120, deadline=None)
@given(
    name=st.sampled_from(sorted(FUNCTIONS)),
    dtype_name=st.sampled_from(DTYPES),
    layout=st.sampled_from(LAYOUTS),
    dims=st.fixed_dictionaries({a: st.integers(1, 3) for a in "RNBQKDE"}),
    empty=st.sampled_from("RNBQKDE"),
    seed=st.integers(0, 2**16),
)
def test_a_result_or_one_line_naming_the_argument(name, dtype_name, layout, dims, empty, seed):
    dtype = _dtype(dtype_name)
    _, spec, shapes = FUNCTIONS[name]
    if layout == "zero_size":
        dims = dims | {empty: 0}
    rng = np.random.default_rng(seed)
    plain = _arrays(name, dtype, dims, rng)
    if layout == "zero_d":
        given_arrays = {a: np.asarray(v.reshape(-1)[:1].reshape(())) if v.size else v for a, v in plain.items()}
    else:
        given_arrays = {a: _laid_out(v, layout) for a, v in plain.items()}
    try:
        got = _outputs(_call(name, given_arrays, dtype_name))
    except (ValueError, TypeError) as exc:
        message = str(exc)
        assert "\n" not in message and message, (name, layout, message)
        assert any(arg in message for arg in (*spec, "dtype", "scale")), (name, layout, message)
        assert layout in ("zero_d", "zero_size") or dtype_name == "longdouble", (name, layout, message)
        return
    if layout == "zero_d":
        return
    assert [g.shape for g in got] == [tuple(dims[a] for a in s) for s in shapes], (name, layout, dims)
    if layout != "zero_size":
        want = _outputs(_call(name, plain, dtype_name))
        assert all(_same(g, w) for g, w in zip(got, want)), (name, layout)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp"])
@pytest.mark.parametrize("shape, axis", [((0, 3), -1), ((2, 0, 3), -1), ((0, 3), 1), ((4, 0), 0), ((0, 2, 3), 1)])
def test_an_empty_batch_gives_an_empty_result_as_scipy_does(name, shape, axis):
    """numpy and SciPy give an empty result of the shape the reduction leaves."""
    scipy_special = pytest.importorskip("scipy.special")
    x = np.zeros(shape, np.float16)
    got = getattr(R, name)(x, axis=axis, dtype="float16")
    want = getattr(scipy_special, name)(x.astype(np.float64), axis=axis)
    assert got.shape == np.shape(want) and got.dtype == np.float16 and got.size == 0


def test_a_row_of_no_entries_has_no_softmax_and_a_logsumexp_of_minus_inf():
    """(SciPy raises on a reduced axis of size 0.) An empty row's softmax is empty; its log-sum-exp is the log of an
    empty sum, -inf, as undefined_rows' docstring and the kinds say."""
    x = np.zeros((3, 0), np.float32)
    assert R.softmax(x, dtype="float32").shape == (3, 0)
    assert R.logsumexp(x, dtype="float32").tolist() == [-np.inf] * 3
