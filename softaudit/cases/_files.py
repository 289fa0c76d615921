"""User case files: `.npy` (rows x n) for the row kinds; `.npz` with x and mask, or q, k, v and mask."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..adapters._candidate import check_kind
from ._case import Case


class CaseFileError(ValueError):
    """A case file that cannot be used: the message is one line for the user."""


def _floats(name, value, path) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "fiu":
        raise CaseFileError(f"{path}: {name} must hold numbers, got dtype {arr.dtype}")
    return arr.astype(np.float64)


def load_case_file(path, kind: str) -> list[Case]:
    """The cases a file holds for `kind`, as one family named after the file."""
    check_kind(kind)
    path = Path(path)
    family = f"file:{path.stem}"
    if not path.is_file():
        raise CaseFileError(f"no such case file: {path}")
    try:
        data = np.load(path, allow_pickle=False)
    except Exception as exc:
        raise CaseFileError(f"{path} is not a .npy or .npz file numpy can read: {exc}") from None
    if isinstance(data, np.ndarray):
        if kind == "attention":
            raise CaseFileError(f"{path}: attention needs a .npz with q, k and v")
        x = _floats("the array", data, path)
        if x.ndim != 2:
            raise CaseFileError(f"{path}: expected rows x n, got shape {x.shape}")
        mask = None if kind != "masked_softmax" else np.ones(x.shape, bool)
        return [Case(kind, family, {"x": x}, mask, None, str(path))]
    with data:
        names = set(data.files)
        needed = {"q", "k", "v"} if kind == "attention" else {"x"}
        if not needed <= names:
            raise CaseFileError(f"{path}: a {kind} case file needs {', '.join(sorted(needed))}; it has {', '.join(sorted(names)) or 'nothing'}")
        arrays = {name: _floats(name, data[name], path) for name in sorted(needed)}
        mask = data["mask"] if "mask" in names else None
    if mask is not None and mask.dtype != np.bool_:
        raise CaseFileError(f"{path}: mask must be boolean (True = keep), got dtype {mask.dtype}")
    if kind == "masked_softmax" and mask is None:
        mask = np.ones(arrays["x"].shape, bool)
    if kind != "attention" and arrays["x"].ndim != 2:
        raise CaseFileError(f"{path}: expected x of rows x n, got shape {arrays['x'].shape}")
    return [Case(kind, family, arrays, mask, None, str(path))]
