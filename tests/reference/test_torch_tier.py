"""The torch tier of attention (reference/_torch_tier.py) on torch's CPU device: the same bits as the numpy path.

The GPU runs this code on CUDA; here it runs on the CPU so every CI machine checks it. A correctly rounded value is
unique, so both paths must agree bit for bit, on the hard inputs too (masks, fully masked rows, NaN, ties, scores
near overflow, signed zeros, values whose outputs cancel); each path's approximation must lie within the other's
error bound. A CUDA test at the end runs where a GPU is present.
"""

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from softaudit import reference as R
from softaudit.reference import _dd, _formats, _rows, _torch_tier

from .oracle import attention_row, rounded
from .test_properties import bits, dtype_of

torch = pytest.importorskip("torch")

TARGETS = ["float16", "bfloat16", "float32", "float8_e4m3fn", "float8_e5m2"]


def both(q, k, v, mask, dtype, scale=None):
    """The numpy path's and the torch-on-CPU path's Results."""
    numpy = R.evaluate_attention(q, k, v, mask, dtype=dtype, scale=scale, device="numpy")
    torch_cpu = R.evaluate_attention(q, k, v, mask, dtype=dtype, scale=scale, device="cpu")
    return numpy, torch_cpu


def assert_same(numpy, torch_cpu):
    np.testing.assert_array_equal(bits(torch_cpu.value), bits(numpy.value))
    fine = np.isfinite(numpy.hi) & np.isfinite(torch_cpu.hi)
    gap = np.abs((numpy.hi - torch_cpu.hi) + (numpy.lo - torch_cpu.lo))[fine]
    assert (gap <= (numpy.err + torch_cpu.err)[fine]).all()


@st.composite
def problems(draw):
    """Small attention problems with the inputs that make tiers disagree or give up."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = draw(st.sampled_from(TARGETS))
    lq, lk, d, dv = draw(st.integers(1, 5)), draw(st.integers(1, 9)), draw(st.integers(1, 16)), draw(st.integers(1, 4))
    style = draw(st.sampled_from(["gaussian", "huge", "tiny", "ties", "cancel", "signed_zero"]))
    scale = 10.0 ** draw(st.floats(-2, 1.5))
    q, k, v = (rng.standard_normal(s) * scale for s in ((lq, d), (lk, d), (lk, dv)))
    if style == "huge":  # scores far past exp's range: only the top scores count
        q, k = q * 1e3, k * 1e3
    elif style == "tiny":  # values near the target's subnormals
        v = v * float(R.format_of(dtype).max_float) ** -1.2
    elif style == "ties":  # equal keys and values: uniform weights, rational outputs (tier C rounds them)
        k[:] = k[0]
        v = np.round(v)
    elif style == "cancel":  # outputs far below sum p|v|
        v = np.concatenate([v, -v])[:lk]
        k = np.concatenate([k, k])[:lk]
    elif style == "signed_zero":
        v[:, 0] = -0.0
    q, k, v = (a.astype(dtype_of(dtype)) for a in (q, k, v))
    mask = None
    if draw(st.booleans()):
        mask = rng.random((lq, lk)) < draw(st.floats(0.0, 1.0))
    if draw(st.integers(0, 9)) == 0:  # a NaN in a key some query may attend
        k = k.copy()
        k[rng.integers(lk), 0] = np.nan
    return q, k, v, mask, dtype, None if draw(st.booleans()) else draw(st.floats(-2, 2))


@settings(max_examples=120, deadline=None)
@given(problems())
def test_torch_tier_gives_the_numpy_paths_bits(problem):
    q, k, v, mask, dtype, scale = problem
    assert_same(*both(q, k, v, mask, dtype, scale))


@settings(max_examples=15, deadline=None)
@given(dtype=st.sampled_from(TARGETS[:3]), seed=st.integers(0, 2**32 - 1), masked=st.booleans())
def test_torch_tier_matches_plain_mpmath(dtype, seed, masked):
    rng = np.random.default_rng(seed)
    lq, lk, d, dv = 3, 6, 8, 2
    q, k, v = (rng.standard_normal(s).astype(dtype_of(dtype)) for s in ((lq, d), (lk, d), (lk, dv)))
    mask = rng.random((lq, lk)) < 0.6 if masked else np.ones((lq, lk), bool)
    mask[:, 0] = True
    got = R.attention(q, k, v, mask, dtype=dtype, device="cpu").astype(np.float64)
    want = [rounded(lambda prec, i=i: attention_row(q[i], k, v, mask[i], None, prec), dtype) for i in range(lq)]
    np.testing.assert_array_equal(bits(got), bits(np.array(want)))


def test_a_batch_larger_than_one_block_is_split_by_query_rows(monkeypatch):
    """Blocks of query rows (BLOCK scores each): a block of 7 rows leaves a short last one."""
    monkeypatch.setattr(_torch_tier, "BLOCK", 7 * 33)
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal(s).astype(np.float16) for s in ((2, 3, 50, 16), (2, 3, 33, 16), (2, 3, 33, 8)))
    mask = rng.random((3, 50, 33)) < 0.8
    numpy, torch_cpu = both(q, k, v, mask, "float16")
    assert_same(numpy, torch_cpu)
    assert (torch_cpu.tier == 1).mean() > 0.99  # the torch tier decided nearly everything


def test_the_torch_tier_hands_what_it_cannot_decide_to_the_cpu_tiers():
    """Uniform weights over values with a midpoint mean: the output is exactly a rounding tie in float16."""
    k = np.zeros((4, 2), np.float16)
    v = np.array([[1.0], [1.0], [1.0 + 2**-10], [1.0 + 2**-10]], np.float16)  # mean 1 + 2**-11: a tie
    q = np.ones((1, 2), np.float16)
    numpy, torch_cpu = both(q, k, v, None, "float16")
    assert_same(numpy, torch_cpu)
    assert torch_cpu.value[0, 0] == np.float16(1.0)  # ties to even
    assert torch_cpu.tier[0, 0] == 3  # neither float64 tier can decide an exact tie


def test_decide_agrees_with_rounding_both_ends_of_the_interval():
    """Whatever the torch rounding test decides is the rounding of every value in [h - err, h + err]."""
    rng = np.random.default_rng(2)
    for dtype in TARGETS:
        fmt = R.format_of(dtype)
        spacing = 2.0 ** (np.floor(np.log2(fmt.max_float)) - fmt.precision)
        h = np.concatenate(
            [
                rng.standard_normal(4000) * 10.0 ** rng.uniform(-8, 4, 4000),
                # values just beside midpoints, and past the largest finite value
                (np.arange(1, 200) + 0.5) * 2.0 ** (1 - fmt.precision) * (1 + rng.uniform(-1e-9, 1e-9, 199)),
                fmt.max_float + spacing * rng.uniform(-1, 1, 50),
            ]
        )
        err = np.abs(h) * 10.0 ** rng.uniform(-16, -2, len(h))
        rounded, ok = _torch_tier.decide(torch.from_numpy(h), torch.from_numpy(err), fmt)
        # In the format, as the collector stores it: an overflow is inf, or NaN where the format has no inf.
        rounded, ok = rounded.numpy().astype(fmt.dtype).astype(np.float64), ok.numpy()
        low, high = (_formats.round_array(a, fmt).astype(np.float64) for a in (h - err, h + err))
        assert ok.mean() > 0.5
        np.testing.assert_array_equal(bits(rounded[ok]), bits(low[ok]))
        np.testing.assert_array_equal(bits(rounded[ok]), bits(high[ok]))


def test_torch_exp_meets_the_bound_tier_a_assumes():
    """The torch tier trusts float64 exp to LIBM_EXP_REL relative, on this machine's torch CPU kernels."""
    t = -np.concatenate([np.linspace(0, 745, 3001), np.random.default_rng(0).uniform(0, 40, 3000)])
    got = torch.exp(torch.from_numpy(t)).numpy()
    with mpmath.workprec(120):
        worst = max(float(abs(mpmath.mpf(float(g)) / mpmath.exp(float(a)) - 1)) for a, g in zip(t, got) if a > -708)
    assert worst <= _rows.LIBM_EXP_REL


def test_device_choice(monkeypatch):
    assert _torch_tier.device_for("numpy", 1 << 30) is None
    assert _torch_tier.device_for(None, 1 << 30) is None
    assert _torch_tier.device_for("auto", 10) is None  # small problems stay on numpy
    assert _torch_tier.device_for("cpu", 10) == torch.device("cpu")
    monkeypatch.setenv("SOFTAUDIT_REFERENCE_DEVICE", "cpu")
    assert _torch_tier.device_for("auto", 10) == torch.device("cpu")
    monkeypatch.setenv("SOFTAUDIT_REFERENCE_DEVICE", "numpy")
    assert _torch_tier.device_for("auto", 1 << 30) is None
    with pytest.raises(ValueError, match="unknown device"):
        _torch_tier.device_for("gpu7", 10)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            R.attention(np.ones((1, 2)), np.ones((1, 2)), np.ones((1, 1)), dtype="float16", device="cuda")


def test_float64_targets_never_use_the_torch_tier():
    """Tier A serves targets of at most 24 bits; float64 goes to the double-double tier as before."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((4, 8)) for _ in range(3))
    result = R.evaluate_attention(q, k, v, dtype="float64", device="cpu")
    assert not (result.tier == 1).any()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_gives_the_numpy_paths_bits():
    rng = np.random.default_rng(4)
    for dtype in TARGETS:
        q, k, v = (rng.standard_normal((2, 4, 300, 64)).astype(dtype_of(dtype)) for _ in range(3))
        mask = rng.random((4, 300, 300)) < 0.9
        for m in (None, mask):
            numpy = R.evaluate_attention(q, k, v, m, dtype=dtype, device="numpy")
            cuda = R.evaluate_attention(q, k, v, m, dtype=dtype, device="cuda")
            assert_same(numpy, cuda)


@settings(max_examples=25, deadline=None)
@given(problems())
def test_torch_tier_approximations_lie_within_their_bound(problem):
    """|hi - exact| <= err for every element the torch tier decided, the exact value from plain mpmath at 200 bits."""
    q, k, v, mask, dtype, scale = problem
    result = R.evaluate_attention(q, k, v, mask, dtype=dtype, scale=scale, device="cpu")
    keep = np.ones((q.shape[0], k.shape[0]), bool) if mask is None else mask
    for i, c in zip(*np.nonzero(result.tier == 1)):
        exact = attention_row(q[i], k, v, keep[i], scale, 200)[c]
        with mpmath.workprec(200):
            assert abs(mpmath.mpf(float(result.hi[i, c])) - exact) <= result.err[i, c]


def test_float64_inputs_beyond_the_per_row_bounds_range_take_numpys_tier_a():
    """Tiny queries against huge keys: squares in the norms would underflow, so the torch tier declines (numpy's
    per-score tier A decides instead) and the bits stay right; a scale of 1e-250 likewise."""
    rng = np.random.default_rng(6)
    q = rng.standard_normal((4, 8)) * 1e-170
    k = rng.standard_normal((5, 8)) * 1e170
    v = rng.standard_normal((5, 3))
    assert_same(*both(q, k, v, None, "float16"))
    assert_same(*both(q * 1e170, k * 1e-170, v, None, "float32", scale=1e-250))
    assert (
        _torch_tier.run(
            R._attention.prepare(q, k, v, None, None),
            R.format_of("float16"),
            torch.device("cpu"),
            np.ones((1, 4, 3), bool),
            None,
        )
        is False
    )


def test_finite_rows_read_from_the_bits_agree_with_isfinite():
    every_float16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).reshape(-1, 8)
    rng = np.random.default_rng(7)
    patterns = [
        every_float16,
        rng.integers(0, 1 << 32, (4096, 4), dtype=np.uint32).view(np.float32),
        rng.integers(0, 1 << 63, (4096, 4), dtype=np.int64).view(np.float64),
    ]
    patterns[2][::7, 1] = np.inf
    patterns[2][::5, 2] = np.nan
    for a in patterns:
        np.testing.assert_array_equal(R._attention._finite_rows(a), np.isfinite(a).all(axis=-1))


def per_row_decides_nothing(q, k, v, keep, scale):
    o, err = _per_row(q, k, v, keep, scale)
    return o, torch.full_like(err, math.inf)


def per_score_decides_nothing(q, k, v, keep, scale):
    o, lo, err = _per_score(q, k, v, keep, scale)
    return o, lo, torch.full_like(err, math.inf)


_per_row, _per_score = _torch_tier.tier_a, _torch_tier.tier_a_per_score


@settings(max_examples=60, deadline=None)
@given(problems())
def test_the_per_score_pass_gives_the_numpy_paths_bits(problem):
    """With the per-row pass deciding nothing, every pending row goes through tier_a_per_score (and what it
    leaves to tiers B and C): still the same bits."""
    q, k, v, mask, dtype, scale = problem
    _torch_tier.tier_a = per_row_decides_nothing
    try:
        numpy, torch_cpu = both(q, k, v, mask, dtype, scale)
    finally:
        _torch_tier.tier_a = _per_row
    assert_same(numpy, torch_cpu)


def test_the_per_score_pass_decides_in_blocks_of_rows(monkeypatch):
    monkeypatch.setattr(_torch_tier, "tier_a", per_row_decides_nothing)
    monkeypatch.setattr(_torch_tier, "PER_SCORE_BLOCK", 3 * 40 * 16)  # 3 rows per call
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal(s).astype(np.float16) for s in ((2, 11, 16), (2, 40, 16), (2, 40, 8)))
    mask = rng.random((2, 11, 40)) < 0.7
    numpy, torch_cpu = both(q, k, v, mask, "float16")
    assert_same(numpy, torch_cpu)
    assert (torch_cpu.tier == 1).mean() > 0.99


@settings(max_examples=60, deadline=None)
@given(problems())
def test_tier_b_on_the_device_gives_the_numpy_paths_bits(problem):
    """With both tier A passes deciding nothing, every pending row goes through the torch tier B (and what it
    leaves to tier C): the same bits, and each tier-B value within its bound of plain mpmath at 200 bits."""
    q, k, v, mask, dtype, scale = problem
    _torch_tier.tier_a, _torch_tier.tier_a_per_score = per_row_decides_nothing, per_score_decides_nothing
    try:
        numpy, torch_cpu = both(q, k, v, mask, dtype, scale)
    finally:
        _torch_tier.tier_a, _torch_tier.tier_a_per_score = _per_row, _per_score
    assert_same(numpy, torch_cpu)
    keep = np.ones((q.shape[0], k.shape[0]), bool) if mask is None else mask
    for i, c in list(zip(*np.nonzero(torch_cpu.tier == 2)))[:6]:
        exact = attention_row(q[i], k, v, keep[i], scale, 200)[c]
        with mpmath.workprec(200):
            approx = mpmath.mpf(float(torch_cpu.hi[i, c])) + mpmath.mpf(float(torch_cpu.lo[i, c]))
            assert abs(approx - exact) <= torch_cpu.err[i, c]


def test_tier_b_on_the_device_decides_what_tier_a_leaves(monkeypatch):
    monkeypatch.setattr(_torch_tier, "tier_a", per_row_decides_nothing)
    monkeypatch.setattr(_torch_tier, "tier_a_per_score", per_score_decides_nothing)
    monkeypatch.setattr(_torch_tier, "PER_SCORE_BLOCK", 3 * 40 * 16)  # 3 rows per call
    rng = np.random.default_rng(10)
    q, k, v = (rng.standard_normal(s).astype(np.float16) for s in ((2, 11, 16), (2, 40, 16), (2, 40, 8)))
    numpy, torch_cpu = both(q, k, v, rng.random((2, 11, 40)) < 0.7, "float16")
    assert_same(numpy, torch_cpu)
    assert (torch_cpu.tier == 2).mean() > 0.99


def test_exp_dd_and_pairwise_dd_in_torch_give_numpys_bits():
    """The torch tier's double-double exp and sum repeat _dd's IEEE operations on the same table: the same bits
    over exp's whole range, its clamp, and NaN."""
    rng = np.random.default_rng(9)
    th = np.concatenate([rng.uniform(-2100, 709, 20000), rng.uniform(-1, 1, 5000), [0.0, -0.0, 709.7, -745.2, np.nan]])
    tl = th * 2.0**-60 * rng.uniform(-1, 1, th.shape)
    for numpy_part, torch_part in zip(
        _dd.exp_dd(th, tl), _torch_tier._exp_dd(torch.from_numpy(th), torch.from_numpy(tl))
    ):
        np.testing.assert_array_equal(bits(torch_part.numpy()), bits(numpy_part))
    h, lo = _dd.two_prod(rng.standard_normal((7, 37)), rng.standard_normal((7, 37)))
    for numpy_part, torch_part in zip(
        _dd.pairwise_sum(h, lo), _torch_tier._pairwise_dd(torch.from_numpy(h), torch.from_numpy(lo))
    ):
        np.testing.assert_array_equal(bits(torch_part.numpy()), bits(numpy_part))


@settings(max_examples=25, deadline=None)
@given(problems())
def test_per_score_approximations_lie_within_their_bound(problem):
    q, k, v, mask, _, scale = problem
    keep = np.ones((q.shape[0], k.shape[0]), bool) if mask is None else mask
    as_tensor = (torch.from_numpy(a.astype(np.float64)) for a in (q, k, v))
    o, _, err = _torch_tier.tier_a_per_score(*as_tensor, None if mask is None else torch.from_numpy(mask), scale)
    for i, c in zip(*np.nonzero(np.isfinite(err.numpy()) & keep.any(axis=1)[:, None])):
        exact = attention_row(q[i], k, v, keep[i], scale, 200)[c]
        with mpmath.workprec(200):
            assert abs(mpmath.mpf(float(o[i, c])) - exact) <= err[i, c].item()
