"""framework="triton" on a CPU: Triton's interpreter, each of softaudit's corrections checked against torch's own
rounding (torch's CPU conversions round to nearest even, and its bfloat16 and float16 operations compute in float32
and round once, as sm_80+ GPUs do), and the version check that turns them off."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from softaudit.adapters import CandidateSkip, _triton  # noqa: E402

pytestmark = pytest.mark.skipif(not _triton.tested(), reason="corrections are tested on the Triton versions in TESTED")


@triton.jit
def _convert(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(y_ptr + i, x.to(y_ptr.dtype.element_ty), mask=i < n)


@triton.jit
def _binary(a_ptr, b_ptr, add_ptr, sub_ptr, mul_ptr, div_ptr, max_ptr, lt_ptr, neg_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + i, mask=i < n)
    b = tl.load(b_ptr + i, mask=i < n)
    tl.store(add_ptr + i, a + b, mask=i < n)
    tl.store(sub_ptr + i, a - b, mask=i < n)
    tl.store(mul_ptr + i, a * b, mask=i < n)
    tl.store(div_ptr + i, a / b, mask=i < n)
    tl.store(max_ptr + i, tl.maximum(a, b), mask=i < n)
    tl.store(lt_ptr + i, (a < b).to(tl.int8), mask=i < n)
    tl.store(neg_ptr + i, -a, mask=i < n)


@triton.jit
def _reduce(x_ptr, sum_ptr, max_ptr, min_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * BLOCK + tl.arange(0, BLOCK))
    tl.store(sum_ptr + row, tl.sum(x, axis=0))
    tl.store(max_ptr + row, tl.max(x, axis=0))
    tl.store(min_ptr + row, tl.min(x, axis=0))


@triton.jit
def _scaled(x_ptr, y_ptr, scale, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(y_ptr + i, x * scale.to(tl.float32), mask=i < n)


@triton.jit
def _libdevice_tanh(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    from triton.language.extra import libdevice

    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(y_ptr + i, libdevice.tanh(x), mask=i < n)


def _run(kernel, *args, **constants):
    with _triton._interpreter(corrected=True):
        kernel[(1,)](*args, **constants)


def _all_floats(dtype, count, rng):
    """Random bit patterns of `dtype` (every exponent, subnormals and zeros included), NaN left out."""
    bits = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}[dtype]
    info = torch.iinfo(bits)
    raw = torch.from_numpy(rng.integers(info.min, info.max, count, dtype=np.int64)).to(bits).view(dtype)
    return raw[~torch.isnan(raw)]


def _same_bits(got, expected):
    assert got.dtype == expected.dtype
    view = torch.int16 if got.element_size() == 2 else torch.int32
    differ = (got.view(view) != expected.view(view)).nonzero().flatten()
    assert not len(differ), [(float(got[i]), float(expected[i])) for i in differ[:5]]


@pytest.mark.parametrize("target", [torch.bfloat16, torch.float16])
def test_float32_converts_to_16_bits_rounding_to_nearest_even_with_exact_subnormals(target):
    special = [1.005859375, 8.786e-44, 3e-39, -3e-39, 1e-45, 6e-8, 3e-8, 65520.0, 3.4e38, -0.0, math.inf]
    x = torch.cat([torch.tensor(special), _all_floats(torch.float32, 4000, np.random.default_rng(1))])
    y = torch.empty(len(x), dtype=target)
    _run(_convert, x, y, len(x), BLOCK=triton.next_power_of_2(len(x)))
    _same_bits(y, x.to(target))


@pytest.mark.parametrize("source", [torch.bfloat16, torch.float16])
def test_16_bits_widen_to_float32_exactly(source):
    x = _all_floats(source, 4000, np.random.default_rng(2))
    y = torch.empty(len(x), dtype=torch.float32)
    _run(_convert, x, y, len(x), BLOCK=triton.next_power_of_2(len(x)))
    _same_bits(y, x.float())


def test_bfloat16_and_integers_convert_by_value():
    ints = torch.tensor([0, 1, -3, 257, 1000, -65535, 2**24 + 1], dtype=torch.int32)
    y = torch.empty(len(ints), dtype=torch.bfloat16)
    _run(_convert, ints, y, len(ints), BLOCK=8)
    _same_bits(y, ints.to(torch.bfloat16))
    back = torch.empty(len(ints), dtype=torch.int32)
    _run(_convert, y, back, len(ints), BLOCK=8)
    assert back.tolist() == y.to(torch.int32).tolist()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_arithmetic_is_each_operation_in_float32_rounded(dtype):
    rng = np.random.default_rng(3)
    issue = torch.tensor([0.5, -1.5, 2.25, -3.0]), torch.tensor([1.5, 0.25, -2.0, -0.5])  # (issue 43's example)
    a = torch.cat([issue[0], torch.from_numpy(rng.standard_normal(500) * 30).float()]).to(dtype)
    b = torch.cat([issue[1], torch.from_numpy(rng.standard_normal(500) * 0.01).float()]).to(dtype)
    n = len(a)
    outs = [torch.empty(n, dtype=dtype) for _ in range(6)]
    lt = torch.empty(n, dtype=torch.int8)
    _run(_binary, a, b, *outs[:5], lt, outs[5], n, BLOCK=triton.next_power_of_2(n))
    for got, expected in zip(outs, (a + b, a - b, a * b, a / b, torch.maximum(a, b), -a)):
        _same_bits(got, expected)
    assert lt.bool().tolist() == (a < b).tolist()
    assert outs[2][:4].float().tolist() == [0.75, -0.375, -4.5, 1.5]


def _tree_sum(x):
    """A tree of additions in x's own dtype, torch rounding each (-0 pads to a power of two)."""
    width = 1 << (x.shape[-1] - 1).bit_length()
    x = torch.cat([x, torch.full((*x.shape[:-1], width - x.shape[-1]), -0.0, dtype=x.dtype)], dim=-1)
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x[..., 0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_reductions_round_every_addition_and_compare_values(dtype):
    x = torch.from_numpy(np.random.default_rng(4).standard_normal((6, 64)) * 4).float().to(dtype)
    x[1] = -x[1].abs()  # (max and min of negative bfloat16 values: the interpreter compares their uint16 bits)
    sums, maxes, mins = (torch.empty(6, dtype=dtype) for _ in range(3))
    with _triton._interpreter(corrected=True):
        _reduce[(6,)](x, sums, maxes, mins, BLOCK=64)
    _same_bits(sums, _tree_sum(x))
    _same_bits(maxes, x.max(dim=1).values)
    _same_bits(mins, x.min(dim=1).values)
    # (one rounding at the end, as numpy's float16 sum or a float32 accumulator gives, is not the GPU's)
    assert not torch.equal(sums, x.float().sum(dim=1).to(dtype))


def test_a_python_float_argument_is_an_fp32_scalar():
    x = torch.from_numpy(np.random.default_rng(5).standard_normal(100)).float()
    y = torch.empty(100)
    _run(_scaled, x, y, 0.1, 100, BLOCK=128)  # (uncorrected: 'float' object has no attribute 'to')
    _same_bits(y, x * torch.tensor(0.1, dtype=torch.float32))


def test_libdevice_functions_compute_as_numpy_does():
    x = torch.linspace(-6, 6, 301, dtype=torch.float32)
    y = torch.full((301,), math.nan)
    _run(_libdevice_tanh, x, y, 301, BLOCK=512)
    # within an ulp of the exact tanh (CUDA's tanhf is within 2): mpmath-free, float64's tanh rounded is exact here
    exact = torch.from_numpy(np.tanh(x.double().numpy()))
    assert ((y.double() - exact).abs() <= torch.finfo(torch.float32).eps * exact.abs()).all()


def test_a_kernel_made_before_the_interpreter_runs_interpreted_and_the_process_is_left_as_it_was():
    from triton.runtime import interpreter
    from triton.runtime.jit import JITFunction

    assert isinstance(_convert, JITFunction)  # (made at import, without TRITON_INTERPRET)
    before = (JITFunction.run, interpreter.InterpreterBuilder.binary_op, interpreter._implicit_cvt)
    x = torch.tensor([1.005859375])
    y = torch.empty(1, dtype=torch.bfloat16)
    _run(_convert, x, y, 1, BLOCK=2)
    assert float(y) == 1.0078125
    assert (JITFunction.run, interpreter.InterpreterBuilder.binary_op, interpreter._implicit_cvt) == before


def test_an_untested_triton_turns_corrections_off_and_skips_16_bit_rows(monkeypatch):
    monkeypatch.setattr(_triton, "TESTED", ((2, 0),))
    with pytest.raises(CandidateSkip, match=r"outside the versions .* 16-bit rows skipped"):
        _triton.prepare("cpu", np.dtype("float16"))
    note, context = _triton.prepare(None, np.dtype("float32"))
    assert "corrections off" in note
    x = torch.tensor([1.005859375])
    y = torch.empty(1, dtype=torch.bfloat16)
    with context:
        _convert[(1,)](x, y, 1, BLOCK=2)
    assert float(y) == 1.0  # the interpreter's own truncation: nothing corrected it
    note, context = _triton.prepare("cuda", np.dtype("float16"))  # (on a GPU nothing is interpreted or skipped)
    assert note == "" and not _triton.interpreted("cuda")


def test_the_uncorrected_interpreter_has_the_bugs_docs_triton_md_reports():
    """The upstream reports' numbers (docs/triton.md), on the interpreter as Triton ships it."""
    from triton.runtime.errors import InterpreterError

    def raw(kernel, *args, **constants):
        with _triton._interpreter(corrected=False):
            kernel[(1,)](*args, **constants)

    x = torch.tensor([1.005859375, 8.786e-44, 3e-39, 0.0])
    y = torch.empty(4, dtype=torch.bfloat16)
    raw(_convert, x, y, 4, BLOCK=4)
    assert y.float().tolist()[:2] == [1.0, pytest.approx(1.1387602e-38, rel=1e-6)]
    assert y.float().tolist()[2] == pytest.approx(1.8367e-40, rel=1e-4)
    a = torch.tensor([0.5, -1.5, 2.25, -3.0], dtype=torch.bfloat16)
    b = torch.tensor([1.5, 0.25, -2.0, -0.5], dtype=torch.bfloat16)
    outs = [torch.empty(4, dtype=torch.bfloat16) for _ in range(6)]
    raw(_binary, a, b, *outs[:5], torch.empty(4, dtype=torch.int8), outs[5], 4, BLOCK=4)
    assert outs[2].float().tolist() == [2.0, pytest.approx(3.6893488e19), 0.0, -2.0]
    with pytest.raises(InterpreterError, match="'float' object has no attribute 'to'"):
        raw(_scaled, torch.ones(4), torch.empty(4), 0.1, 4, BLOCK=4)
    with pytest.raises(InterpreterError, match="cannot convert None"):
        raw(_libdevice_tanh, torch.ones(4), torch.empty(4), 4, BLOCK=4)
