"""Case files are recognised by their first bytes and read in full up front: a wrong or damaged one is one line."""

import io
import re
import zipfile

import numpy as np
import pytest

from softaudit.cases import CaseFileError, check_case_file, load_case_file, load_case_files


def npy_bytes(array, allow_pickle=False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def npz_bytes(**members: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buffer.getvalue()


ROWS = npy_bytes(np.arange(12.0).reshape(3, 4))
OBJECTS = npy_bytes(np.array([{"a": 1}], dtype=object), allow_pickle=True)


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("x.npy", b"hello world\n", "x.npy is not a .npy or .npz file (it starts with 'hello world\\n')"),
        ("x.npz", b"", "x.npz is not a .npy or .npz file (it is empty)"),
        ("x.npy", b"\x89PNG\r\n\x1a\n", "x.npy is not a .npy or .npz file (it starts with '\\x89PNG\\r\\n\\x1a\\n')"),
        ("x.npy", OBJECTS, "x.npy holds Python objects, not numbers"),
        ("x.npz", npz_bytes(**{"x.npy": OBJECTS}), "x.npz: x holds Python objects, not numbers"),
        ("x.npz", npz_bytes(**{"x.npy": ROWS})[:-30], "x.npz is a damaged .npz file: File is not a zip file"),
        (
            "x.npz",
            npz_bytes(**{"x.npy": ROWS, "notes.txt": b"hi"}),
            "x.npz holds 'notes.txt', which is not a .npy array",
        ),
        ("x.npz", npz_bytes(**{"a.npy": ROWS}), "x.npz holds neither x nor q, k and v; it has a"),
        ("x.npy", npy_bytes(np.array(["a", "b"])), "x.npy: the array must hold numbers, got dtype <U1"),
        ("x.npy", npy_bytes(np.zeros((2, 2, 2))), "x.npy: expected rows x n, got shape (2, 2, 2)"),
        ("x.npy", npy_bytes(np.zeros((0, 5))), "x.npy: the array is empty (shape (0, 5))"),
    ],
)
def test_a_wrong_or_damaged_file_is_one_line(tmp_path, monkeypatch, name, content, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_bytes(content)
    with pytest.raises(CaseFileError) as error:
        check_case_file(name)
    assert str(error.value) == message
    with pytest.raises(CaseFileError) as error:
        load_case_file(name, "softmax")  # the audit's reader says the same
    assert "allow_pickle" not in str(error.value) and "\n" not in str(error.value)


def test_a_truncated_array_is_damaged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.npy").write_bytes(ROWS[:-8])
    with pytest.raises(CaseFileError) as error:
        check_case_file("x.npy")
    message = str(error.value)  # after the colon: numpy's own words on what is missing
    assert message.startswith("x.npy is damaged: ") and "\n" not in message


def test_missing_files_and_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder.npy").mkdir()
    with pytest.raises(CaseFileError, match=r"^no such case file: missing\.npy$"):
        check_case_file("missing.npy")
    with pytest.raises(CaseFileError, match=r"^folder\.npy is a folder, not a case file$"):
        check_case_file("folder.npy")


def test_a_file_serves_the_kinds_it_fits_and_must_fit_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.npy").write_bytes(ROWS)
    np.savez(tmp_path / "attn.npz", q=np.ones((2, 4)), k=np.ones((3, 4)), v=np.ones((3, 2)))
    check_case_file("rows.npy")
    check_case_file("rows.npy", ["softmax", "masked_softmax"])
    check_case_file("attn.npz", ["attention"])
    found = load_case_files(["rows.npy", "attn.npz"], ["softmax", "attention"])  # each serves the kind it fits
    assert [c.family for c in found["softmax"]] == ["file:rows"] and [c.family for c in found["attention"]] == [
        "file:attn"
    ]
    with pytest.warns(UserWarning, match=r"^softaudit: rows\.npy gives no cases to softmax_grad \(.* needs x and g\)$"):
        found = load_case_files(["rows.npy"], ["softmax", "softmax_grad"], warn=True)  # an audit's mixed kinds
    assert len(found["softmax"]) == 1 and found["softmax_grad"] == []
    with pytest.raises(CaseFileError) as error:
        check_case_file("rows.npy", ["attention"])
    assert str(error.value) == "rows.npy: attention needs a .npz with q, k and v"
    with pytest.raises(CaseFileError) as error:
        check_case_file("attn.npz", ["log_softmax"])
    assert str(error.value) == "attn.npz: a case file for log_softmax needs x; it has k, q, v"


def test_good_files_load_as_before(tmp_path):
    (tmp_path / "rows.npy").write_bytes(ROWS)
    (case,) = load_case_file(tmp_path / "rows.npy", "masked_softmax")
    np.testing.assert_array_equal(case.arrays["x"], np.arange(12.0).reshape(3, 4))
    assert case.family == "file:rows" and case.mask.all()
    np.savez_compressed(tmp_path / "both.npz", x=np.ones((2, 3), np.float16), mask=np.eye(2, 3, dtype=bool))
    (case,) = load_case_file(tmp_path / "both.npz", "masked_softmax")
    assert case.arrays["x"].dtype == np.float64 and case.mask.sum() == 2


@pytest.mark.parametrize(
    "kind, arrays, message",
    [
        (
            "softmax",
            {"x": np.zeros((4, 16)), "mask": np.ones((4, 15), bool)},
            "mask of shape (4, 15) does not broadcast",
        ),
        ("attention", {"q": np.zeros((1, 4, 16)), "k": np.zeros((1, 4, 8)), "v": np.zeros((1, 4, 8))}, "k's last"),
    ],
)
def test_shapes_that_do_not_fit_are_said_with_the_file(tmp_path, monkeypatch, kind, arrays, message):
    """Found when the audit computes the case's reference, and said as the file's mistake: exit 2, its name first."""
    import softaudit

    monkeypatch.chdir(tmp_path)
    np.savez("bad.npz", **arrays)
    target = {
        "softmax": "softaudit.candidates.softmax:max_shifted",
        "attention": "softaudit.candidates.attention:upcast",
    }
    with pytest.raises(ValueError, match="^" + re.escape(f"bad.npz: {message}")):
        softaudit.audit(target[kind], dtypes=["float32"], suite="quick", families=["file:bad"], cases="bad.npz")
