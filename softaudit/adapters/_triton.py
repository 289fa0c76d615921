"""framework="triton": a Triton kernel's call on the GPU as it is, or on the CPU in Triton's interpreter made
faithful to what a GPU computes.

Triton's interpreter (TRITON_INTERPRET=1) runs a kernel with numpy, and where its arithmetic is not a GPU's a
kernel would be judged on arithmetic no GPU performs. Inside an interpreted call (`interpreted`) softaudit:
- runs every @triton.jit function through the interpreter, whenever Triton was imported (a kernel made at import
  time is a JITFunction unless TRITON_INTERPRET was set then: its launch and its device calls are routed to the
  interpreter, so the process calling the candidate needs nothing set up before Triton loads);
- converts between floating types rounding to nearest even, subnormals exact (the interpreter truncates to
  bfloat16 and misplaces subnormals), and between bfloat16 and integers by value (it moves the bits);
- does bfloat16 arithmetic, comparisons, min/max and dot products on the values (the interpreter works on the
  stored uint16 bits), each operation in float32 rounded to the 16-bit type, as sm_80+ GPUs give it;
- reduces 16-bit sums in a tree of such rounded additions (numpy accumulates float16 in float32 and rounds once);
- maps triton.language.extra.libdevice's functions (stubs returning None in the interpreter) to numpy's;
- passes a Python float argument as the fp32 scalar a GPU launch makes of it.
The corrections are checked against the Triton version: one they are not tested on gets a note, no corrections,
and its 16-bit rows skip (docs/triton.md).

(Longer than the house's 400 lines: every correction patches the same interpreter for the length of one interpreted call
and is undone with it (`_Patches`); apart, one could be applied without the others.)
"""

from __future__ import annotations

import contextlib
import os
import re
import threading

import numpy as np

#: The Triton minor versions whose interpreter these corrections are written for and tested against.
TESTED = ((3, 9),)

_lock = threading.RLock()


def version() -> tuple[int, int] | None:
    """Triton's (major, minor), or None where it is not installed."""
    try:
        import triton
    except ImportError:
        return None
    found = re.match(r"(\d+)\.(\d+)", triton.__version__)
    return (int(found[1]), int(found[2])) if found else None


def interpreted(device: str | None) -> bool:
    """Whether a triton candidate on `device` runs in the interpreter: on the CPU (None or "cpu"), never on a GPU."""
    from ._bridge import parse_device

    return parse_device(device)[0] == "cpu"


def tested() -> bool:
    return version() in TESTED


def untested_note() -> str:
    found = version()
    shown = ", ".join(f"{a}.{b}" for a, b in TESTED)
    return (
        f"Triton {found[0]}.{found[1]} is outside the versions softaudit's interpreter corrections are tested on "
        f"({shown}): corrections off, 16-bit rows skipped"
    )


def prepare(device: str | None, dtype) -> tuple[str, contextlib.AbstractContextManager]:
    """(the row's note, the context the call runs in) for a triton candidate on `device` in `dtype`; CandidateSkip
    where Triton is missing, or where its interpreter cannot be trusted with this dtype."""
    from ._bridge import CandidateSkip

    if version() is None:
        raise CandidateSkip("needs Triton (pip install triton)")
    if not interpreted(device):
        return "", contextlib.nullcontext()
    if not tested():
        if np.dtype(dtype).itemsize <= 2:
            raise CandidateSkip(untested_note())
        return f"ran in Triton's interpreter; {untested_note()}", _interpreter(corrected=False)
    return "ran in Triton's interpreter (CPU), GPU rounding restored", _interpreter(corrected=True)


@contextlib.contextmanager
def _interpreter(corrected: bool):
    """Triton's interpreter for the calls made inside, corrected where `corrected`; everything restored after."""
    import triton  # noqa: F401  (the interpreter's module imports triton itself)
    from triton.runtime import interpreter

    with _lock:
        patches = _Patches()
        saved = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1"  # (kernels made during the call, and the knobs read then)
        try:
            _route_jit(patches, interpreter)
            if corrected:
                _correct(patches, interpreter)
            yield
        finally:
            patches.restore()
            if saved is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = saved


class _Patches:
    """Attributes set for the length of a call, restored in reverse order."""

    def __init__(self):
        self._saved: list[tuple] = []

    def set(self, obj, name: str, value) -> None:
        self._saved.append((obj, name, obj.__dict__.get(name, _MISSING) if hasattr(obj, "__dict__") else _MISSING))
        setattr(obj, name, value)

    def restore(self) -> None:
        while self._saved:
            obj, name, old = self._saved.pop()
            if old is _MISSING:
                with contextlib.suppress(AttributeError):
                    delattr(obj, name)
            else:
                setattr(obj, name, old)


_MISSING = object()
_as_interpreted: dict = {}  # a JITFunction's Python function -> its InterpretedFunction


def _route_jit(patches: _Patches, interpreter) -> None:
    """Launches and device calls of JITFunctions (made before TRITON_INTERPRET was set) go to the interpreter."""
    from triton.runtime.jit import JITFunction

    def as_interpreted(jit):
        found = _as_interpreted.get(jit.fn)
        if found is None:
            found = _as_interpreted[jit.fn] = interpreter.InterpretedFunction(jit.fn)
        return found

    def run(self, *args, grid, warmup, **kwargs):
        return as_interpreted(self).run(*args, grid=grid, warmup=warmup, **kwargs)

    def call(self, *args, **kwargs):
        return as_interpreted(self)(*args, **kwargs)

    patches.set(JITFunction, "run", run)
    patches.set(JITFunction, "__call__", call)


# ---------------------------------------------------------------------------------------------- the corrections


def _float_kind(tl, ty):
    """'bf16', 'fp16', 'fp32', 'fp64' for a floating scalar type, None otherwise."""
    ty = getattr(ty, "scalar", ty)
    return {tl.bfloat16: "bf16", tl.float16: "fp16", tl.float32: "fp32", tl.float64: "fp64"}.get(ty)


def values(data: np.ndarray, kind: str) -> np.ndarray:
    """The interpreter's storage of a `kind` value (bfloat16 as uint16 bits) as the numpy floats it holds."""
    import ml_dtypes

    if kind == "bf16":
        return np.asarray(data).view(ml_dtypes.bfloat16)
    return np.asarray(data)


def stored(x: np.ndarray, kind: str) -> np.ndarray:
    """Floats rounded to nearest even in `kind`, as the interpreter stores them (bfloat16 as its uint16 bits)."""
    import ml_dtypes

    with np.errstate(all="ignore"):
        if kind == "bf16":
            return np.asarray(x).astype(ml_dtypes.bfloat16).view(np.uint16)
        return np.asarray(x).astype({"fp16": np.float16, "fp32": np.float32, "fp64": np.float64}[kind])


def _wide(data: np.ndarray, kind: str) -> np.ndarray:
    """A 16-bit value in float32 (exact), others as they are."""
    return values(data, kind).astype(np.float32) if kind in ("bf16", "fp16") else values(data, kind)


def tree_sum(x: np.ndarray, axis: int, kind: str) -> np.ndarray:
    """The sum along `axis` of float32-held 16-bit values as a GPU reduces them: a tree of additions (as its
    warp shuffles pair lanes), each done in float32 and rounded to `kind`. Returns float32 holding `kind` values."""
    x = np.moveaxis(np.asarray(x, np.float32), axis, -1)
    n = x.shape[-1]
    if n == 0:
        return np.zeros(x.shape[:-1], np.float32)
    width = 1 << (n - 1).bit_length()
    if width != n:  # (-0 leaves every sum as it is, -0 + -0 included)
        x = np.concatenate([x, np.full((*x.shape[:-1], width - n), -0.0, np.float32)], axis=-1)
    with np.errstate(all="ignore"):
        while x.shape[-1] > 1:
            half = x.shape[-1] // 2
            x = values(stored(x[..., :half] + x[..., half:], kind), kind).astype(np.float32)
    return x[..., 0]


def _correct(patches: _Patches, interpreter) -> None:
    import triton.language as tl

    builder = interpreter.InterpreterBuilder
    handle = interpreter.TensorHandle
    np_dtype = interpreter._get_np_dtype
    original_cast, original_fp_to_fp = builder.cast_impl, builder.create_fp_to_fp
    original_binary, original_unary = builder.binary_op, builder.unary_op
    original_ternary, original_fma, original_dot = builder.ternary_op, builder.create_fma, builder.create_dot

    def cast_impl(self, src, dst_type):
        a = None if src.data.dtype == np.bool_ else _float_kind(tl, src.dtype)  # (the interpreter types a
        b = _float_kind(tl, dst_type)  # comparison's result as what it compared)
        if a and b:  # float to float: round to nearest even, subnormals exact
            return handle(stored(values(src.data, a), b), dst_type.scalar)
        if a == "bf16":  # bfloat16 to an integer, by value (toward zero, as fptosi)
            with np.errstate(all="ignore"):
                return handle(values(src.data, a).astype(np.float32).astype(np_dtype(dst_type)), dst_type.scalar)
        if b == "bf16":  # an integer to bfloat16, by value, rounded once
            return handle(stored(src.data.astype(np.float64), b), dst_type.scalar)
        return original_cast(self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        a, b = _float_kind(tl, src.dtype), _float_kind(tl, dst_type)
        nearest = rounding_mode is None or rounding_mode == interpreter._ir.ROUNDING_MODE.RTNE
        if a and b and nearest:
            return handle(stored(values(src.data, a), b), dst_type.scalar)
        return original_fp_to_fp(self, src, dst_type, rounding_mode)

    def widen(*handles):
        return [_wide(h.data, _float_kind(tl, h.dtype)) for h in handles]

    def binary_op(self, lhs, rhs, op):
        kind = _float_kind(tl, lhs.dtype)
        if kind not in ("bf16", "fp16") or _float_kind(tl, rhs.dtype) != kind:
            return original_binary(self, lhs, rhs, op)
        with np.errstate(all="ignore"):
            out = op(*widen(lhs, rhs))
        if out.dtype == np.bool_:  # (a comparison's result is int1, whatever it compared)
            return handle(out, tl.int1)
        return handle(stored(out, kind), lhs.dtype.scalar)

    def unary_op(self, arg, op):
        kind = _float_kind(tl, arg.dtype)
        if kind not in ("bf16", "fp16"):
            return original_unary(self, arg, op)
        with np.errstate(all="ignore"):
            return handle(stored(op(*widen(arg)), kind), arg.dtype.scalar)

    def ternary_op(self, lhs, rhs, other, op):
        kind = _float_kind(tl, other.dtype)
        if op is not np.clip or kind != "bf16":  # (a select moves bits, which is right)
            return original_ternary(self, lhs, rhs, other, op)
        return handle(stored(np.clip(*widen(lhs, rhs, other)), kind), other.dtype.scalar)

    def create_fma(self, x, y, z):
        kind = _float_kind(tl, z.dtype)
        if kind != "bf16":
            return original_fma(self, x, y, z)
        a, b, c = (values(h.data, kind).astype(np.float64) for h in (x, y, z))
        return handle(stored(a * b + c, kind), z.dtype.scalar)  # (a bfloat16 product is exact in float64)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if _float_kind(tl, a.dtype) != "bf16":
            return original_dot(self, a, b, d, input_precision, max_num_imprecise_acc)
        acc = _float_kind(tl, d.dtype)
        out = np.matmul(*widen(a, b), dtype=np.float32) + _wide(d.data, acc)
        return handle(stored(out, acc), d.dtype.scalar)

    for name, fn in {
        "cast_impl": cast_impl,
        "create_fp_to_fp": create_fp_to_fp,
        "binary_op": binary_op,
        "unary_op": unary_op,
        "ternary_op": ternary_op,
        "create_fma": create_fma,
        "create_dot": create_dot,
    }.items():
        patches.set(builder, name, fn)
    for name in ("create_si_to_fp", "create_ui_to_fp", "create_fp_to_si", "create_fp_to_ui", "create_fp_ext"):
        patches.set(builder, name, lambda self, src, dst_type: self.cast_impl(src, dst_type))
    patches.set(builder, "create_fp_trunc", lambda self, src, dst_type: self.cast_impl(src, dst_type))
    _correct_reductions(patches, interpreter, tl)
    _correct_arguments(patches, interpreter, tl)
    _correct_libdevice(patches, interpreter, tl)


def _correct_reductions(patches: _Patches, interpreter, tl) -> None:
    reduce_ops, scan_ops = interpreter.ReduceOps, interpreter.ScanOps
    original_sum, original_min_max = reduce_ops.sum, reduce_ops.min_max
    original_cumsum = scan_ops.cumsum

    def axis_of(self, data):
        return self.axis if self.axis is not None else 0

    def reduce_sum(self, input):
        kind = _float_kind(tl, input.dtype)
        if kind not in ("bf16", "fp16"):
            return original_sum(self, input)
        data = _wide(input.handle.data, kind)
        if self.axis is None:
            data = data.reshape(-1)
        out = tree_sum(data, axis_of(self, data), kind)
        if self.keep_dims:
            out = np.expand_dims(out, axis_of(self, data)) if self.axis is not None else out.reshape((1,) * data.ndim)
        return self.to_tensor(stored(out, kind), input.dtype)

    def min_max(self, input, val_reduce_op, idx_reduce_op=None):
        source = input[0] if isinstance(input, tuple) else input
        kind = _float_kind(tl, source.dtype)
        if kind != "bf16":
            return original_min_max(self, input, val_reduce_op, idx_reduce_op)
        data = _wide(source.handle.data, kind)
        found = []
        if val_reduce_op:
            with np.errstate(all="ignore"), _quiet():
                got = val_reduce_op(data, axis=self.axis, keepdims=self.keep_dims)
            found.append(self.to_tensor(stored(got, kind), source.dtype))
        if idx_reduce_op:
            with _quiet():
                got = idx_reduce_op(data, axis=self.axis, keepdims=self.keep_dims)
            found.append(self.to_tensor(got, tl.int32))
        return found[0] if len(found) == 1 else tuple(found)

    def cumsum(self, input):
        kind = _float_kind(tl, input.dtype)
        if kind not in ("bf16", "fp16"):
            return original_cumsum(self, input)
        data = np.moveaxis(_wide(input.handle.data, kind), self.axis, -1).copy()
        with np.errstate(all="ignore"):
            for i in range(1, data.shape[-1]):
                data[..., i] = values(stored(data[..., i - 1] + data[..., i], kind), kind).astype(np.float32)
        return [self.to_tensor(stored(np.moveaxis(data, -1, self.axis), kind), input.dtype)]

    patches.set(reduce_ops, "sum", reduce_sum)
    patches.set(reduce_ops, "min_max", min_max)
    patches.set(scan_ops, "cumsum", cumsum)


@contextlib.contextmanager
def _quiet():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (an all-NaN slice: nanmax says so, the GPU does not)
        yield


def _correct_arguments(patches: _Patches, interpreter, tl) -> None:
    original = interpreter._implicit_cvt

    def implicit_cvt(arg):
        if isinstance(arg, float):  # a GPU launch passes a Python float as an fp32 scalar
            return tl.tensor(interpreter.TensorHandle(np.array([arg], np.float32), tl.float32), tl.float32)
        return original(arg)

    patches.set(interpreter, "_implicit_cvt", implicit_cvt)


#: libdevice's functions as numpy computes them, by name (triton.language.extra.libdevice and its CUDA module).
LIBDEVICE = {
    "tanh": np.tanh,
    "exp": np.exp,
    "exp2": np.exp2,
    "exp10": lambda x: np.power(x.dtype.type(10), x),
    "expm1": np.expm1,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "atan2": np.arctan2,
    "pow": np.power,
    "fabs": np.abs,
    "abs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "rint": np.rint,
    "nearbyint": np.rint,
    "fmax": np.fmax,
    "fmin": np.fmin,
    "copysign": np.copysign,
    "hypot": np.hypot,
    "cbrt": np.cbrt,
    "fma": lambda a, b, c: (a.astype(np.float64) * b + c).astype(c.dtype),
    "div_rn": np.divide,
    "fast_expf": np.exp,
    "fast_logf": np.log,
    "fast_dividef": np.divide,
    "isnan": np.isnan,
    "isinf": np.isinf,
    "isfinited": np.isfinite,
    "signbit": np.signbit,
}


def _libdevice_function(tl, interpreter, name: str):
    op = LIBDEVICE[name]

    def fn(*args, **kwargs):
        tensors = [a for a in args if isinstance(a, tl.tensor)]
        like = max(tensors, key=lambda t: len(getattr(t.type, "shape", ()) or ()))
        kind = _float_kind(tl, like.dtype) or "fp32"
        datas = [
            _wide(a.handle.data, _float_kind(tl, a.dtype) or kind) if isinstance(a, tl.tensor) else np.float32(a)
            for a in args
        ]
        with np.errstate(all="ignore"):
            out = op(*np.broadcast_arrays(*datas))
        if out.dtype == np.bool_:
            ty = like.type.with_element_ty(tl.int1) if isinstance(like.type, tl.block_type) else tl.int1
            return tl.tensor(interpreter.TensorHandle(out, tl.int1), ty)
        return tl.tensor(interpreter.TensorHandle(stored(out, kind), like.dtype), like.type)

    fn.__name__ = name
    return fn


def _correct_libdevice(patches: _Patches, interpreter, tl) -> None:
    import sys

    modules = []
    with contextlib.suppress(ImportError):
        from triton.language.extra import libdevice

        modules.append(libdevice)
    with contextlib.suppress(ImportError):
        from triton.language.extra.cuda import libdevice as cuda

        modules.append(cuda)
    stubs = {}  # id(a libdevice function) -> its numpy replacement
    for module in modules:
        for name in LIBDEVICE:
            found = getattr(module, name, None)
            if found is not None:
                replacement = _libdevice_function(tl, interpreter, name)
                stubs[id(found)] = replacement
                patches.set(module, name, replacement)
    original_patch_lang = interpreter._patch_lang

    def patch_lang(fn):
        scope = original_patch_lang(fn)
        module = sys.modules.get(getattr(fn, "__module__", None) or "")
        if module is not None:  # (a kernel that imported `tanh` from libdevice holds the stub itself)
            for name, value in list(fn.__globals__.items()):
                if id(value) in stubs and callable(value):
                    scope.set_attr(module, name, stubs[id(value)])
                    patches.set(module, name, stubs[id(value)])
        return scope

    patches.set(interpreter, "_patch_lang", patch_lang)
