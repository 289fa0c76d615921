"""User case files: `.npy` (rows x n) for the forward row kinds; `.npz` with a kind's inputs by name (x, and mask
for the masked kinds; q, k and v, and a mask, for attention; g too for the gradients).

A file is recognised by its first bytes, not its name, and read with our own checks around numpy's readers, so a
wrong or damaged file gets one line saying what it is (text, Python objects, a truncated array), never numpy's
advice about allow_pickle.
"""

from __future__ import annotations

import io
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np

from .. import kinds as _kinds
from ..adapters import check_kind
from ._case import Case

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"  # an .npz is a zip of .npy files
_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


class CaseFileError(ValueError):
    """A case file that cannot be used: the message is one line for the user."""


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _npy(f, label: str) -> np.ndarray:
    """One .npy array read in full from the open binary file `f`. Its header is read first, so an array of Python
    objects is refused by its dtype before anything would be unpickled."""
    try:
        header = _HEADERS.get(np.lib.format.read_magic(f))
        if header is not None and header(f)[2].hasobject:
            raise CaseFileError(f"{label} holds Python objects, not numbers")
        f.seek(0)
        return np.lib.format.read_array(f, allow_pickle=False)
    except CaseFileError:
        raise
    except (ValueError, OSError, EOFError) as exc:
        raise CaseFileError(f"{label} is damaged: {_one_line(exc)}") from None


def _npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an .npz, read in full (a truncated or corrupt member is found now, not when it is used)."""
    arrays = {}
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if info.is_dir():
                    continue
                if not info.filename.endswith(".npy"):
                    raise CaseFileError(f"{path} holds {info.filename!r}, which is not a .npy array")
                name = info.filename[: -len(".npy")]
                arrays[name] = _npy(io.BytesIO(z.read(info)), f"{path}: {name}")
    except CaseFileError:
        raise
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, OSError, EOFError) as exc:
        raise CaseFileError(f"{path} is a damaged .npz file: {_one_line(exc)}") from None
    return arrays


def _read(path: Path) -> np.ndarray | dict[str, np.ndarray]:
    """What the file holds, read in full: one array (.npy) or named arrays (.npz), told apart by the first bytes."""
    if not path.exists():
        raise CaseFileError(f"no such case file: {path}")
    if not path.is_file():
        raise CaseFileError(f"{path} is a folder, not a case file")
    try:
        with open(path, "rb") as f:
            head = f.read(16)
            if head.startswith(NPY_MAGIC):
                f.seek(0)
                return _npy(f, str(path))
    except OSError as exc:
        raise CaseFileError(f"{path} cannot be read: {exc.strerror or _one_line(exc)}") from None
    if head.startswith(ZIP_MAGIC):
        return _npz(path)
    # latin-1 turns every byte into one character, and repr() escapes the unprintable ones: always one line
    start = f"it starts with {head.decode('latin-1')!r}" if head else "it is empty"
    raise CaseFileError(f"{path} is not a .npy or .npz file ({start})")


def _floats(name, value, path) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "fiu":
        raise CaseFileError(f"{path}: {name} must hold numbers, got dtype {arr.dtype}")
    if arr.size == 0:
        raise CaseFileError(f"{path}: {name} is empty (shape {arr.shape})")
    return arr.astype(np.float64)


def _listed(names) -> str:
    """ "q, k and v"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _cases(data, path: Path, kind: str) -> list[Case]:
    """The cases that what a file holds (`_read`) gives for `kind`, as one family named after the file."""
    family = f"file:{path.stem}"
    of = _kinds.get(kind)
    if isinstance(data, np.ndarray):
        if of.inputs != ("x",):
            raise CaseFileError(f"{path}: {kind} needs a .npz with {_listed(of.inputs)}")
        x = _floats("the array", data, path)
        if x.ndim != 2:
            raise CaseFileError(f"{path}: expected rows x n, got shape {x.shape}")
        mask = None if not of.mask_required else np.ones(x.shape, bool)
        return [Case(kind, family, {"x": x}, mask, None, str(path))]
    names = set(data)
    needed = set(of.inputs)
    if not needed <= names:
        raise CaseFileError(
            f"{path}: a case file for {kind} needs {', '.join(sorted(needed))}; "
            f"it has {', '.join(sorted(names)) or 'nothing'}"
        )
    arrays = {name: _floats(name, data[name], path) for name in sorted(needed)}
    mask = data.get("mask")
    if mask is not None and mask.dtype != np.bool_:
        raise CaseFileError(f"{path}: mask must be boolean (True = keep), got dtype {mask.dtype}")
    if of.mask_required and mask is None:
        mask = np.ones(arrays["x"].shape, bool)
    if of.row_wise and arrays["x"].ndim != 2:
        raise CaseFileError(f"{path}: expected x of rows x n, got shape {arrays['x'].shape}")
    return [Case(kind, family, arrays, mask, None, str(path))]


def _serves(data, kind: str) -> bool:
    """Whether what a file holds can be cases of `kind`: its inputs (x, or a bare .npy, for the row kinds; q, k and v
    for attention)."""
    inputs = _kinds.get(kind).inputs
    if isinstance(data, np.ndarray):
        return inputs == ("x",)
    return set(inputs) <= set(data)


def load_case_files(files, kinds, warn: bool = False) -> dict[str, list[Case]]:
    """kind -> the cases of every file that serves it, each file read once and checked in full.

    A file serves the kinds its arrays fit (a .npy of rows serves the forward row kinds, not attention nor the
    gradients, which need g); one that serves none of `kinds` is a CaseFileError saying why for the first of them,
    one that serves some a warning naming the others and what they need.
    """
    kinds = [check_kind(kind) for kind in kinds]
    found: dict[str, list[Case]] = {kind: [] for kind in kinds}
    for path in map(Path, files):
        data = _read(path)
        usable = [kind for kind in kinds if _serves(data, kind)]
        if not usable and len(kinds) > 1 and isinstance(data, dict):
            raise CaseFileError(f"{path} holds neither x nor q, k and v; it has {', '.join(sorted(data)) or 'nothing'}")
        if warn and usable and len(usable) < len(kinds):
            others = [kind for kind in kinds if kind not in usable]
            needs = "; ".join(f"{kind} needs {_listed(_kinds.get(kind).inputs)}" for kind in others)
            warnings.warn(f"softaudit: {path} gives no cases to {', '.join(others)} ({needs})", stacklevel=2)
        usable = usable or kinds[:1]  # (its own reason, for the one kind asked)
        for kind in usable:
            found[kind] += _cases(data, path, kind)
    return found


def check_case_file(path, kinds=()) -> None:
    """Read a case file in full and check it for the kinds it serves among `kinds` (none given: every kind);
    raise CaseFileError with one line when it is unreadable, malformed, or serves none of them."""
    load_case_files([path], kinds or list(_kinds.KINDS))


def load_case_file(path, kind: str) -> list[Case]:
    """The cases a file holds for `kind`, as one family named after the file."""
    return load_case_files([path], [kind])[kind]
