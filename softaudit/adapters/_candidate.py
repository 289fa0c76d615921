"""The Candidate contract and the decorator that marks a function as one."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

#: Kinds and their numpy calling conventions (masks are boolean, True = keep / may attend).
KINDS = {
    "softmax": "f(x, axis=-1)",
    "log_softmax": "f(x, axis=-1)",
    "logsumexp": "f(x, axis=-1)",
    "masked_softmax": "f(x, mask, axis=-1)",
    "attention": "f(q, k, v, mask=None)",
}
_MARK = "__softaudit_candidate__"


@dataclasses.dataclass(frozen=True)
class Candidate:
    """An implementation under audit: what it computes (kind), what the table calls it, and how to call it."""

    kind: str
    name: str
    call: Callable
    framework: str = "numpy"  # numpy, torch or jax: the adapter converts arrays to its tensors and back
    device: str | None = None  # torch: "cpu" (default) or "cuda"
    source: str | None = None  # the target that loads it again ("pkg.mod:func", "file.py:func"); None if none does

    @property
    def summary(self) -> str:
        """The first line of the function's docstring."""
        doc = (getattr(self.call, "__doc__", None) or "").strip()
        return doc.splitlines()[0] if doc else ""


def check_kind(kind) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
    return kind


def candidate(fn: Callable | None = None, *, kind: str, name: str | None = None, framework: str = "numpy",
              device: str | None = None):  # fmt: skip
    """Mark `fn` as a candidate of `kind`; `softaudit run module` then audits every marked function in it.

    Usable as @candidate(kind="softmax") or candidate(fn, kind="softmax"). The function is returned unchanged.
    framework="torch" or "jax": the function gets that framework's tensors (same dtype, bit for bit) and returns
    one; device= places torch tensors ("cpu" by default, "cuda").
    """
    check_kind(kind)
    if framework not in ("numpy", "torch", "jax"):
        raise ValueError(f"unknown framework {framework!r}; known: numpy, torch, jax")

    def mark(f: Callable) -> Callable:
        setattr(f, _MARK, (kind, name, framework, device))
        return f

    return mark if fn is None else mark(fn)


def marking(fn) -> tuple[str, str | None, str, str | None] | None:
    """The (kind, name, framework, device) a function was marked with, or None."""
    return getattr(fn, _MARK, None)
