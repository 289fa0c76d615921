"""Loading targets: `pkg.mod`, `pkg.mod:func`, `path/file.py`, `path/file.py:func`, a callable or a Candidate.

Targets import as the user's own scripts and tests would: a file with its folder first on sys.path (as
`python file.py` runs it), so it imports its sibling modules; a module with the working directory on sys.path (as
`python -m` and pytest do), so `pkg.mod` needs no PYTHONPATH=. Each is on sys.path only while the target imports.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path

from .. import kinds as _kinds
from ._candidate import Candidate, check_kind, marking


class TargetError(ValueError):
    """A target that cannot be loaded: the message is one line for the user."""


@contextlib.contextmanager
def _first_on_path(folder: Path):
    """`folder` first on sys.path while the target imports (removed after, unless it was there already)."""
    entry = str(folder.resolve())
    if entry in sys.path:
        yield
        return
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(entry)


def _import_file(path: Path):
    if not path.is_file():
        raise TargetError(f"no such file: {path}")
    # Loaded afresh every time, as running a script is: a file edited between two audits is the new one.
    name = "softaudit_target_" + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with _first_on_path(path.parent):
            spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise TargetError(f"{path} does not import: {type(exc).__name__}: {exc}") from exc
    return module


def _import(spec: str):
    if spec.endswith(".py") or "/" in spec or "\\" in spec:
        return _import_file(Path(spec)), Path(spec).stem
    try:
        with _first_on_path(Path(os.getcwd())):
            return importlib.import_module(spec), spec
    except Exception as exc:
        raise TargetError(f"module {spec!r} does not import: {type(exc).__name__}: {exc}") from exc


def _from_function(fn, label: str, kind: str | None, source: str | None) -> Candidate:
    mark = marking(fn)
    if mark is None and kind is None:
        raise TargetError(f"{label} is not marked with @softaudit.candidate: give its kind (kind= or --kind)")
    if mark is None:
        return Candidate(check_kind(kind), label, fn, "numpy", None, source)
    if kind and mark.kind != kind:
        raise TargetError(f"{label} is marked as {mark.kind}, not {kind}")
    return Candidate(mark.kind, mark.name or label, fn, mark.framework, mark.device, source, mark.conventions)


def _label(fn) -> tuple[str, str | None]:
    """What the table calls an unnamed callable ("module:qualname"), and the target that loads it again (None
    when that name does not lead back to this very object, or leads nowhere a later process can follow)."""
    if isinstance(fn, functools.partial):
        return f"partial({_label(fn.func)[0]})", None
    named = fn if hasattr(fn, "__qualname__") else type(fn)  # (a callable object: its class)
    module, qualname = getattr(named, "__module__", None) or "?", named.__qualname__
    label = f"{module}:{qualname}"
    found = getattr(sys.modules.get(module), qualname, None)
    own = found is fn and not module.startswith(("softaudit_target_", "__main__"))
    return label, label if own else None


def _from_module(module, spec: str, label: str) -> list[Candidate]:
    """The candidates marked at the module's top level (see `marking_module`), in order, each once."""
    found, seen = [], set()
    for attr, fn in vars(module).items():
        mark = marking(fn) if callable(fn) else None
        if mark is not None and mark.owner == module.__name__ and id(fn) not in seen:
            seen.add(id(fn))
            found.append(_from_function(fn, f"{label}:{attr}", None, f"{spec}:{attr}"))
    return found


def _its_functions(module) -> str:
    """The public functions a module defines, for a message: " (its functions: a, b)", or "" for none."""
    names = [
        name
        for name, fn in vars(module).items()
        if inspect.isfunction(fn) and fn.__module__ == module.__name__ and not name.startswith("_")
    ]
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    return f" (its functions: {shown})" if names else ""


def load_target(target, kind: str | None = None) -> list[Candidate]:
    """The candidates a target names; a module gives every candidate marked in it, in definition order.

    kind: needed for an unmarked function; a module must have candidates of that kind (TargetError otherwise,
    naming the kinds it has)."""
    if kind is not None:
        check_kind(kind)
    if isinstance(target, Candidate):
        if kind and target.kind != kind:
            raise TargetError(f"candidate {target.name} is {target.kind}, not {kind}")
        return [target]
    if callable(target) and not isinstance(target, str):
        label, source = _label(target)
        return [_from_function(target, label, kind, source)]
    if not isinstance(target, str) or not target:
        raise TargetError(f"a target is a module, a file, a callable or a Candidate, got {target!r}")
    spec, _, func = target.rpartition(":") if ":" in target else (target, "", "")
    module, label = _import(spec)
    if func:
        fn = getattr(module, func, None)
        if fn is None or not callable(fn):
            raise TargetError(f"{spec} has no function {func!r}")
        return [_from_function(fn, f"{label}:{func}", kind, target)]
    found = _from_module(module, spec, label)
    if not found:
        how = f"name one as {spec}:FUNCTION" + ("" if kind else " and give its kind (--kind, kind=)")
        raise TargetError(f"{spec} has no function marked with @softaudit.candidate; {how}{_its_functions(module)}")
    mine = [c for c in found if kind is None or c.kind == kind]
    if not mine:
        kinds = [k for k in _kinds.KINDS if any(c.kind == k for c in found)]
        raise TargetError(f"{spec} has no {kind} candidate; its kinds: {', '.join(kinds)}")
    return mine
