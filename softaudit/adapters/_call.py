"""Calling a candidate: its kind's calling convention, a time limit, and checks on what comes back.

Whatever goes wrong becomes a CandidateError with one line saying what; the runner turns it into an error row
and goes on.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import signal
import sysconfig
import threading
import traceback

import numpy as np

from .. import kinds
from . import _bridge as bridge
from ._candidate import Candidate


class CandidateError(Exception):
    """A candidate raised, hung, or returned something unusable."""


_armed: list[float] = []  # the time limit now running (the handler's message)


def _expire(signum, frame):
    raise CandidateError(f"ran past the time limit of {_armed[-1]:g} s")


@contextlib.contextmanager
def time_limits():
    """Keep the SIGALRM handler installed for a whole audit, so each call only sets the timer (a call's time
    limit costs 2 system calls instead of 4: it adds up over thousands of small cases)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGALRM, _expire)
    try:
        yield
    finally:
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _time_limit(seconds: float | None):
    """Raise CandidateError after `seconds` (SIGALRM: main thread on Unix; elsewhere no limit is enforced)."""
    usable = seconds and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return
    installed = signal.getsignal(signal.SIGALRM) is _expire  # (inside time_limits())
    previous = None if installed else signal.signal(signal.SIGALRM, _expire)
    _armed.append(seconds)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _armed.pop()
        if not installed:
            signal.signal(signal.SIGALRM, previous)


_reused = threading.local()  # per thread: one buffer per input name, for call(..., reuse=True)


def _copy(name: str, a: np.ndarray, reuse: bool) -> np.ndarray:
    """A C-order copy of a (a gathered probe, x[..., perm], is not in C order and runs slower); with reuse,
    written into the buffer the last reusing call had for this name, where shape and dtype allow. Fresh
    copies of large inputs cost page faults, and the candidate's own temporaries then fault more too."""
    if not reuse:
        return np.array(a, order="C")
    buffers = _reused.__dict__.setdefault("buffers", {})
    buf = buffers.get(name)
    if buf is None or buf.shape != a.shape or buf.dtype != a.dtype:
        buf = buffers[name] = np.empty(a.shape, a.dtype)
    np.copyto(buf, a)
    return buf


def _arguments(kind, arrays: dict, mask, reuse: bool = False):
    # Copies: a candidate may write into its inputs, which every other candidate and the reference share.
    arrays = {name: _copy(name, a, reuse) for name, a in arrays.items()}
    mask = None if mask is None else np.array(mask)
    return kind.call_arguments(arrays, mask)


def call(candidate: Candidate, arrays: dict, mask, shape: tuple, dtype, timeout: float | None, reuse: bool = False):
    """Call a candidate of a one-output kind; return (output cast to dtype, note or ""). See `call_all`."""
    (out,), note = call_all(candidate, arrays, mask, (shape,), dtype, timeout, reuse)
    return out, note


def call_all(
    candidate: Candidate,
    arrays: dict,
    mask,
    shapes: tuple,
    dtype,
    timeout: float | None,
    reuse: bool = False,
    options: dict | None = None,
):
    """Call the candidate on arrays of the audited dtype; return (its outputs cast to dtype, note or "").

    The kind's calling convention gives the arguments; options: keywords beyond it, for a candidate that takes them
    (num_splits=2: softaudit/reproducibility.py). Each output must be an array (or array-like) of its shape in
    `shapes`, one per output of the kind (a kind with several returns a tuple of them); another floating dtype is
    cast and noted. reuse: copy the inputs into buffers kept for the next reusing call, which overwrites them: an
    output that is the input, written in place, is then valid only until that call.
    """
    kind = kinds.get(candidate.kind)
    if kind.optional:  # (an FP8 KV cache: passed to a candidate that names it; the others read k and v)
        named = _named(candidate.call)
        arrays = {n: a for n, a in arrays.items() if n not in kind.optional or n in named}
    extra = [name for name in arrays if name not in kind.arguments]  # (attention's bias, alibi_slopes, sinks)
    missing = _not_taken(candidate.call, [*(options or {}), *extra])
    if missing:
        raise bridge.CandidateSkip(f"does not take {', '.join(missing)}")
    args, kwargs = _arguments(kind, arrays, mask, reuse)
    kwargs |= options or {}
    framework = candidate.framework
    ran, where = "", bridge.context(framework)
    if framework == "triton":  # (on the CPU: Triton's interpreter, corrected; on a GPU: as it is)
        from . import _triton

        ran, where = _triton.prepare(candidate.device, dtype)
    try:
        # The audit counts NaN, overflow and underflow itself; numpy's warnings about them would only be noise.
        with _time_limit(timeout), np.errstate(all="ignore"), where:
            if framework != "numpy":
                to, back = bridge.converters(framework)
                args = tuple(to(a, candidate.device) for a in args)
                # (the mask, and a case's further arrays: attention's bias, alibi_slopes, sinks)
                kwargs = kwargs | {
                    n: to(np.asarray(a), candidate.device) for n, a in kwargs.items() if isinstance(a, np.ndarray)
                }
            out = candidate.call(*args, **kwargs)
            outs = (out,) if len(shapes) == 1 else _several(out, kind.outputs)
            if framework != "numpy":
                outs = tuple(back(o) for o in outs)
    except (CandidateError, bridge.CandidateSkip):
        raise
    except Exception as exc:
        raise CandidateError(f"raised {type(exc).__name__}: {exc}{raised_at(exc)}") from exc
    checked = [
        _checked(o, shape, _dtype(kind, i, dtype), "" if len(shapes) == 1 else f"{name}: ", kind.own_dtype)
        for i, (o, shape, name) in enumerate(zip(outs, shapes, kind.outputs))
    ]
    return tuple(o for o, _ in checked), "; ".join(dict.fromkeys(n for n in (ran, *(n for _, n in checked)) if n))


#: Where Python's own modules and installed packages live: a frame there is a library's, not the user's code.
_LIBRARIES = tuple({os.path.join(sysconfig.get_paths()[k], "") for k in ("stdlib", "platstdlib", "purelib", "platlib")})
_ADAPTERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")


def raised_at(exc: BaseException) -> str:
    """Where a candidate's exception was raised, as its error row says it: " (at kernels.py:12, in fused)", the
    innermost frame in the user's code (a numpy or torch call that raised is told by the user's line that made it;
    a path inside the working folder relative to it). Where every frame is a library's (a candidate installed as a
    package), the candidate's own, the outermost; "" where there is none (softaudit's own conversions raised)."""
    frames = [
        (os.path.abspath(frame.f_code.co_filename), line, frame.f_code.co_name)
        for frame, line in traceback.walk_tb(exc.__traceback__)
        if not frame.f_code.co_filename.startswith("<")
    ]
    theirs = [f for f in frames if not f[0].startswith(_ADAPTERS)]
    own = [f for f in theirs if not f[0].startswith(_LIBRARIES)]
    if not theirs:
        return ""
    path, line, function = own[-1] if own else theirs[0]
    here = os.path.join(os.getcwd(), "")
    return f" (at {path.removeprefix(here) if path.startswith(here) else path}:{line}, in {function})"


def taken(call, names) -> list[str]:
    """Those of `names` the callable takes as keywords (all of them where it takes **kwargs or has no signature)."""
    missing = _not_taken(call, list(names))
    return [name for name in names if name not in missing]


def _named(call) -> set[str]:
    """The parameters a callable names (not those a **kwargs would take: attention's built-ins pass theirs on to
    the score modifiers); none where it has no signature."""
    fn = call.func if isinstance(call, functools.partial) else call
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return set()
    return {n for n, p in parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def _not_taken(call, names: list[str]) -> list[str]:
    """The case's keywords the callable does not take (none where it takes **kwargs or has no signature): a
    candidate without softcap is skipped on a softcapped case, not called wrongly."""
    if not names:
        return []
    fn = call.func if isinstance(call, functools.partial) else call
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return []
    return [name for name in names if name not in parameters]


def _several(out, names: tuple) -> tuple:
    if not isinstance(out, (tuple, list)):
        raise CandidateError(f"returned {type(out).__name__}, not a tuple ({', '.join(names)})")
    if len(out) != len(names):
        raise CandidateError(f"returned {len(out)} arrays, expected {len(names)} ({', '.join(names)})")
    return tuple(out)


def _dtype(kind, index: int, dtype):
    """The dtype an output is cast to: its own format where the kind gives one (`Kind.formats`)."""
    own = kind.output_dtype(index, None)
    if own is None:
        return dtype
    from ..reference import format_of  # (here: a worker process that never needs it does not import mpmath)

    return format_of(own).dtype


def _checked(out, shape: tuple, dtype, label: str, own: bool = False):
    """(out as an array of dtype, note): CandidateError where it is not an array of `shape` in a floating type.
    own: the output's dtype is the candidate's choice (`Kind.own_dtype`): a less precise one is a skip in this dtype
    (an FP8 kernel's bfloat16 o is not judged in float32's units)."""
    if not hasattr(out, "shape") or not hasattr(out, "dtype"):
        raise CandidateError(f"{label}returned {type(out).__name__}, not an array")
    out = np.asarray(out)
    if out.shape == () and tuple(shape) == (1,):  # a reduced loss: the audit holds its one value as an array
        out = out.reshape(1)
    if out.shape != tuple(shape):
        hint = _broadcast_hint(label.removesuffix(": "), out.shape, tuple(shape))
        raise CandidateError(f"{label}returned shape {out.shape}, expected {tuple(shape)}{hint}")
    note = ""
    if out.dtype != dtype:
        from ..reference import format_of  # (here: a worker process that never needs it does not import mpmath)

        try:
            found = format_of(out.dtype)
        except ValueError:
            raise CandidateError(f"{label}returned dtype {out.dtype}, not a floating-point type") from None
        if own and found.precision < format_of(dtype).precision:
            raise bridge.CandidateSkip(
                f"{label}returns {out.dtype}, less precise than {np.dtype(dtype).name}: audited with "
                f"--dtype {out.dtype}"
            )
        note = f"{label}returned {out.dtype}, cast to {np.dtype(dtype).name}"
        with np.errstate(all="ignore"):
            out = out.astype(dtype)
    return out, note


def _broadcast_hint(name: str, got: tuple, expected: tuple) -> str:
    """Where a gradient came back in the broadcast shape of its input (dk of (2, 4, 24, 32) for a k of (2, 1, 24,
    32) shared by 4 heads): which axes the input is broadcast along, and that the gradient is summed over them."""
    extra = len(got) - len(expected)
    if not name.startswith("d") or extra < 0 or any(g != e != 1 for g, e in zip(got[extra:], expected)):
        return ""
    ones = [extra + i for i, (g, e) in enumerate(zip(got[extra:], expected)) if g != e]
    axes = list(range(extra)) + ones
    source, listed = name[1:], ", ".join(map(str, axes))
    where = f"axis {listed}" if len(axes) == 1 else f"axes {listed}"
    missing = f" ({source} has no axis for the first {extra})" if extra else ""
    how = (
        f"{name}.sum(axis={tuple(ones) if len(ones) > 1 else ones[0]}, keepdims=True), "
        if not extra
        else f"{name}.sum(axis={tuple(axes) if len(axes) > 1 else axes[0]}), "
        if not ones
        else ""
    )
    return (
        f": {source} is broadcast along {where} of the result{missing}, so {name} must be summed over "
        f"{'it' if len(axes) == 1 else 'them'} ({how}as autograd does for a broadcast input)"
    )
