"""Families are seeded and deterministic, cover what they say, and user case files load or say why not."""

import numpy as np
import pytest

from softaudit import cases, reference
from softaudit.cases import CaseFileError, load_case_file


def test_every_kind_has_families_and_they_are_deterministic():
    fmt = reference.format_of("float16")
    for kind in ("softmax", "log_softmax", "logsumexp", "masked_softmax", "attention"):
        fams = cases.families_for(kind)
        assert len(fams) >= 5
        for fam in fams:
            a, b = fam.cases(kind, fmt, "quick"), fam.cases(kind, fmt, "quick")
            for ca, cb in zip(a, b):
                for name in ca.arrays:
                    np.testing.assert_array_equal(ca.arrays[name], cb.arrays[name])


def test_default_suite_has_long_rows_and_long_sequences():
    fmt = reference.format_of("float32")
    lengths = {c.arrays["x"].shape[1] for c in cases.FAMILIES["long"].cases("softmax", fmt, "default")}
    assert max(lengths) == 65536
    long_attention = cases.FAMILIES["attn_long"].cases("attention", fmt, "default")
    assert max(c.arrays["k"].shape[0] for c in long_attention) == 4096


def test_subnormal_family_lands_in_the_subnormal_range():
    for dtype in ("float16", "float32"):
        fmt = reference.format_of(dtype)
        (case,) = cases.FAMILIES["subnormal"].cases("softmax", fmt, "quick")
        x = reference.round_to(case.arrays["x"], dtype)
        p = reference.softmax(x, dtype=dtype).astype(np.float64)[:, 1:]
        tiny = 2.0**fmt.emin
        assert ((p > 0) & (p < tiny)).mean() > 0.5


def test_case_files(tmp_path):
    rows = tmp_path / "rows.npy"
    np.save(rows, np.arange(12.0).reshape(3, 4))
    (case,) = load_case_file(rows, "softmax")
    assert case.family == "file:rows" and case.arrays["x"].shape == (3, 4)
    attn = tmp_path / "attn.npz"
    np.savez(attn, q=np.ones((2, 4)), k=np.ones((3, 4)), v=np.ones((3, 2)), mask=np.ones((2, 3), bool))
    (case,) = load_case_file(attn, "attention")
    assert case.mask.shape == (2, 3)


@pytest.mark.parametrize(
    "content, kind, message",
    [
        ("npy3d", "softmax", "expected rows x n"),
        ("npz_no_x", "softmax", "needs x; it has q"),
        ("npz_float_mask", "masked_softmax", "mask must be boolean"),
        ("text", "softmax", "not a .npy or .npz file"),
        ("npy", "attention", "attention needs a .npz"),
    ],
)
def test_malformed_case_files_get_one_clear_message(tmp_path, content, kind, message):
    path = tmp_path / ("case.npz" if content.startswith("npz") else "case.npy")
    if content == "npy3d":
        np.save(path, np.zeros((2, 2, 2)))
    elif content == "npy":
        np.save(path, np.zeros((2, 2)))
    elif content == "npz_no_x":
        np.savez(path, q=np.zeros(2))
    elif content == "npz_float_mask":
        np.savez(path, x=np.zeros((2, 2)), mask=np.zeros((2, 2)))
    else:
        path.write_text("not numpy")
    with pytest.raises(CaseFileError, match=message):
        load_case_file(path, kind)
    with pytest.raises(CaseFileError, match="no such case file"):
        load_case_file(tmp_path / "missing.npy", kind)


def test_the_masked_kinds_run_undefined_rows_and_masked_nan_that_the_output_must_not_see():
    """Kept NaN, +inf and all -inf rows are undefined (NaN expected, as for softmax); with the NaN and the +inf masked
    out the rows are defined, and a mask added to the logits (NaN + -1e9 is NaN, inf - 1e9 - inf too) gives NaN
    where `where` passes."""
    import softaudit

    for kind in ("masked_softmax", "masked_softmax_grad"):
        assert "undefined" in [f.name for f in cases.families_for(kind)], kind
    kept, hidden = cases.FAMILIES["undefined"].cases("masked_softmax", reference.format_of("float32"), "quick")
    assert kept.mask.all() and np.isnan(kept.arrays["x"][0, 1]) and np.isinf(kept.arrays["x"][1, 2])
    assert not hidden.mask[0, 1] and not hidden.mask[1, 2] and hidden.mask.sum() == hidden.mask.size - 2
    assert reference.undefined_rows(kept.arrays["x"], kept.mask).all()
    assert not reference.undefined_rows(hidden.arrays["x"], hidden.mask).any()

    @softaudit.candidate(kind="masked_softmax")
    def additive(x, mask, axis=-1):
        w = (x.astype(np.float32) + np.where(mask, 0, -1e9)).astype(np.float32)
        e = np.exp(w - w.max(axis=axis, keepdims=True))
        return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)

    targets = [additive, "softaudit.candidates.masked_softmax:where"]
    table = softaudit.audit(targets, dtypes=["float32"], suite="quick", families=["undefined"], isolation="none").table
    best, added = (table[table.candidate.str.endswith(name)].iloc[0] for name in ("where", "additive"))
    assert best.verdict == "pass" and best.undefined_rows == 3
    assert added.verdict != "pass" and added.nan == 2 * hidden.arrays["x"].shape[1], added.note  # (every output)
