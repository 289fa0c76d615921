"""audit() takes every array a user may give it in a case file: of size 0, 0-d, written from a view that was not
contiguous or not writeable, big-endian, in every dtype. Each audit gives the case file's row, or one line: a
ValueError (softaudit.CaseFileError) naming the file and what is wrong."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import softaudit
from softaudit import reference as R
from tests.reference.test_layouts import LAYOUTS, _dtype, _laid_out


@softaudit.candidate(kind="softmax")
def max_shifted(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype_name=st.sampled_from(R.DTYPE_NAMES), layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**16))
def test_a_row_for_the_case_file_or_one_line_naming_it(tmp_path, dtype_name, layout, seed):
    dtype = _dtype(dtype_name)
    x = R.round_to(np.random.default_rng(seed).standard_normal((2, 5)), dtype)
    x = {"zero_size": x[:0], "zero_d": x.reshape(-1)[0].reshape(())}.get(layout, _laid_out(x, layout))
    path = tmp_path / f"{layout}-{dtype_name}-{seed}.npy"
    np.save(path, x)
    family = f"file:{path.stem}"
    try:
        table = softaudit.audit(
            max_shifted, dtypes=["float32"], cases=[path], families=[family], isolation="none", cache=False
        ).table
    except ValueError as exc:
        message = str(exc)
        assert "\n" not in message and str(path) in message, message
        # (an ml_dtypes array, bfloat16 or float8, comes back from np.save as raw bytes: one line naming the file)
        foreign = x.dtype.kind not in "fiu" or type(x.dtype).__module__.startswith("ml_dtypes")
        assert layout in ("zero_size", "zero_d") or foreign or "ml_dtypes" in repr(x.dtype.type), message
        return
    (row,) = table.to_dict("records")
    assert row["family"] == family and row["verdict"] == "pass", row
