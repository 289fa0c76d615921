"""What the audit finds in the real frameworks: the facts docs/frameworks.md publishes, checked on every CI run."""

import numpy as np
import pytest

import softaudit


def audit(target, dtypes, families, suite="quick"):
    table = softaudit.audit(target, dtypes=dtypes, suite=suite, families=families).table
    return {(r.candidate, r.dtype, r.family): r for r in table.itertuples()}


def test_torch_softmax_passes_every_family_in_16_bit_and_float32():
    pytest.importorskip("torch")
    table = softaudit.audit(
        "softaudit.frameworks.torch:softmax", dtypes=["float16", "bfloat16", "float32"], suite="quick"
    ).table
    assert (table.verdict == "pass").all(), table[table.verdict != "pass"][["dtype", "family", "note"]]


def test_torch_fully_masked_rows_and_nan_inputs():
    pytest.importorskip("torch")
    # (the forward candidates only: the gradients' facts are in tests/gradients/test_frameworks.py)
    forward = [
        f"softaudit.frameworks.torch:{n}"
        for n in ("masked_fill_neginf", "masked_fill_finfo_min", "sdpa_bool_math", "softmax")
    ]
    rows = audit(forward, ["float32"], ["fully_masked", "attn_masks", "undefined"])
    assert rows[("torch.masked_fill_neginf", "float32", "fully_masked")].fully_masked == "nan"
    assert rows[("torch.masked_fill_finfo_min", "float32", "fully_masked")].fully_masked == "uniform"
    assert rows[("torch.sdpa_bool_math", "float32", "attn_masks")].fully_masked == "zeros"
    assert rows[("torch.softmax", "float32", "undefined")].nan_not_propagated == 0


def test_torch_skips_what_it_cannot_do():
    pytest.importorskip("torch")
    table = softaudit.audit(
        "softaudit.frameworks.torch:softmax", dtypes=["float8_e4m3fn"], suite="quick", families=["gaussian"]
    ).table
    assert (table.verdict == "skip").all() and table.note.str.contains("not implemented").all()
    efficient = softaudit.audit(
        "softaudit.frameworks.torch:sdpa_bool_efficient", dtypes=["float32"], suite="quick", families=["attn_gaussian"]
    ).table
    assert (efficient.verdict == "skip").all()  # no CPU kernel


@pytest.mark.parametrize(
    "target",
    [
        "softaudit.frameworks.torch:log_softmax",
        "softaudit.frameworks.jax:log_softmax",
        "softaudit.frameworks.scipy:log_softmax",
    ],
)
def test_log_softmax_of_a_dominant_entry_loses_its_digits(target):
    pytest.importorskip(target.split(".")[2].split(":")[0])
    (row,) = softaudit.audit(target, dtypes=["float32"], suite="quick", families=["dominant"]).table.itertuples()
    assert row.verdict == "warn" and row.cause == "absorbed" and row.max_ulp > 1e3  # as the plain form: a trade-off


def test_logsumexp_of_a_subnormal_result():
    pytest.importorskip("torch")
    pytest.importorskip("scipy")
    torch_row = audit("softaudit.frameworks.torch:logsumexp", ["float32"], ["subnormal"])[
        ("torch.logsumexp", "float32", "subnormal")
    ]
    scipy_row = audit("softaudit.frameworks.scipy:logsumexp", ["float32"], ["subnormal"])[
        ("scipy.special.logsumexp", "float32", "subnormal")
    ]
    assert (
        torch_row.verdict == "warn" and torch_row.underflow > 0 and torch_row.cause == "absorbed"
    )  # log(1 + tiny) = 0
    assert scipy_row.verdict == "pass"


def test_jax_flushes_subnormal_results_and_its_attention_averages_masked_values():
    pytest.importorskip("jax")
    forward = [f"softaudit.frameworks.jax:{n}" for n in ("softmax", "softmax_where", "dot_product_attention")]
    rows = audit(forward, ["float32"], ["subnormal", "fully_masked", "attn_masks"])
    assert rows[("jax.nn.softmax", "float32", "subnormal")].underflow > 0
    assert rows[("jax.nn.softmax_where", "float32", "fully_masked")].fully_masked == "zeros"
    masks = rows[("jax.nn.dot_product_attention", "float32", "attn_masks")]
    # Its fully masked queries average the masked values: judged by the fully-masked rule (they are not counted
    # again as a leak, which covers queries with something kept).
    assert masks.verdict == "fail" and masks.fully_masked == "other" and masks.mask_leak == 0


def test_scipy_logsumexp_on_a_dtype_numpy_rejects_is_a_skip_with_the_reason():
    """numpy 2.4's np.isdtype rejects ml_dtypes' bfloat16, which scipy.special.logsumexp asks about: a dtype the
    framework cannot take is a skip naming it, not an error row (float16 still runs)."""
    pytest.importorskip("scipy")
    import ml_dtypes

    from softaudit.frameworks import scipy as sp

    x = np.array([[0.0, 1.0, 2.0]])
    assert np.isfinite(sp.logsumexp(x.astype(np.float16))).all()
    try:
        sp.logsumexp(x.astype(ml_dtypes.bfloat16))
    except softaudit.CandidateSkip as skip:
        assert "bfloat16" in str(skip)
    # (an older numpy takes it: then SciPy computes, and there is nothing to skip)
