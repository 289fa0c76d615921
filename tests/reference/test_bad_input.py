"""Bad input: one clear TypeError or ValueError that names the argument."""

import numpy as np
import pytest

from softaudit import reference as R

X = np.zeros((2, 3))


@pytest.mark.parametrize(
    "value, dtype_name",
    [
        (np.zeros(3, np.int32), "int32"),
        (np.zeros(3, np.complex128), "complex128"),
        (np.array([1.0, "a"], dtype=object), "object"),
        (np.zeros(3, bool), "bool"),
    ],
)
def test_non_float_x_is_a_type_error_naming_x(value, dtype_name):
    with pytest.raises(TypeError, match=f"x must be a floating-point array, got dtype {dtype_name}"):
        R.softmax(value)


def test_non_boolean_mask_is_a_type_error():
    with pytest.raises(TypeError, match="mask must be a boolean array"):
        R.masked_softmax(X, np.ones((2, 3)))


def test_a_masked_kind_without_a_mask_is_a_type_error_by_name_and_by_evaluate():
    for call in (
        lambda: R.masked_softmax(X, None),
        lambda: R.evaluate("masked_softmax", X),
        lambda: R.masked_softmax_grad(X, None, X),
        lambda: R.evaluate_grad("masked_softmax_grad", X, X),
    ):
        with pytest.raises(TypeError, match=r"masked_softmax(_grad)? needs a mask"):
            call()


def test_mask_shape_mismatch_is_a_value_error():
    with pytest.raises(ValueError, match=r"mask of shape \(4,\) does not broadcast to \(2, 3\)"):
        R.masked_softmax(X, np.ones(4, bool))


def test_axis_out_of_range_and_not_an_integer():
    with pytest.raises(ValueError, match="axis 2 is out of range for x with 2 dimension"):
        R.softmax(X, axis=2)
    with pytest.raises(TypeError, match="axis must be an integer"):
        R.softmax(X, axis=1.0)
    with pytest.raises(ValueError, match="x must have at least 1 dimension"):
        R.softmax(np.float64(1.0))


def test_unknown_dtype_kind_method_and_prec():
    with pytest.raises(ValueError, match="unknown dtype 'float13'"):
        R.softmax(X, dtype="float13")
    with pytest.raises(ValueError, match="kind must be one of"):
        R.evaluate("sparsemax", X)
    with pytest.raises(ValueError, match="method must be one of auto, mpmath"):
        R.softmax(X, method="fast")
    with pytest.raises(ValueError, match="prec must be an integer >= 2"):
        R.softmax(X, prec=1)


def test_attention_shape_and_argument_errors():
    q, k, v = np.zeros((4, 8)), np.zeros((5, 8)), np.zeros((5, 2))
    with pytest.raises(ValueError, match=r"k's last dimension \(7\) must equal q's \(8\)"):
        R.attention(q, np.zeros((5, 7)), v)
    with pytest.raises(ValueError, match=r"v must have as many rows as k \(5\)"):
        R.attention(q, k, np.zeros((6, 2)))
    with pytest.raises(ValueError, match="do not broadcast"):
        R.attention(np.zeros((2, 4, 8)), np.zeros((3, 5, 8)), v)
    with pytest.raises(ValueError, match=r"mask of shape \(4, 6\) does not broadcast to \(4, 5\)"):
        R.attention(q, k, v, np.ones((4, 6), bool))
    with pytest.raises(TypeError, match="mask must be a boolean array"):
        R.attention(q, k, v, np.ones((4, 5)))
    with pytest.raises(TypeError, match="q must be a floating-point array"):
        R.attention(np.zeros((4, 8), np.int64), k, v)
    with pytest.raises(ValueError, match="q must have at least 2 dimension"):
        R.attention(np.zeros(8), k, v)
    with pytest.raises(ValueError, match="scale must be finite"):
        R.attention(q, k, v, scale=float("inf"))
    with pytest.raises(TypeError, match="scale must be a real number"):
        R.attention(q, k, v, scale="0.5")
    with pytest.raises(ValueError, match="d = 0"):
        R.attention(np.zeros((4, 0)), np.zeros((5, 0)), v)
