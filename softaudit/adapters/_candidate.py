"""The Candidate contract and the decorator that marks a function as one."""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable, Mapping

from .. import kinds as _kinds
from . import _bridge

_MARK = "__softaudit_candidate__"


@dataclasses.dataclass(frozen=True)
class Candidate:
    """An implementation under audit: what it computes (kind), what the table calls it, and how to call it."""

    kind: str
    name: str
    call: Callable
    framework: str = "numpy"  # numpy, torch, jax or triton (torch tensors): the adapter converts arrays and back
    device: str | None = None  # torch, jax: "cpu", "cuda", "cuda:N" or "gpu"; None: the run's (default the CPU)
    source: str | None = None  # the target that loads it again ("pkg.mod:func", "file.py:func"); None if none does
    #: The conventions it implements where a kind has several (attention's causal and window alignment: "top_left"
    #: or "bottom_right"), as sorted (name, value) pairs (a dict is taken too): each case setting one is judged
    #: against its declared convention's exact result; () judges every case against the kind's defaults.
    conventions: tuple = ()

    def __post_init__(self):
        if self.conventions:  # (checked, and the same declaration always the same pairs)
            object.__setattr__(self, "conventions", _kinds.get(self.kind).declaration(self.conventions))

    @property
    def summary(self) -> str:
        """The first line of the function's docstring."""
        call = self.call.func if isinstance(self.call, functools.partial) else self.call  # (not partial's own doc)
        doc = (getattr(call, "__doc__", None) or "").strip()
        return doc.splitlines()[0] if doc else ""


def check_kind(kind) -> str:
    """`kind` if it is a known kind's name; ValueError in one line otherwise."""
    return _kinds.get(kind).name


@dataclasses.dataclass(frozen=True)
class Mark:
    """What @candidate records on a callable. owner: the module whose top-level code marked it, the module it
    is a candidate of (see `marking_module`)."""

    kind: str
    name: str | None
    framework: str
    device: str | None
    owner: str | None
    conventions: tuple = ()


def candidate(
    fn: Callable | None = None,
    *,
    kind: str,
    name: str | None = None,
    framework: str = "numpy",
    device: str | None = None,
    conventions: Mapping[str, str] | None = None,
    scheme=None,
):
    """Mark `fn`, any callable, as a candidate of `kind`; `softaudit run module` then audits every candidate
    marked at the module's top level, a factory's products included.

    Usable as @candidate(kind="softmax") or candidate(fn, kind="softmax"). The callable is returned unchanged
    when it can take an attribute (a function, a functools.partial, most callable objects); otherwise (a builtin
    such as math.exp, a bound method), or when another module marked it already, a thin function that calls it,
    with its name and docstring, is returned instead: use the returned value.
    framework="torch" or "jax": the function gets that framework's tensors (same dtype, bit for bit) and returns
    one; "triton": torch tensors, for a function launching Triton kernels, run on the GPU as it is and on the CPU
    in Triton's interpreter made faithful to a GPU's rounding (docs/triton.md); device= pins them to a device
    ("cpu", "cuda", "cuda:N"; None: the run's device, default the CPU).
    conventions= declares the conventions it implements where the kind has several, as documented: attention's
    {"causal": "top_left", "window": "top_left"} (key j against query i itself, as jax.nn.dot_product_attention
    and PyTorch SDPA's is_causal) or "bottom_right" (the default, FlashAttention's); a case setting causal or a
    window is then judged against the exact result of the declared alignment (docs/policy.md).
    scheme= declares an FP8 attention kernel's scheme (kind="attention_fp8": "fa3", "p_bf16", "float32" or a
    mapping of p, offset, rowsum; docs/fp8.md), the convention `scheme`; a function marked with
    softaudit.fp8.declare first gives its own.
    """
    check_kind(kind)
    if framework not in _bridge.FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}; known: {', '.join(_bridge.FRAMEWORKS)}")
    declared = _kinds.get(kind).declaration(_with_scheme(kind, conventions, scheme))
    owner = marking_module()

    def mark(f: Callable) -> Callable:
        if not callable(f):
            raise TypeError(f"a candidate must be callable, got {type(f).__name__}")
        marked = getattr(f, "__softaudit_fp8_scheme__", None)  # (softaudit.fp8.declare)
        own = declared
        if scheme is None and marked is not None and "scheme" in _kinds.get(kind).declarable:
            own = _kinds.get(kind).declaration(_with_scheme(kind, dict(declared), marked))
        made = Mark(kind, name, framework, device, owner, own)
        earlier = marking(f)
        if earlier is None or earlier.owner == owner:  # (never re-mark a function another module marked)
            try:
                setattr(f, _MARK, made)
                return f
            except (AttributeError, TypeError):
                pass

        @functools.wraps(f)
        def thin(*args, **kwargs):
            return f(*args, **kwargs)

        setattr(thin, _MARK, made)
        return thin

    return mark if fn is None else mark(fn)


def _with_scheme(kind: str, conventions, scheme) -> dict | None:
    """The conventions with a declared FP8 scheme among them, as its key ("fa3"; a mapping's fields in one string);
    ValueError in one line for a kind that has no scheme to declare."""
    if scheme is None:
        return conventions
    if "scheme" not in _kinds.get(kind).declarable:
        raise ValueError(f"{kind} has no FP8 scheme to declare (scheme= is for attention_fp8)")
    return dict(conventions or {}) | {"scheme": _kinds.scheme_of(scheme).key}


def marking_module() -> str | None:
    """The module whose top-level code is running now (being imported): the innermost `<module>` frame's.

    A candidate marked while a module imports belongs to that module, wherever its function was defined: a
    factory's product bound at the top level (`flash = sdpa("bool", "flash")`) is the module's own, while a
    candidate imported from another module (`from softaudit.frameworks.torch import softmax`) is that module's.
    """
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back
    return frame.f_globals.get("__name__") if frame is not None else None


def marking(fn) -> Mark | None:
    """What a callable was marked with, or None."""
    try:
        found = getattr(fn, _MARK, None)
    except Exception:  # (a module-level object whose __getattr__ raises something else)
        return None
    return found if isinstance(found, Mark) else None
