"""Arrays reach the frameworks bit for bit and come back the same; a missing framework says how to install it."""

import ml_dtypes
import numpy as np
import pytest

from softaudit.adapters import _bridge
from softaudit.adapters._targets import TargetError, load_target

DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]


def _values(dtype):
    rng = np.random.default_rng(0)
    raw = np.concatenate(
        [rng.standard_normal(200) * 10.0 ** rng.integers(-3, 3, 200), [0.0, -0.0, np.inf, -np.inf, np.nan]]
    )
    with np.errstate(over="ignore"):
        return raw.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_round_trip_is_bit_for_bit(dtype):
    pytest.importorskip("torch")
    arr = _values(dtype)
    back = _bridge.from_torch(_bridge.to_torch(arr, None))
    assert back.dtype == arr.dtype
    assert back.tobytes() == arr.tobytes()


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_jax_round_trip_is_bit_for_bit_in_64_bit_mode(dtype):
    pytest.importorskip("jax")
    arr = _values(dtype)
    with _bridge.context("jax"):
        back = _bridge.from_jax(_bridge.to_jax(arr, None))
    assert back.dtype == arr.dtype and back.tobytes() == arr.tobytes()


def test_a_missing_framework_is_one_line_with_the_install_hint(tmp_path):
    from softaudit.frameworks._need import need

    with pytest.raises(ImportError, match=r"no_such_framework_xyz is not installed: pip install 'softaudit\[xyz\]'"):
        need("no_such_framework_xyz", "xyz")
    target = tmp_path / "uses_missing.py"
    target.write_text("from softaudit.frameworks._need import need\nneed('no_such_framework_xyz', 'xyz')\n")
    with pytest.raises(TargetError, match="pip install 'softaudit\\[xyz\\]'"):
        load_target(str(target))


def test_torch_takes_int64_targets_and_0_d_arrays_as_they_are():
    torch = pytest.importorskip("torch")
    target = _bridge.to_torch(np.array([3, -100, 0], np.int64), None)
    assert target.dtype == torch.int64 and target.tolist() == [3, -100, 0]
    g = _bridge.to_torch(np.array(0.5, ml_dtypes.bfloat16), None)  # a mean's upstream gradient: a scalar, not (1,)
    assert g.shape == () and g.dtype == torch.bfloat16 and float(g) == 0.5
    assert _bridge.from_torch(g).shape == ()
