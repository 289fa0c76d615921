"""A reference Result as a kept case holds it (softaudit/prepare.py, written by softaudit/_store.py): every bit,
compactly. err and tier are not kept (no measure reads them); each other array is kept in the smallest of:

* whole;
* sparse (`Sparse`): the elements whose bits differ from a base, as flat indices and values. The base is 0 (lo is 0
  wherever tier A, one float64, decided: nearly everywhere below float64; hi is 0 on whole rows of exact zeros:
  cross-entropy's ignored rows), or for the rounded values hi rounded to the dtype (they differ where hi + lo rounds
  otherwise: about 1 in 5,000 elements);
* by input (`ByInput`): a table over (row, the bits of a 16-bit input at the same place), and the elements that
  differ from their key's entry. A 16-bit dtype has at most 65,536 values, so a row of 32,000 to 262,144 logits
  holds many equal ones, and within a row equal logits have equal softmax, log-softmax, log-sum-exp gradient and
  cross-entropy gradient (but the target's entry, kept apart): cross-entropy's 16-bit gradients take a small
  fraction of their whole form (deflated too). The inputs are the case's own (made again when a kept case is read, and
  checked against their digest), so the keys cost nothing to keep.

Then each of the chosen form's arrays of at least `DEFLATE_MIN` bytes is deflated (zlib, level 1: `Deflated`) where
a sample says that saves at least 15%: cross-entropy's and log-softmax's corrections in float32 and float64
have few distinct exponents. -0.0 and NaNs' payloads come back exactly: the forms compare and restore bits, not
values.
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np

from .reference import Result

#: Arrays of fewer elements are not tried by input (a table's keys would cost about what it saves).
BY_INPUT_MIN = 4096
#: Arrays of fewer bytes are not deflated; a larger one is where its first `DEFLATE_SAMPLE` bytes deflate to at most
#: `DEFLATE_RATIO` of their size (deflating takes about 25 ns a byte: sampling keeps it to what pays).
DEFLATE_MIN, DEFLATE_SAMPLE, DEFLATE_RATIO = 16 << 10, 8 << 10, 0.85


@dataclasses.dataclass(frozen=True)
class Deflated:
    """An array's bytes deflated (zlib)."""

    dtype: np.dtype
    shape: tuple
    data: bytes

    @property
    def nbytes(self) -> int:
        return len(self.data)

    def array(self) -> np.ndarray:
        return np.frombuffer(zlib.decompress(self.data), self.dtype).reshape(self.shape)


@dataclasses.dataclass(frozen=True)
class Sparse:
    """An array as the elements whose bits differ from a base: its shape, their flat indices and their values (each
    array here and in `ByInput` may be `Deflated`)."""

    shape: tuple
    at: np.ndarray  # int32 where the size allows
    values: np.ndarray


@dataclasses.dataclass(frozen=True)
class ByInput:
    """An array as a table over (row, bits of the input `name`) and the elements that differ from it."""

    name: str
    keys: np.ndarray  # the keys present, sorted: row << 16 | bits (rows: every leading axis, flattened)
    table: np.ndarray  # the array's value at the first element of each key
    rest: Sparse  # the elements whose bits differ from their key's value


def pack(ref: Result, inputs: dict) -> tuple:
    """ref as a kept case holds it; inputs: the case's rounded inputs (what a by-input form is keyed on)."""
    hi = np.ascontiguousarray(ref.hi)
    keys = _Keys(inputs, hi.shape)
    value = ref.value
    if value.shape == hi.shape and value.dtype != object and value.dtype.itemsize in (2, 4, 8):
        value = _smallest(value, _rounded(hi, value.dtype))
    fine = None if ref.fine is None else _smallest(ref.fine)
    return value, _smallest(hi, keys=keys), _smallest(ref.lo, keys=keys), fine, ref.undefined


def unpack(packed: tuple, inputs: dict) -> Result:
    """The Result `pack` kept, bit for bit (err and tier size 0, as in a Result without detail); inputs: the same
    case's rounded inputs."""
    value, hi, lo, fine, undefined = packed
    hi = _whole(hi, inputs)
    if isinstance(value, Sparse):
        value = _whole(value, inputs, _rounded(hi, _array(value.values).dtype))
    else:
        value = _array(value)
    lo = _whole(lo, inputs)
    fine = None if fine is None else _whole(fine, inputs)
    none = (0,) * hi.ndim
    return Result(value, hi, lo, np.zeros(none), np.zeros(none, np.int8), undefined, fine)


def nbytes(kept) -> int:
    """The bytes a kept array holds."""
    if isinstance(kept, Sparse):
        return kept.at.nbytes + kept.values.nbytes
    if isinstance(kept, ByInput):
        return kept.keys.nbytes + kept.table.nbytes + nbytes(kept.rest)
    return kept.nbytes


def _rounded(hi: np.ndarray, dtype) -> np.ndarray:
    """hi rounded to the dtype (overflowing to inf as the correctly rounded values do)."""
    with np.errstate(all="ignore"):
        return hi.astype(dtype)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(f"u{a.dtype.itemsize}")


def _smallest(a: np.ndarray, base: np.ndarray | None = None, keys: _Keys | None = None):
    """a in the smallest form: whole, sparse against base (0 where None), or by one of keys' inputs; deflated."""
    a = np.ascontiguousarray(a)
    forms = [a, _sparse(a, base), *(keys.tables(a) if keys else ())]
    return _deflate(min(forms, key=nbytes))


def _deflate(form):
    """form with each of its arrays deflated where that pays (`DEFLATE_MIN`)."""
    if isinstance(form, Sparse):
        return dataclasses.replace(form, at=_deflate(form.at), values=_deflate(form.values))
    if isinstance(form, ByInput):
        return dataclasses.replace(form, keys=_deflate(form.keys), table=_deflate(form.table), rest=_deflate(form.rest))
    if form.nbytes < DEFLATE_MIN:
        return form
    raw = np.ascontiguousarray(form).reshape(-1).view(np.uint8)
    if len(zlib.compress(raw[:DEFLATE_SAMPLE], 1)) > DEFLATE_RATIO * DEFLATE_SAMPLE:
        return form
    data = zlib.compress(raw, 1)
    return Deflated(form.dtype, form.shape, data) if len(data) < form.nbytes else form


def _sparse(a: np.ndarray, base: np.ndarray | None) -> Sparse:
    at = np.flatnonzero(_bits(a) != (0 if base is None else _bits(base)))
    return Sparse(a.shape, at.astype(np.int32) if a.size < 2**31 else at, a.reshape(-1)[at])


def _whole(kept, inputs: dict, base: np.ndarray | None = None) -> np.ndarray:
    """The array kept in any form (base: a sparse form's base, None for 0)."""
    if isinstance(kept, ByInput):
        at = _positions(_array(kept.keys), _row_keys(inputs[kept.name]))
        return _whole(kept.rest, inputs, _array(kept.table)[at].reshape(kept.rest.shape))
    if not isinstance(kept, Sparse):
        return _array(kept)
    out = np.zeros(kept.shape, kept.values.dtype) if base is None else base
    _bits(out)[_array(kept.at)] = _bits(_array(kept.values))
    return out


def _positions(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Where each of `wanted` is in the sorted `keys` (each is there): through an index over every (row, bits)
    where that is at most 8 entries an element (rows of at least 8,192, where it is far faster than searching),
    else by binary search."""
    if wanted.size and (int(wanted[-1]) >> 16) + 1 <= wanted.size >> 13:
        index = np.empty(((int(wanted[-1]) >> 16) + 1) << 16, np.int32)
        index[keys] = np.arange(keys.size, dtype=np.int32)
        return index[wanted]
    return np.searchsorted(keys, wanted)


def _array(kept) -> np.ndarray:
    return kept.array() if isinstance(kept, Deflated) else kept


def _row_keys(x: np.ndarray) -> np.ndarray:
    """row << 16 | the bits of each element of a 16-bit array, flat (rows: every axis but the last, flattened)."""
    bits = np.ascontiguousarray(x).view(np.uint16).reshape(-1, x.shape[-1]).astype(np.int64)
    bits |= np.arange(bits.shape[0], dtype=np.int64)[:, None] << 16
    return bits.reshape(-1)


class _Keys:
    """The 16-bit inputs of an output's shape that a by-input form may key on, each one's keys sorted once (hi and lo
    share them)."""

    def __init__(self, inputs: dict, shape: tuple):
        self.inputs = {
            name: x
            for name, x in sorted(inputs.items())
            if x.shape == shape and x.ndim and x.dtype.itemsize == 2 and x.size >= BY_INPUT_MIN
        }
        self._sorted = {}

    def tables(self, a: np.ndarray) -> list[ByInput]:
        return [self._table(name, a) for name in self.inputs]

    def _table(self, name: str, a: np.ndarray) -> ByInput:
        if name not in self._sorted:
            self._sorted[name] = np.unique(_row_keys(self.inputs[name]), return_index=True, return_inverse=True)
        keys, first, inverse = self._sorted[name]
        table = a.reshape(-1)[first]
        compact = keys.astype(np.int32) if keys.size and keys[-1] < 2**31 else keys
        return ByInput(name, compact, table, _sparse(a, table[inverse].reshape(a.shape)))
