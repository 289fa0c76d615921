"""Loading targets: `pkg.mod`, `pkg.mod:func`, `path/file.py`, `path/file.py:func`, or a function object."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

from ._candidate import Candidate, check_kind, marking


class TargetError(ValueError):
    """A target that cannot be loaded: the message is one line for the user."""


def _import_file(path: Path):
    if not path.is_file():
        raise TargetError(f"no such file: {path}")
    # Loaded afresh every time, as running a script is: a file edited between two audits is the new one.
    name = "softaudit_target_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise TargetError(f"{path} does not import: {type(exc).__name__}: {exc}") from exc
    return module


def _import(spec: str):
    if spec.endswith(".py") or "/" in spec or "\\" in spec:
        return _import_file(Path(spec)), Path(spec).stem
    try:
        return importlib.import_module(spec), spec
    except Exception as exc:
        raise TargetError(f"module {spec!r} does not import: {type(exc).__name__}: {exc}") from exc


def _from_function(fn, label: str, kind: str | None, source: str | None) -> Candidate:
    mark = marking(fn)
    if mark is None and kind is None:
        raise TargetError(f"{label} is not marked with @softaudit.candidate: give its kind (kind= or --kind)")
    marked_kind, name, framework, device = mark or (None, None, "numpy", None)
    if marked_kind and kind and marked_kind != kind:
        raise TargetError(f"{label} is marked as {marked_kind}, not {kind}")
    return Candidate(check_kind(kind or marked_kind), name or label, fn, framework, device, source)


def load_target(target, kind: str | None = None) -> list[Candidate]:
    """The candidates a target names; a module gives every function marked in it, in definition order."""
    if callable(target) and not isinstance(target, str):
        label = f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', repr(target))}"
        loadable = "<" not in label and not label.startswith(("?", "softaudit_target_", "__main__"))
        return [_from_function(target, label, kind, label if loadable else None)]
    if not isinstance(target, str) or not target:
        raise TargetError(f"a target is a module, a file or a function, got {target!r}")
    spec, _, func = target.rpartition(":") if ":" in target else (target, "", "")
    module, label = _import(spec)
    if func:
        fn = getattr(module, func, None)
        if fn is None or not callable(fn):
            raise TargetError(f"{spec} has no function {func!r}")
        return [_from_function(fn, f"{label}:{func}", kind, target)]
    found = [
        _from_function(fn, f"{label}:{fn.__name__}", None, f"{spec}:{attr}")
        for attr, fn in vars(module).items()
        if inspect.isfunction(fn) and marking(fn) is not None and fn.__module__ == module.__name__
    ]
    if not found:
        raise TargetError(f"{spec} has no function marked with @softaudit.candidate; name one as {spec}:FUNCTION")
    return [c for c in found if kind is None or c.kind == kind]
